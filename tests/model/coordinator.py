"""Transactions driven by the real transaction coordinator (coordinator.txn) over the model's partition: its markers land on the engine and in the model.

The coordinator runs on a SQLite metadata store in the engine's directory with one slot, which a
:class:`CoordinatorOwnership` claims; its marker sink writes each COMMIT/ABORT marker through the
:class:`tests.model.driver.Driver` (engine and model in lock-step, offsets compared). Operations:
InitProducerId (an open transaction of the previous epoch is aborted at a bumped epoch),
AddPartitionsToTxn + a transactional produce, EndTxn, expiry after transaction.timeout.ms, and a
coordinator restart, optionally in the middle of EndTxn (the markers not written yet: the
restarted coordinator finishes them when it loads the slot).
"""

from __future__ import annotations

import itertools
import time
import uuid
from typing import Any

from coordinator.ownership import CoordinatorOwnership
from coordinator.txn.coordinator import TransactionCoordinator, TxnConfig
from coordinator.txn.state import TxnState
from log.types import TopicPartition
from metadata.coordinators import TRANSACTION
from metadata.sql_coordinators import SqlCoordinatorStore
from metadata.sql_txn_state import SqlTxnStateStore
from tests.model.driver import Driver, ModelViolation

TIDS = ("tx-a", "tx-b")
TIMEOUT_MS = 5000


class _Sink:
    def __init__(self, harness: CoordinatorHarness) -> None:
        self.h = harness

    def write_markers(self, producer_id: int, producer_epoch: int, commit: bool, coordinator_epoch: int,
                      partitions: set[TopicPartition]) -> set[TopicPartition]:
        if self.h.crashing:
            return set(partitions)  # the coordinator dies before its markers land
        try:
            self.h.marker(producer_id, producer_epoch, commit)
        except BaseException as e:
            self.h.errors.append(e)
        return set()

    def complete_groups(self, producer_id: int, commit: bool, groups: set[str]) -> None:
        pass


class CoordinatorHarness:
    """The transaction coordinator of one model partition (``drv``'s engine and model)."""

    def __init__(self, drv: Driver) -> None:
        self.drv = drv
        self.tp = drv.e.tp
        url = f"sqlite:///{drv.e.root}/txn-coordinator-{uuid.uuid4().hex[:8]}.db"
        self.store = SqlCoordinatorStore(url)
        self.txn_store = SqlTxnStateStore(engine=self.store.engine)
        self._pids = itertools.count(101)
        self.crashing = False
        self.errors: list[BaseException] = []
        self.restarts = 0
        self.tc = self._start()

    def _start(self) -> TransactionCoordinator:
        incarnation = f"i{self.restarts}"
        own = CoordinatorOwnership(self.store, TRANSACTION, broker_id=0, incarnation=incarnation,
                                   live=lambda: {0: incarnation}, now_ms=self.drv.e.clock.milliseconds, num_slots=1)
        tc = TransactionCoordinator(self.txn_store, own, next_producer_id=lambda: next(self._pids), sink=_Sink(self),
                                    unknown_partitions=lambda tps: set(), now_ms=self.drv.e.clock.milliseconds,
                                    config=TxnConfig(init_wait_ms=3000, abort_check_interval_ms=10**9))
        own.reconcile()  # claims the slot and loads it (finishing what a crash left prepared)
        self._settle(tc)
        return tc

    def close(self) -> None:
        self.tc.close()
        self.store.close()

    # ---- the marker, in lock-step ---------------------------------------------------------------
    def marker(self, pid: int, epoch: int, commit: bool) -> None:
        self.drv.on_op("coordinator_commit" if commit else "coordinator_abort")
        want = self.drv.model.end_transaction(pid, epoch, commit=commit)
        got = self.drv.e.marker(pid, epoch, commit)
        if got != want:
            raise ModelViolation(f"coordinator marker of producer {pid}: engine offset {got}, model {want}")

    def _settle(self, tc: TransactionCoordinator | None = None) -> None:
        """Wait until no transaction waits for its markers; raise what the sink met."""
        tc = tc or self.tc
        deadline = time.monotonic() + 10
        while any(TxnState(m.state).preparing for m in tc.list()) and not self.crashing:
            if time.monotonic() > deadline:
                raise ModelViolation("the coordinator's markers were not written within 10 s")
            time.sleep(0.005)
        if self.errors:
            raise self.errors.pop(0)

    # ---- operations -----------------------------------------------------------------------------
    def init(self, tid: str) -> None:
        self.drv.on_op("coordinator_init")
        code, _pid, _epoch = self.tc.init_producer_id(tid, TIMEOUT_MS)
        self._settle()
        if code != 0:
            raise ModelViolation(f"InitProducerId({tid}) answered {code}")

    def _known(self, tid: str) -> Any:
        _code, m = self.tc.describe(tid)
        if m is None:
            self.init(tid)
            _code, m = self.tc.describe(tid)
        return m

    def produce(self, tid: str, drafts: list[Any]) -> None:
        m = self._known(tid)
        self.drv.on_op("coordinator_produce")
        codes = self.tc.add_partitions(tid, m.producer_id, m.producer_epoch, [self.tp])
        if codes[self.tp] != 0:
            raise ModelViolation(f"AddPartitionsToTxn({tid}) answered {codes}")
        p = self.drv.model.producers.get(m.producer_id)
        seq = p.next_sequence if p is not None and p.epoch == m.producer_epoch else 0
        self.drv._append(self.drv.records(drafts), producer_id=m.producer_id, producer_epoch=m.producer_epoch,
                         base_sequence=seq, transactional=True)

    def end(self, tid: str, commit: bool, crash: bool) -> None:
        m = self._known(tid)
        self.drv.on_op("coordinator_end")
        self.crashing = crash
        got = self.tc.end_txn(tid, m.producer_id, m.producer_epoch, commit)
        done = TxnState.COMPLETE_COMMIT if commit else TxnState.COMPLETE_ABORT
        ok = m.state in (TxnState.ONGOING.value, done.value)  # a retry of the completed EndTxn is answered too
        if got != (0 if ok else 48):  # INVALID_TXN_STATE with nothing open
            raise ModelViolation(f"EndTxn({tid}, {m.state}) answered {got}")
        if crash:
            self.restart()
        self._settle()

    def expire(self) -> None:
        self.drv.on_op("coordinator_expire")
        self.tc.expire()
        self._settle()

    def restart(self) -> None:
        """The coordinator stops (its pending markers unwritten) and a new incarnation loads the slot."""
        self.drv.on_op("coordinator_restart")
        self.tc.close()
        self.tc.markers._pool.shutdown(wait=True)
        self.crashing = False
        self.restarts += 1
        self.tc = self._start()
