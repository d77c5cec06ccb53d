"""The unified read path (RemoteLogManager.read) and the remote read cache."""

from __future__ import annotations

import threading
from pathlib import Path

import pytest

from log.clock import MockClock
from log.errors import CorruptRecordError, InvalidRequestError, OffsetOutOfRangeError
from log.fetch import READ_COMMITTED, READ_UNCOMMITTED
from log.local_log import RecordSpec
from log.record import ControlRecordType, RecordBatchBuilder
from remote.read_cache import RemoteReadCache
from tests.remote.tiering import TP, TierEnv, local_records, produce, read_all


@pytest.fixture
def env(tmp_path: Path, clock: MockClock) -> TierEnv:
    e = TierEnv(tmp_path, clock, cache_bytes=16 * 1024, chunk_bytes=1024)
    yield e
    e.close()


def _gappy_batch(offsets: list[int], last: int, ts: int = 1000) -> bytes:
    """A batch as the cleaner leaves it: records at ``offsets``, last offset delta to ``last``."""
    b = RecordBatchBuilder(offsets[0])
    for off in offsets:
        b.append(off, ts + off, f"k{off}".encode(), f"v{off}".encode())
    return b.build(last_offset_delta=last - offsets[0])


def test_reads_cross_from_remote_to_local_at_every_start_offset(env: TierEnv) -> None:
    log = env.create(local_retention_ms=-1)
    produce(log, batches=40, clock=env.clock)
    log.roll()
    produce(log, batches=8, clock=env.clock, seed_key="late")  # stays local (active)
    expected = {iso: local_records(log, iso) for iso in (READ_UNCOMMITTED, READ_COMMITTED)}
    env.rlm.copy_rolled_segments(TP)
    env.clock.advance(1)
    log.delete_segments(log.all_segments()[:-2])  # expire most local copies by hand
    assert env.rlm.log_start_offset(TP) == 0 < log.log_start_offset
    for iso, recs in expected.items():
        for start in range(0, log.log_end_offset, 9):
            got = read_all(env.rlm, TP, iso, start=start, max_records=3, max_bytes=1)
            assert got == [r for r in recs if r[0] >= start], (iso, start)


def test_compaction_gaps_read_as_the_next_offset_present(env: TierEnv) -> None:
    log = env.create(local_retention_ms=0)
    # segment [0..9] holds 0, 3 (4..9 compacted away); segment [10..29] holds 20, 25
    log.append_batches(_gappy_batch([0, 3], 9), from_client=False, assign_offsets=False)
    log.roll()
    log.append_batches(_gappy_batch([20, 25], 29), from_client=False, assign_offsets=False)
    log.roll()
    log.append_batches(_gappy_batch([30], 30), from_client=False, assign_offsets=False)
    env.clock.advance(10)
    assert env.rlm.tier(TP).copied == [0, 10]
    assert log.log_start_offset == 30
    cases = {0: 0, 1: 3, 3: 3, 4: 20, 9: 20, 10: 20, 19: 20, 21: 25, 26: 30, 29: 30, 30: 30}
    for target, first in cases.items():
        res = env.rlm.read(TP, target)
        assert res.records and res.records[0].offset == first, target
        assert res.log_start_offset == 0 and res.high_watermark == 31
    assert env.rlm.read(TP, 31).records == []


def test_out_of_range_offsets_name_the_valid_range(env: TierEnv) -> None:
    log = env.create(local_retention_ms=0)
    for _i in range(30):
        log.append_records([RecordSpec(b"k", b"v" * 100)])
    env.clock.advance(1)
    env.rlm.tier(TP)
    with pytest.raises(OffsetOutOfRangeError, match=r"offset 31 .*valid offsets are \[0, 30\]"):
        env.rlm.read(TP, 31)
    with pytest.raises(OffsetOutOfRangeError, match=r"offset -1 "):
        env.rlm.read(TP, -1)
    with pytest.raises(InvalidRequestError):
        env.rlm.read(TP, 0, isolation="dirty")


def test_read_committed_finds_abort_markers_in_later_segments(env: TierEnv) -> None:
    log = env.create(local_retention_ms=0, segment_bytes=400)
    log.append_records([RecordSpec(b"a", b"txn" * 30)], producer_id=5, producer_epoch=0, base_sequence=0,
                       transactional=True)
    for i in range(12):  # the transaction spans several segments before its ABORT marker
        log.append_records([RecordSpec(f"n{i}".encode(), b"x" * 80)])
    log.append_marker(5, 0, ControlRecordType.ABORT)
    log.append_records([RecordSpec(b"tail", b"t")])
    log.roll()
    env.clock.advance(1)
    expected = local_records(log, READ_COMMITTED)
    assert 0 not in [r[0] for r in expected]
    env.rlm.tier(TP)
    assert len(env.rlm.remote_segments(TP)) > 3
    # a fetch of just the first batch(es) must already hide the aborted record
    res = env.rlm.read(TP, 0, isolation=READ_COMMITTED, max_bytes=1)
    assert [r.offset for r in res.records] in ([], [1])
    res = env.rlm.read(TP, 0, isolation=READ_COMMITTED)
    assert res.records[0].offset == 1
    assert read_all(env.rlm, TP, READ_COMMITTED, max_bytes=1) == expected
    assert read_all(env.rlm, TP, READ_UNCOMMITTED)[0][0] == 0


