"""KAFKA-20036: a segment whose offsets overflow its base offset's 32-bit range (as an
old Kafka could write) was marked uncleanable forever. It is split, then cleaned."""

from __future__ import annotations

from pathlib import Path

from log.clock import MockClock
from log.config import LogConfig
from log.index.txn_index import AbortedTxn
from log.local_log import LocalLog
from log.record import RecordBatchBuilder
from tests.cleaner.test_cleaner import _records, _round

FAR = 2**31 + 10  # past the first segment's relative range


def _batch(base: int, key: bytes, value: bytes, ts: int) -> bytes:
    b = RecordBatchBuilder(base)
    b.append(base, ts, key, value)
    return bytes(b.build())


def _overflowed_log(tmp_path: Path, clock: MockClock) -> LocalLog:
    """<dir>/0.log holds offsets 0, 1 and FAR, FAR+1 (an overflow); the active segment starts at FAR+2."""
    d = tmp_path / "t-0"
    d.mkdir()
    ts = clock.milliseconds()
    (d / f"{0:020d}.log").write_bytes(
        _batch(0, b"a", b"old-a", ts) + _batch(1, b"b", b"old-b", ts)
        + _batch(FAR, b"a", b"new-a", ts) + _batch(FAR + 1, b"c", b"c", ts))
    (d / f"{FAR + 2:020d}.log").write_bytes(_batch(FAR + 2, b"d", b"d", ts))
    return LocalLog(d, LogConfig.from_dict({"cleanup.policy": "compact"}), clock=clock)


def test_an_overflowed_segment_is_split_then_cleaned(tmp_path: Path, clock: MockClock) -> None:
    log = _overflowed_log(tmp_path, clock)
    first = log.segments.first()
    assert first.has_overflow()
    end, _stats = _round(log, clock.milliseconds())
    assert end == FAR + 2
    assert _records(log) == [(1, b"b", b"old-b"), (FAR, b"a", b"new-a"), (FAR + 1, b"c", b"c"),
                             (FAR + 2, b"d", b"d")]
    assert not any(s.has_overflow() for s in log.segments)
    # every segment's offsets fit its base, and a reopen finds the same log
    log.close()
    again = LocalLog(log.dir, log.config, clock=clock)
    assert _records(again) == [(1, b"b", b"old-b"), (FAR, b"a", b"new-a"), (FAR + 1, b"c", b"c"),
                               (FAR + 2, b"d", b"d")]


def test_split_copies_batches_byte_for_byte_and_keeps_txn_entries(tmp_path: Path, clock: MockClock) -> None:
    log = _overflowed_log(tmp_path, clock)
    seg = log.segments.first()
    original = seg.log_path.read_bytes()
    seg.txn_index.append(AbortedTxn(7, 0, FAR + 1, FAR + 2))  # marker in the upper half
    news = log.split_overflowed_segment(seg)
    assert [n.base_offset for n in news] == [0, FAR]
    assert b"".join(n.log_path.read_bytes() for n in news) == original
    assert [t.producer_id for t in news[0].txn_index.all()] == []
    assert [t.producer_id for t in news[1].txn_index.all()] == [7]
    assert not list(log.dir.glob("*.cleaned")) and not list(log.dir.glob("*.swap"))


def test_an_overflowed_segment_with_index_entries_past_its_range_still_loads(tmp_path: Path,
                                                                            clock: MockClock) -> None:
    d = tmp_path / "t-0"
    d.mkdir()
    ts = clock.milliseconds()
    big = b"x" * 5000  # > index.interval.bytes: the rebuild wants an entry for the far batch
    (d / f"{0:020d}.log").write_bytes(_batch(0, b"a", big, ts) + _batch(FAR, b"a", big, ts))
    (d / f"{FAR + 1:020d}.log").write_bytes(_batch(FAR + 1, b"d", b"d", ts))
    log = LocalLog(d, LogConfig.from_dict({"cleanup.policy": "compact"}), clock=clock)
    assert [r[0] for r in _records(log)] == [0, FAR, FAR + 1]
    _round(log, clock.milliseconds())
    assert [r[0] for r in _records(log)] == [FAR, FAR + 1]
