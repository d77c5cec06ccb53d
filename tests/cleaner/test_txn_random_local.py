"""Seeded random transactional workloads on a local partition, cleaned by both offset maps (the
pure-Python SkimpyOffsetMap path and the record kernels' CompactOffsetMap path), checked after
every step: read_committed shows only committed records below the LSO, at their offsets with
their values, and each key's newest committed value. Small maps force multiple passes.

Seed 21 failed on the code that recorded an ABORT entry's LSO of 0 as "none" (the aborted
record at offset 0 became visible after a clean).
"""

from __future__ import annotations

import random

import pytest

from cleaner.cleaner import Cleaner
from cleaner.config import CleanerConfig
from cleaner.log_to_clean import LogToClean, cleanable_offsets
from cleaner.offset_map import CompactOffsetMap, OffsetMap, SkimpyOffsetMap
from log.clock import MockClock
from log.fetch import READ_COMMITTED, read_local
from log.local_log import LocalLog
from tests.support.txn_workload import TxnWorkload


def _read_committed(log: LocalLog) -> list[tuple[int, bytes | None, bytes | None]]:
    out: list[tuple[int, bytes | None, bytes | None]] = []
    off, lso = log.log_start_offset, log.last_stable_offset
    while off < lso:
        res = read_local(log, off, max_bytes=1 << 20, isolation=READ_COMMITTED, max_records=10_000)
        out += [(r.offset, r.key, r.value) for r in res.records]
        if res.next_offset <= off:
            break
        off = res.next_offset
    return out


@pytest.mark.parametrize("map_class", [SkimpyOffsetMap, CompactOffsetMap])
@pytest.mark.parametrize("seed", [21, *range(8)])
def test_random_transactional_workload_on_a_local_partition(make_log, clock: MockClock, seed: int,
                                                            map_class: type[OffsetMap]) -> None:
    rnd = random.Random(seed)
    log = make_log(**{"cleanup.policy": "compact", "delete.retention.ms": 1000})
    cfg = CleanerConfig(dedupe_buffer_size=rnd.choice([24 * 3, 1 << 16]), load_factor=0.9)
    workload = TxnWorkload(rnd)
    checkpoint: int | None = None
    for step in range(80):
        op = rnd.random()
        if workload.append(log, op, step):
            pass  # a record, a transactional record or a marker
        elif op < 0.82:
            log.roll()
        else:
            now = clock.milliseconds()
            o = cleanable_offsets(log, checkpoint, now)
            ltc = LogToClean(log.topic_partition, log, o.first_dirty_offset, o.first_uncleanable_dirty_offset)
            checkpoint, _stats = Cleaner(map_class(cfg.dedupe_buffer_per_thread), cfg).do_clean(ltc, now)
        clock.advance(rnd.choice([1, 10, 600]))
        workload.check(_read_committed(log), log.last_stable_offset, step)