def test_abort_marker_still_local_hides_remote_records(env: TierEnv) -> None:
    log = env.create(local_retention_ms=0, segment_bytes=400)
    for i in range(6):
        log.append_records([RecordSpec(f"n{i}".encode(), b"x" * 80)])
    log.roll()
    log.append_records([RecordSpec(b"a", b"txn")], producer_id=5, producer_epoch=0, base_sequence=0,
                       transactional=True)
    log.roll()
    log.append_marker(5, 0, ControlRecordType.ABORT)  # stays in the active segment
    env.clock.advance(1)
    expected = local_records(log, READ_COMMITTED)
    env.rlm.tier(TP)
    assert log.log_start_offset == log.active_segment.base_offset
    assert read_all(env.rlm, TP, READ_COMMITTED) == expected
    assert 6 not in [r[0] for r in expected]


def test_a_batch_bigger_than_the_fetch_window_is_fetched_whole(env: TierEnv) -> None:
    log = env.create(local_retention_ms=0, segment_bytes=1 << 20)
    big = bytes(range(256)) * 1024  # 256 KiB, incompressible enough, > 64 KiB window
    log.append_records([RecordSpec(b"small", b"s")])
    log.append_records([RecordSpec(b"big", big)])
    log.append_records([RecordSpec(b"after", b"a")])
    log.roll()
    env.clock.advance(1)
    env.rlm.tier(TP)
    res = env.rlm.read(TP, 1, max_bytes=10)
    assert [r.value for r in res.records] == [big]
    assert res.next_offset == 2
    assert [r.offset for r in env.rlm.read(TP, 0, max_bytes=10).records] == [0]
    # the 256 KiB batch does not fit the 16 KiB cache: served, not cached, budget kept
    assert env.rlm.cache.used_bytes <= 16 * 1024


def test_read_cache_stays_within_its_byte_budget_and_hits(env: TierEnv) -> None:
    log = env.create(local_retention_ms=0, segment_bytes=4096)
    produce(log, batches=250, clock=env.clock)
    log.roll()
    env.clock.advance(1)
    expected = local_records(log, READ_UNCOMMITTED)
    env.rlm.tier(TP)
    remote_bytes = env.rlm.remote_log_size(TP)
    assert remote_bytes > 2 * 16 * 1024
    assert read_all(env.rlm, TP, READ_UNCOMMITTED, max_bytes=500) == expected
    stats = env.rlm.cache.stats()
    assert stats.used_bytes <= 16 * 1024 and env.rlm.cache.disk_bytes() <= 16 * 1024
    assert stats.evictions > 0 and stats.hits > stats.misses  # sequential small fetches reuse chunks
    # every chunk was fetched from the store once per pass, despite many small fetches
    assert stats.bytes_fetched < 2 * remote_bytes


def test_corrupt_remote_bytes_are_reported_with_the_object_key(env: TierEnv) -> None:
    log = env.create(local_retention_ms=0)
    produce(log, batches=20, clock=env.clock)
    log.roll()
    env.clock.advance(1)
    env.rlm.tier(TP)
    md = env.rlm.remote_segments(TP)[0]
    key = env.rsm.object_key(md)
    data = bytearray(env.inner.get(key))
    data[70] ^= 0xFF  # inside the first batch's records: CRC mismatch
    env.inner.put(key, bytes(data))
    with pytest.raises(CorruptRecordError, match=md.id):
        env.rlm.read(TP, 0)


def test_read_after_the_remote_segment_was_replaced_retries(env: TierEnv, monkeypatch) -> None:
    """A segment deleted between the metadata lookup and the fetch is looked up again."""
    log = env.create(local_retention_ms=0)
    produce(log, batches=20, clock=env.clock)
    log.roll()
    env.clock.advance(1)
    expected = local_records(log, READ_UNCOMMITTED)
    env.rlm.tier(TP)
    env.store.inject("get_range", "not_found", times=1)
    assert read_all(env.rlm, TP, READ_UNCOMMITTED) == expected


# ---- RemoteReadCache unit tests ------------------------------------------------------------------

