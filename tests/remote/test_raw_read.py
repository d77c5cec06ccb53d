"""RawTieredRead: a Kafka consumer's view of the stored bytes it is sent, over both tiers. Decoding
the fetched batches as Kafka's consumer does (skip below the fetch offset, drop aborted
transactions with the aborted list) gives exactly what the local log holds; timestamps and
the max timestamp are found in either tier."""

from __future__ import annotations

from pathlib import Path

import pytest

from log.clock import MockClock
from log.errors import OffsetOutOfRangeError
from log.fetch import READ_COMMITTED, READ_UNCOMMITTED, records_from_batches
from log.offset_lookup import end_offset_for_epoch, local_offset_for_timestamp
from log.record import iter_batches
from log.types import EpochEntry
from remote.raw_read import RawTieredRead
from tests.remote.tiering import TP, TierEnv, as_tuple, local_records, produce


@pytest.fixture
def env(tmp_path: Path, clock: MockClock) -> TierEnv:
    e = TierEnv(tmp_path, clock, cache_bytes=16 * 1024, chunk_bytes=1024)
    yield e
    e.close()


def _consume(raw: RawTieredRead, log, isolation: str, start: int, max_bytes: int) -> list[tuple]:
    committed = isolation == READ_COMMITTED
    end = log.last_stable_offset if committed else log.high_watermark
    out, off = [], start
    while off < end:
        res = raw.fetch(log, off, max_bytes, committed=committed)
        assert (res.aborted is not None) == committed
        batches = [b for _p, b in iter_batches(res.data)]
        assert batches, off
        assert batches[0].last_offset >= off  # the batch holding the offset (or the next one present)
        page = records_from_batches(batches, off, isolation=isolation, aborted=res.aborted or [],
                                    max_records=10**9)
        out.extend(as_tuple(r) for r in page.records)
        off = batches[-1].next_offset
    return out


def test_fetch_over_both_tiers_reads_what_the_local_log_held(env: TierEnv) -> None:
    log = env.create(local_retention_ms=-1)
    produce(log, batches=40, clock=env.clock)
    log.roll()
    produce(log, batches=8, clock=env.clock, seed_key="late")
    expected = {iso: local_records(log, iso) for iso in (READ_UNCOMMITTED, READ_COMMITTED)}
    env.rlm.copy_rolled_segments(TP)
    env.clock.advance(1)
    log.delete_segments(log.all_segments()[:-2])
    raw = RawTieredRead(env.rlm.read_path)
    assert raw.log_start_offset(log) == 0 < log.log_start_offset
    for iso, recs in expected.items():
        for start in range(0, log.log_end_offset, 11):
            for max_bytes in (1, 700, 1 << 20):
                assert _consume(raw, log, iso, start, max_bytes) == [r for r in recs if r[0] >= start]
    with pytest.raises(OffsetOutOfRangeError):
        raw.fetch(log, log.log_end_offset + 1, 100)
    assert raw.fetch(log, log.log_end_offset, 100).data == b""
    # a partition byte limit below the first batch returns nothing when not the first partition
    assert raw.fetch(log, 0, 1, min_one=False).data == b""


def test_timestamps_over_both_tiers(env: TierEnv) -> None:
    log = env.create(local_retention_ms=-1)
    produce(log, batches=40, clock=env.clock)
    log.roll()
    produce(log, batches=8, clock=env.clock, seed_key="late")
    recs = local_records(log, READ_UNCOMMITTED)
    probes = sorted({r[3] for r in recs})
    want = {ts: next(r for r in recs if r[3] >= ts) for ts in probes[::3] + [0]}
    env.rlm.copy_rolled_segments(TP)
    env.clock.advance(1)
    log.delete_segments(log.all_segments()[:-2])
    raw = RawTieredRead(env.rlm.read_path)
    for ts, rec in want.items():
        got = raw.offset_for_timestamp(log, ts)
        assert got is not None and (got.offset, got.timestamp) == (rec[0], rec[3]), ts
    assert raw.offset_for_timestamp(log, probes[-1] + 1) is None
    first_local = local_offset_for_timestamp(log, 0)
    assert first_local is not None and first_local.offset == log.log_start_offset
    top = raw.max_timestamp(log)
    assert top is not None and top.timestamp == probes[-1]


def test_end_offset_for_epoch() -> None:
    entries = [EpochEntry(0, 0), EpochEntry(2, 10), EpochEntry(5, 30)]
    assert end_offset_for_epoch(entries, 5, 42) == (5, 42)
    assert end_offset_for_epoch(entries, 0, 42) == (0, 10)
    assert end_offset_for_epoch(entries, 1, 42) == (0, 10)
    assert end_offset_for_epoch(entries, 3, 42) == (2, 30)
    assert end_offset_for_epoch(entries, 6, 42) == (-1, -1)
    assert end_offset_for_epoch([], 0, 42) == (-1, -1)
    assert end_offset_for_epoch(entries[1:], 1, 42) == (1, 10)
