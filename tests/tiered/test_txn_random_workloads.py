"""Seeded random transactional workloads on a tiered partition (issue #11: "random transactional
workloads break a tiered topic within 5-104 steps").

Each step produces (plain records, tombstones, transactional records of three producers), writes
COMMIT/ABORT markers, rolls, tiers or runs a tiered clean, then checks read_committed against a
small model: every visible record is committed and below the LSO, with its original key and value
at its original offset, and every key's newest committed value (below the LSO) is the one seen.
Seeds 0, 1, 2 and 8 fail on the code before the forward aborted-transaction walk; the larger model-based
state machine lives in tests/model/.
"""

from __future__ import annotations

import random

import pytest

from log.fetch import READ_COMMITTED
from log.local_log import RecordSpec
from log.record import ControlRecordType
from tests.tiered.conftest import TP, World

Record = tuple[bytes, bytes | None]


def _check(w: World, records: dict[int, Record], status: dict[int, str]) -> None:
    lso = w.log.last_stable_offset
    visible = w.read_all(READ_COMMITTED)
    for off, k, v in visible:
        assert off < lso and status.get(off) == "committed", (off, status.get(off), lso)
        assert records[off] == (k, v), off
    expected: dict[bytes, tuple[int, bytes | None]] = {}
    for off in sorted(records):
        if off < lso and status[off] == "committed":
            expected[records[off][0]] = (off, records[off][1])
    got = {k: (off, v) for off, k, v in visible}
    for k, (off, v) in expected.items():
        if v is None:
            assert k not in got or got[k][1] is None, (k, got.get(k))
        else:
            assert got.get(k) == (off, v), (k, (off, v), got.get(k))
    assert set(got) <= set(expected)


@pytest.mark.parametrize("seed", range(12))
def test_random_transactional_workload_on_a_tiered_partition(make_world, seed: int) -> None:
    rnd = random.Random(seed)
    w = make_world(config={"local.retention.ms": rnd.choice([0, -1]), "delete.retention.ms": 1000})
    clock = w.clock
    records: dict[int, Record] = {}
    status: dict[int, str] = {}
    open_txn: dict[int, list[int]] = {}
    seq: dict[int, int] = {}
    for step in range(60):
        log = w.log
        op = rnd.random()
        if op < 0.3:
            k = f"k{rnd.randrange(4)}".encode()
            v = None if rnd.random() < 0.1 else f"p{step}".encode()
            off = log.append_records([RecordSpec(k, v, timestamp=clock.milliseconds())]).base_offset
            records[off], status[off] = (k, v), "committed"
        elif op < 0.55:
            pid = rnd.choice([5, 6, 7])
            k, v = f"k{rnd.randrange(4)}".encode(), f"t{pid}-{step}".encode()
            s = seq.get(pid, 0)
            off = log.append_records([RecordSpec(k, v, timestamp=clock.milliseconds())], producer_id=pid,
                                     producer_epoch=0, base_sequence=s, transactional=True).base_offset
            seq[pid] = s + 1
            records[off], status[off] = (k, v), "open"
            open_txn.setdefault(pid, []).append(off)
        elif op < 0.7 and open_txn:
            pid = rnd.choice(sorted(open_txn))
            commit = rnd.random() < 0.5
            log.append_marker(pid, 0, ControlRecordType.COMMIT if commit else ControlRecordType.ABORT)
            for o in open_txn.pop(pid):
                status[o] = "committed" if commit else "aborted"
        elif op < 0.8:
            log.roll()
        elif op < 0.9:
            clock.advance(1)
            w.rlm.tier(TP)
        else:
            w.clean()
        clock.advance(rnd.choice([1, 10, 600]))
        _check(w, records, status)
