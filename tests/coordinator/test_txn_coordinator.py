"""The transaction coordinator's state machine on a SQLite metadata store with a recording marker sink (no network, no node)."""

from __future__ import annotations

import itertools
import time
from pathlib import Path
from typing import Any

import pytest

from coordinator.ownership import CoordinatorOwnership
from coordinator.txn import state as S
from coordinator.txn.coordinator import TransactionCoordinator, TxnConfig
from coordinator.txn.state import IllegalTransition, TxnState, check_transition, fenced_code
from log.types import TopicPartition
from metadata.coordinators import TRANSACTION
from metadata.sql_coordinators import SqlCoordinatorStore
from metadata.sql_txn_state import SqlTxnStateStore

TP0, TP1 = TopicPartition("t", 0), TopicPartition("t", 1)


class Sink:
    def __init__(self) -> None:
        self.markers: list[tuple[int, int, bool, int, TopicPartition]] = []
        self.groups: list[tuple[int, bool, set[str]]] = []
        self.fail = False

    def write_markers(self, pid: int, epoch: int, commit: bool, coordinator_epoch: int,
                      partitions: set[TopicPartition]) -> set[TopicPartition]:
        if self.fail:
            return set(partitions)
        self.markers += [(pid, epoch, commit, coordinator_epoch, tp) for tp in sorted(partitions)]
        return set()

    def complete_groups(self, pid: int, commit: bool, groups: set[str]) -> None:
        self.groups.append((pid, commit, groups))


class Clock:
    def __init__(self) -> None:
        self.ms = 1_000_000

    def __call__(self) -> int:
        return self.ms


class Harness:
    def __init__(self, tmp: Path) -> None:
        self.store = SqlCoordinatorStore(f"sqlite:///{tmp / 'meta.db'}")
        self.txns = SqlTxnStateStore(engine=self.store.engine)
        self.clock = Clock()
        self.sink = Sink()
        self.pids = itertools.count(500)
        self.n = 0
        self.tc = self.start()

    def start(self, broker: int = 0) -> TransactionCoordinator:
        self.n += 1
        inc = f"i{self.n}"
        own = CoordinatorOwnership(self.store, TRANSACTION, broker_id=broker, incarnation=inc,
                                   live=lambda: {broker: inc}, now_ms=self.clock, num_slots=1)
        tc = TransactionCoordinator(self.txns, own, next_producer_id=lambda: next(self.pids), sink=self.sink,
                                    unknown_partitions=lambda tps: {tp for tp in tps if tp.topic == "nope"},
                                    now_ms=self.clock, config=TxnConfig(max_timeout_ms=60_000, init_wait_ms=2000))
        own.reconcile()
        return tc

    def state(self, tid: str, tc: TransactionCoordinator | None = None) -> Any:
        return (tc or self.tc).describe(tid)[1]

    def settle(self, tid: str, tc: TransactionCoordinator | None = None) -> Any:
        deadline = time.monotonic() + 5
        while TxnState(self.state(tid, tc).state).preparing:
            assert time.monotonic() < deadline, "markers not written"
            time.sleep(0.005)
        return self.state(tid, tc)


@pytest.fixture
def h(tmp_path: Path) -> Any:
    harness = Harness(tmp_path)
    yield harness
    harness.tc.close()
    harness.store.close()


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
