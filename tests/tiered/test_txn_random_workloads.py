"""Seeded random transactional workloads on a tiered partition ("random transactional
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
from tests.support.txn_workload import TxnWorkload
from tests.tiered.conftest import TP


@pytest.mark.parametrize("seed", range(12))
def test_random_transactional_workload_on_a_tiered_partition(make_world, seed: int) -> None:
    rnd = random.Random(seed)
    w = make_world(config={"local.retention.ms": rnd.choice([0, -1]), "delete.retention.ms": 1000})
    clock = w.clock
    workload = TxnWorkload(rnd, clock=clock)
    for step in range(60):
        log = w.log
        op = rnd.random()
        if workload.append(log, op, step):
            pass  # a record, a transactional record or a marker
        elif op < 0.8:
            log.roll()
        elif op < 0.9:
            clock.advance(1)
            w.rlm.tier(TP)
        else:
            w.clean()
        clock.advance(rnd.choice([1, 10, 600]))
        workload.check(w.read_all(READ_COMMITTED), w.log.last_stable_offset, step)
