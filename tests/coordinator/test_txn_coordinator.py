"""The transaction coordinator's state machine on a SQLite metadata store with a recording marker sink (no network, no node)."""

from __future__ import annotations

import time

import pytest

from coordinator.txn import state as S
from coordinator.txn.state import IllegalTransition, TxnState, check_transition, fenced_code
from log.types import TopicPartition
from tests.coordinator.txn_harness import Harness

TP0, TP1 = TopicPartition("t", 0), TopicPartition("t", 1)


def test_transitions_and_fenced_codes() -> None:
    check_transition(TxnState.ONGOING, TxnState.PREPARE_COMMIT)
    check_transition(TxnState.COMPLETE_ABORT, TxnState.ONGOING)
    with pytest.raises(IllegalTransition):
        check_transition(TxnState.EMPTY, TxnState.PREPARE_COMMIT)
    with pytest.raises(IllegalTransition):
        check_transition(TxnState.PREPARE_ABORT, TxnState.COMPLETE_COMMIT)
    assert fenced_code("EndTxn", 1) == S.INVALID_PRODUCER_EPOCH and fenced_code("EndTxn", 2) == S.PRODUCER_FENCED
    assert fenced_code("InitProducerId", 3) == S.INVALID_PRODUCER_EPOCH
    assert fenced_code("InitProducerId", 4) == S.PRODUCER_FENCED


def test_commit_abort_and_the_epochs(h: Harness) -> None:
    tc = h.tc
    assert tc.init_producer_id("x", 0)[0] == S.INVALID_TRANSACTION_TIMEOUT
    assert tc.init_producer_id("x", 60_001)[0] == S.INVALID_TRANSACTION_TIMEOUT
    code, pid, epoch = tc.init_producer_id("x", 30_000)
    assert (code, epoch) == (0, 0)
    assert tc.add_partitions("x", pid, epoch, [TP0, TopicPartition("nope", 0)]) == {
        TP0: S.OPERATION_NOT_ATTEMPTED, TopicPartition("nope", 0): S.UNKNOWN_TOPIC_OR_PARTITION}
    assert tc.add_partitions("x", pid, epoch, [TP0, TP1]) == {TP0: 0, TP1: 0}
    assert tc.add_offsets("x", pid, epoch, "g") == 0
    assert h.state("x").state == "Ongoing" and h.state("x").groups == {"g"}
    assert tc.end_txn("x", pid, epoch, True) == 0
    m = h.settle("x")
    assert m.state == "CompleteCommit" and m.partitions == set() and m.groups == set()
    assert [(p, e, c, tp) for p, e, c, _ce, tp in h.sink.markers] == [(pid, 0, True, TP0), (pid, 0, True, TP1)]
    assert h.sink.groups == [(pid, True, {"g"})]
    assert tc.end_txn("x", pid, epoch, True) == 0  # a retry
    assert tc.end_txn("x", pid, epoch, False) == S.INVALID_TXN_STATE
    # the stored record is what a reader of the metadata store sees
    assert h.txns.get("x").state == "CompleteCommit"  # type: ignore[union-attr]

    # a new producer with the same id: the open transaction is aborted at a bumped epoch, then bumped again
    assert tc.add_partitions("x", pid, epoch, [TP0]) == {TP0: 0}
    code, pid2, epoch2 = tc.init_producer_id("x", 30_000)
    assert (code, pid2, epoch2) == (0, pid, 2)
    assert h.sink.markers[-1][:3] == (pid, 1, False)
    assert tc.add_partitions("x", pid, 0, [TP0], version=3) == {TP0: S.PRODUCER_FENCED}
    assert tc.end_txn("x", pid, 1, False, version=1) == S.INVALID_PRODUCER_EPOCH
    # KIP-360: a retried InitProducerId naming the previous epoch gets the current one; an older one is fenced
    assert tc.init_producer_id("x", 30_000, pid, 1) == (0, pid, 2)
    assert tc.init_producer_id("x", 30_000, pid, 0, version=4)[0] == S.PRODUCER_FENCED


def test_expiry_aborts_and_fences(h: Harness) -> None:
    tc = h.tc
    _c, pid, epoch = tc.init_producer_id("e", 1000)
    assert tc.add_partitions("e", pid, epoch, [TP0]) == {TP0: 0}
    assert tc.expire() == []
    h.clock.ms += 1001
    assert tc.expire() == ["e"]
    m = h.settle("e")
    assert (m.state, m.producer_epoch) == ("CompleteAbort", epoch + 1)
    assert h.sink.markers[-1][:3] == (pid, epoch + 1, False)
    assert tc.end_txn("e", pid, epoch, True, version=3) == S.PRODUCER_FENCED
    assert tc.stats["expired"] == 1


def test_a_prepared_transaction_is_finished_by_the_next_coordinator(h: Harness) -> None:
    tc = h.tc
    _c, pid, epoch = tc.init_producer_id("r", 30_000)
    assert tc.add_partitions("r", pid, epoch, [TP1]) == {TP1: 0}
    h.sink.fail = True  # the markers never land: the coordinator "dies" in PrepareAbort
    assert tc.end_txn("r", pid, epoch, False) == 0
    time.sleep(0.05)
    assert h.state("r").state == "PrepareAbort" and h.sink.markers == []
    assert tc.init_producer_id("r", 30_000)[0] in (S.CONCURRENT_TRANSACTIONS,)  # waits, then gives up
    tc.close()
    h.sink.fail = False
    h.tc = new = h.start()  # a new incarnation claims the slot at the next coordinator epoch and loads it
    m = h.settle("r", new)
    assert m.state == "CompleteAbort" and new.stats["recovered"] == 1
    assert h.sink.markers == [(pid, epoch, False, 1, TP1)]  # written under the new coordinator epoch
    # the superseded coordinator (it has not noticed yet) can no longer write: fenced in the store
    assert tc.init_producer_id("other", 30_000)[0] == S.NOT_COORDINATOR
    assert tc.stats["fenced_writes"] == 1
