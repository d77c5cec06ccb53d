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
from log.local_log import LocalLog, RecordSpec
from log.record import ControlRecordType


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
    records: dict[int, tuple[bytes, bytes | None]] = {}
    status: dict[int, str] = {}
    open_txn: dict[int, list[int]] = {}
    seq: dict[int, int] = {}
    checkpoint: int | None = None
    for step in range(80):
        op = rnd.random()
        if op < 0.3:
            k, v = f"k{rnd.randrange(4)}".encode(), (None if rnd.random() < 0.1 else f"p{step}".encode())
            off = log.append_records([RecordSpec(k, v)]).base_offset
            records[off], status[off] = (k, v), "committed"
        elif op < 0.55:
            pid = rnd.choice([5, 6, 7])
            k, v = f"k{rnd.randrange(4)}".encode(), f"t{pid}-{step}".encode()
            s = seq.get(pid, 0)
            off = log.append_records([RecordSpec(k, v)], producer_id=pid, producer_epoch=0, base_sequence=s,
                                     transactional=True).base_offset
            seq[pid] = s + 1
            records[off], status[off] = (k, v), "open"
            open_txn.setdefault(pid, []).append(off)
        elif op < 0.7 and open_txn:
            pid = rnd.choice(sorted(open_txn))
            commit = rnd.random() < 0.5
            log.append_marker(pid, 0, ControlRecordType.COMMIT if commit else ControlRecordType.ABORT)
            for o in open_txn.pop(pid):
                status[o] = "committed" if commit else "aborted"
        elif op < 0.82:
            log.roll()
        else:
            now = clock.milliseconds()
            o = cleanable_offsets(log, checkpoint, now)
            ltc = LogToClean(log.topic_partition, log, o.first_dirty_offset, o.first_uncleanable_dirty_offset)
            checkpoint, _stats = Cleaner(map_class(cfg.dedupe_buffer_per_thread), cfg).do_clean(ltc, now)
        clock.advance(rnd.choice([1, 10, 600]))
        lso = log.last_stable_offset
        visible = _read_committed(log)
        for off, k, v in visible:
            assert off < lso and status.get(off) == "committed", (step, off, status.get(off))
            assert records[off] == (k, v), (step, off)
        expected = {records[off][0]: (off, records[off][1]) for off in sorted(records)
                    if off < lso and status[off] == "committed"}
        got = {k: (off, v) for off, k, v in visible}
        for k, (off, v) in expected.items():
            if v is None:
                assert k not in got or got[k][1] is None, (step, k, got.get(k))
            else:
                assert got.get(k) == (off, v), (step, k, (off, v), got.get(k))
        assert set(got) <= set(expected)