def test_cache_range_assembly_eviction_and_invalidation(tmp_path: Path) -> None:
    blob = bytes(i % 251 for i in range(10_000))
    fetched: list[tuple[int, int]] = []

    def fetch(lo: int, hi: int) -> bytes:
        fetched.append((lo, hi))
        return blob[lo:hi]

    cache = RemoteReadCache(tmp_path / "c", 3000, chunk_bytes=1000)
    assert cache.read_range("seg", len(blob), 1500, 3700, fetch) == blob[1500:3700]
    assert fetched == [(1000, 2000), (2000, 3000), (3000, 4000)]
    assert cache.read_range("seg", len(blob), 2100, 2200, fetch) == blob[2100:2200]
    assert len(fetched) == 3  # hit
    assert cache.read_range("seg", len(blob), 9500, 20_000, fetch) == blob[9500:]
    assert cache.used_bytes <= 3000 and cache.disk_bytes() == cache.used_bytes
    assert cache.stats().evictions == 1
    cache.invalidate_segment("seg")
    assert cache.used_bytes == 0 and cache.disk_bytes() == 0
    assert cache.read_range("seg", len(blob), 0, 0, fetch) == b""
    with pytest.raises(InvalidRequestError):
        cache.read_range("seg", len(blob), 5, 2, fetch)


def test_cache_entries_larger_than_the_budget_are_not_kept(tmp_path: Path) -> None:
    cache = RemoteReadCache(tmp_path / "c", 100)
    assert cache.get("big", lambda: b"x" * 500) == b"x" * 500
    assert cache.used_bytes == 0 and cache.stats().misses == 1


def test_cache_concurrent_misses_fetch_once(tmp_path: Path) -> None:
    cache = RemoteReadCache(tmp_path / "c", 1 << 20)
    calls = []
    gate = threading.Event()

    def slow() -> bytes:
        calls.append(1)
        gate.wait(5)
        return b"payload"

    results: list[bytes] = []
    threads = [threading.Thread(target=lambda: results.append(cache.get("k", slow))) for _ in range(8)]
    for t in threads:
        t.start()
    gate.set()
    for t in threads:
        t.join(10)
    assert results == [b"payload"] * 8 and len(calls) == 1


def test_cache_directory_is_adopted_on_start(tmp_path: Path) -> None:
    """Entries are immutable, so a restart keeps them (tests/remote/test_read_cache_persistence.py)."""
    d = tmp_path / "c"
    first = RemoteReadCache(d, 1 << 20)
    first.get("a", lambda: b"1234")
    assert first.disk_bytes() == 4
    first.close()
    second = RemoteReadCache(d, 1 << 20)
    assert second.disk_bytes() == 4 and second.used_bytes == 4
    assert second.get("a", lambda: b"never") == b"1234" and second.stats().misses == 0


def _tiered_segment(env: TierEnv):
    log = env.create(local_retention_ms=0)
    produce(log, batches=20, clock=env.clock)
    log.roll()
    env.clock.advance(1)
    expected = local_records(log, READ_UNCOMMITTED)
    env.rlm.tier(TP)
    return env.rlm.remote_segments(TP)[0], expected


def test_a_base_offset_damaged_outside_the_crc_is_reported_not_served(env: TierEnv) -> None:
    """Regression (soak F3): a batch's base offset lies outside its CRC, so a flipped byte
    there was served (a record at offset 25332747903959836 for one acked at 796)."""
    md, _ = _tiered_segment(env)
    key = env.rsm.object_key(md)
    data = bytearray(env.inner.get(key))
    data[1] ^= 0x5A  # high bytes of the first batch's base offset
    env.inner.put(key, bytes(data))
    with pytest.raises(CorruptRecordError, match="outside the segment"):
        env.rlm.read(TP, 0)


def test_bytes_damaged_on_the_way_once_are_fetched_again(env: TierEnv, monkeypatch) -> None:
    md, expected = _tiered_segment(env)
    real = env.inner.get_range
    damaged = []

    def flip_once(key: str, start: int, end: int) -> bytes:
        data = real(key, start, end)
        if key.endswith(".log") and not damaged:
            damaged.append(key)
            data = bytearray(data)
            data[70] ^= 0xFF  # CRC mismatch in the first batch
        return bytes(data)

    monkeypatch.setattr(env.inner, "get_range", flip_once)
    assert read_all(env.rlm, TP, READ_UNCOMMITTED) == expected
    assert damaged


def test_log_start_offset_asks_the_metadata_store_only_when_the_local_log_starts_above_0(
        env: TierEnv, monkeypatch: pytest.MonkeyPatch) -> None:
    """No offset is below 0: while the local log starts there, the earliest remote segment
    cannot change the answer, and a read makes no metadata query for it."""
    log = env.create(local_retention_ms=-1)
    produce(log, batches=20, clock=env.clock)
    log.roll()
    env.rlm.copy_rolled_segments(TP)
    calls = []
    real = env.md.remote_log_segment_metadata

    def counting(tp, offset):  # type: ignore[no-untyped-def]
        calls.append(offset)
        return real(tp, offset)

    monkeypatch.setattr(env.md, "remote_log_segment_metadata", counting)
    assert log.log_start_offset == 0 and env.rlm.log_start_offset(TP) == 0
    assert env.rlm.read(TP, 5, max_records=2).log_start_offset == 0
    assert calls == []
    env.clock.advance(1)
    log.delete_segments(log.all_segments()[:1])  # the local log now starts above 0
    assert env.rlm.log_start_offset(TP) == 0 < log.log_start_offset
    assert calls == [0]
