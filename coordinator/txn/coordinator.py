"""The transaction coordinator (Kafka's TransactionCoordinator): InitProducerId, AddPartitionsToTxn, AddOffsetsToTxn, EndTxn and expiry over durable state.

Each transactional id hashes to a slot of the ``txn`` coordinator ownership; only the node
holding the slot answers for it (NOT_COORDINATOR, COORDINATOR_LOAD_IN_PROGRESS otherwise). Every
state change is first written to the metadata store under the slot's coordinator epoch
(:class:`metadata.txn_state.TxnStateStore`, fenced), then applied in memory, as Kafka's
``prepareTransitionTo`` / ``completeTransitionTo`` do. Ending a transaction writes PrepareCommit
or PrepareAbort, answers the producer, and hands the markers to :mod:`coordinator.txn.markers`,
which writes them to every partition's leader (and completes the groups' pending offsets),
retrying until written, then records CompleteCommit / CompleteAbort. A coordinator that loads a
slot (after a restart or a move) finishes every transaction it finds preparing. An id left idle
longer than ``transactional.id.expiration.ms`` is removed (Kafka's removeExpiredTransactionalIds).

Blocking: every method may read or write the store; the Kafka handlers call them through
``ctx.run``.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

from coordinator.ownership import CoordinatorOwnership, SlotStatus
from coordinator.txn import state as S
from coordinator.txn.markers import MarkerCompleter, MarkerSink
from coordinator.txn.state import TxnState, check_transition, fenced_code
from log.types import TopicPartition
from metadata.coordinators import CoordinatorFencedError
from metadata.txn_state import TxnRecord, TxnStateStore

logger = logging.getLogger(__name__)


@dataclass
class TxnConfig:
    """Kafka's transaction coordinator settings (names in the comments)."""

    #: transaction.max.timeout.ms
    max_timeout_ms: int = 900_000
    #: transaction.abort.timed.out.transaction.cleanup.interval.ms
    abort_check_interval_ms: int = 10_000
    #: how long InitProducerId waits for the previous epoch's abort before answering CONCURRENT_TRANSACTIONS
    init_wait_ms: int = 5_000
    #: transactional.id.expiration.ms: an id idle (Empty, CompleteCommit, CompleteAbort) this long is forgotten
    id_expiration_ms: int = 604_800_000
    #: transaction.remove.expired.transaction.cleanup.interval.ms
    remove_expired_interval_ms: int = 3_600_000


class _Refused(Exception):
    def __init__(self, code: int) -> None:
        super().__init__(code)
        self.code = code


class TransactionCoordinator:
    """The transactional ids of the slots this node holds, their state machine and their markers."""

    def __init__(self, store: TxnStateStore, ownership: CoordinatorOwnership, *, next_producer_id: Callable[[], int],
                 sink: MarkerSink, unknown_partitions: Callable[[Iterable[TopicPartition]], set[TopicPartition]],
                 now_ms: Callable[[], int], config: TxnConfig | None = None) -> None:
        self.store = store
        self.ownership = ownership
        self.config = config or TxnConfig()
        self._next_pid = next_producer_id
        self._unknown = unknown_partitions
        self._now = now_ms
        self._lock = threading.RLock()
        self._txns: dict[str, TxnRecord] = {}
        self._done: dict[str, threading.Condition] = {}
        self._stop = threading.Event()
        self._expiry: threading.Thread | None = None
        self.stats: dict[str, int] = {"init_producer_id": 0, "add_partitions": 0, "add_offsets": 0, "commits": 0,
                                      "aborts": 0, "expired": 0, "fenced_producers": 0, "fenced_writes": 0,
                                      "recovered": 0, "markers_written": 0, "marker_retries": 0,
                                      "expired_ids": 0}
        self.markers = MarkerCompleter(sink, self)
        ownership.add_listener(self._on_load, self._on_unload)

    # ---- lifecycle -------------------------------------------------------------------
    def start(self) -> TransactionCoordinator:
        self._expiry = threading.Thread(target=self._expire_loop, name="tiercompact-txn-expiry", daemon=True)
        self._expiry.start()
        return self

    def close(self) -> None:
        self._stop.set()
        self.markers.close()
        if self._expiry is not None:
            self._expiry.join(5)

    def _on_load(self, slot: int, epoch: int) -> None:
        records = self.store.load_slot(slot)
        with self._lock:
            for r in records:
                self._txns[r.transactional_id] = r
        for r in records:
            if TxnState(r.state).preparing:
                self.stats["recovered"] += 1
                logger.info("transaction %r was %s at the coordinator's load: finishing its markers",
                            r.transactional_id, r.state)
                self.markers.submit(r.transactional_id)

    def _on_unload(self, slot: int) -> None:
        with self._lock:
            for tid in [t for t in self._txns if self.ownership.slot(t) == slot]:
                del self._txns[tid]

    # ---- helpers ---------------------------------------------------------------------
    def _owned(self, tid: str) -> tuple[int, int]:
        own = self.ownership.lookup(tid)
        if own.status is SlotStatus.LOADING:
            raise _Refused(S.COORDINATOR_LOAD_IN_PROGRESS)
        if own.status is not SlotStatus.OWNED:
            raise _Refused(S.NOT_COORDINATOR)
        return own.slot, own.epoch

    def _persist(self, new: TxnRecord) -> None:
        """Write ``new`` under our coordinator epoch, then make it the in-memory state (caller holds the lock)."""
        slot, epoch = self._owned(new.transactional_id)
        new.update_ms = self._now()
        try:
            self.store.put(new, slot=slot, broker_id=self.ownership.broker_id, coordinator_epoch=epoch)
        except CoordinatorFencedError:
            self.stats["fenced_writes"] += 1
            raise _Refused(S.NOT_COORDINATOR) from None
        except Exception as e:  # noqa: BLE001 - a store outage is retriable for clients
            logger.warning("writing transaction state of %r failed: %s", new.transactional_id, e)
            raise _Refused(S.COORDINATOR_NOT_AVAILABLE) from None
        self._txns[new.transactional_id] = new

    def _producer(self, tid: str, pid: int, epoch: int, api: str, version: int) -> TxnRecord:
        self._owned(tid)
        m = self._txns.get(tid)
        if m is None or m.producer_id != pid:
            raise _Refused(S.INVALID_PRODUCER_ID_MAPPING)
        if epoch != m.producer_epoch:
            self.stats["fenced_producers"] += 1
            raise _Refused(fenced_code(api, version))
        return m

    def _condition(self, tid: str) -> threading.Condition:
        c = self._done.get(tid)
        if c is None:
            c = self._done[tid] = threading.Condition(self._lock)
        return c

    # ---- InitProducerId --------------------------------------------------------------
    def init_producer_id(self, tid: str, timeout_ms: int, expected_pid: int = -1, expected_epoch: int = -1,
                         version: int = 0) -> tuple[int, int, int]:
        """(error code, producer id, epoch): a new epoch for ``tid``, its previous epoch fenced and its open transaction aborted."""
        if timeout_ms <= 0 or timeout_ms > self.config.max_timeout_ms:
            return S.INVALID_TRANSACTION_TIMEOUT, -1, -1
        deadline = time.monotonic() + self.config.init_wait_ms / 1000
        try:
            with self._lock:
                while True:
                    self._owned(tid)
                    m = self._txns.get(tid)
                    if m is None:
                        new = TxnRecord(tid, self._next_pid(), 0, timeout_ms, TxnState.EMPTY.value)
                        self._persist(new)
                        self.stats["init_producer_id"] += 1
                        return S.NONE, new.producer_id, new.producer_epoch
                    st = TxnState(m.state)
                    if expected_pid >= 0:
                        if (expected_pid, expected_epoch) == (m.last_producer_id, m.last_producer_epoch) \
                                and not st.preparing and st is not TxnState.ONGOING:
                            return S.NONE, m.producer_id, m.producer_epoch  # a retried InitProducerId (KIP-360)
                        if (expected_pid, expected_epoch) != (m.producer_id, m.producer_epoch):
                            self.stats["fenced_producers"] += 1
                            return fenced_code("InitProducerId", version), -1, -1
                    if st is TxnState.ONGOING:
                        self._fence_and_abort(m)
                        continue
                    if st.preparing:
                        left = deadline - time.monotonic()
                        if left <= 0:
                            return S.CONCURRENT_TRANSACTIONS, -1, -1
                        self._condition(tid).wait(min(left, 0.2))
                        continue
                    new = m.copy()
                    if m.producer_epoch >= S.MAX_EPOCH:
                        new.producer_id, new.producer_epoch = self._next_pid(), 0
                    else:
                        new.producer_epoch = m.producer_epoch + 1
                    new.last_producer_id, new.last_producer_epoch = m.producer_id, m.producer_epoch
                    new.timeout_ms = timeout_ms
                    new.state = TxnState.EMPTY.value
                    new.partitions, new.groups, new.txn_start_ms = set(), set(), -1
                    check_transition(st, TxnState.EMPTY)
                    self._persist(new)
                    self.stats["init_producer_id"] += 1
                    return S.NONE, new.producer_id, new.producer_epoch
        except _Refused as e:
            return e.code, -1, -1

    def _fence_and_abort(self, m: TxnRecord) -> None:
        """Kafka's prepareFenceProducerEpoch + PrepareAbort: bump the epoch (the old producer is fenced) and abort."""
        new = m.copy()
        if m.producer_epoch < S.MAX_EPOCH + 1:
            new.producer_epoch = m.producer_epoch + 1
        new.last_producer_id, new.last_producer_epoch = m.producer_id, -1
        new.state = TxnState.PREPARE_ABORT.value
        check_transition(TxnState(m.state), TxnState.PREPARE_ABORT)
        self._persist(new)
        self.stats["aborts"] += 1
        self.markers.submit(m.transactional_id)

    # ---- AddPartitionsToTxn / AddOffsetsToTxn ----------------------------------------
    def add_partitions(self, tid: str, pid: int, epoch: int, tps: Iterable[TopicPartition],
                       version: int = 0) -> dict[TopicPartition, int]:
        tps = set(tps)
        try:
            with self._lock:
                m, st = self._adding(tid, pid, epoch, "AddPartitionsToTxn", version)
                if st is TxnState.ONGOING and tps <= m.partitions:
                    return dict.fromkeys(tps, S.NONE)
                unknown = self._unknown(tps)
                if unknown:
                    return {tp: S.UNKNOWN_TOPIC_OR_PARTITION if tp in unknown else S.OPERATION_NOT_ATTEMPTED
                            for tp in tps}
                self._begin(m, st, partitions=tps)
                self.stats["add_partitions"] += 1
                return dict.fromkeys(tps, S.NONE)
        except _Refused as e:
            return dict.fromkeys(tps, e.code)

    def add_offsets(self, tid: str, pid: int, epoch: int, group_id: str, version: int = 0) -> int:
        try:
            with self._lock:
                m, st = self._adding(tid, pid, epoch, "AddOffsetsToTxn", version)
                if st is not TxnState.ONGOING or group_id not in m.groups:
                    self._begin(m, st, groups={group_id})
                self.stats["add_offsets"] += 1
                return S.NONE
        except _Refused as e:
            return e.code

    def _adding(self, tid: str, pid: int, epoch: int, api: str, version: int) -> tuple[TxnRecord, TxnState]:
        """Under the lock: the producer's record and state, refused while a commit or abort is being prepared."""
        m = self._producer(tid, pid, epoch, api, version)
        st = TxnState(m.state)
        if st.preparing:
            raise _Refused(S.CONCURRENT_TRANSACTIONS)
        return m, st

    def _begin(self, m: TxnRecord, st: TxnState, *, partitions: set[TopicPartition] | None = None,
               groups: set[str] | None = None) -> None:
        check_transition(st, TxnState.ONGOING)
        new = m.copy()
        if st is not TxnState.ONGOING:
            new.partitions, new.groups, new.txn_start_ms = set(), set(), self._now()
        new.partitions |= partitions or set()
        new.groups |= groups or set()
        new.state = TxnState.ONGOING.value
        self._persist(new)

    # ---- EndTxn ----------------------------------------------------------------------
    def end_txn(self, tid: str, pid: int, epoch: int, commit: bool, version: int = 0) -> int:
        try:
            with self._lock:
                m = self._producer(tid, pid, epoch, "EndTxn", version)
                st = TxnState(m.state)
                if st is TxnState.ONGOING:
                    target = TxnState.PREPARE_COMMIT if commit else TxnState.PREPARE_ABORT
                    check_transition(st, target)
                    new = m.copy()
                    new.state = target.value
                    self._persist(new)
                    self.stats["commits" if commit else "aborts"] += 1
                    self.markers.submit(tid)
                    return S.NONE
                wanted_prepare = TxnState.PREPARE_COMMIT if commit else TxnState.PREPARE_ABORT
                wanted_done = TxnState.COMPLETE_COMMIT if commit else TxnState.COMPLETE_ABORT
                if st is wanted_prepare:
                    return S.CONCURRENT_TRANSACTIONS
                if st is wanted_done:
                    return S.NONE  # a retry of the EndTxn that completed
                return S.INVALID_TXN_STATE
        except _Refused as e:
            return e.code

    # ---- markers done (called by the completer) --------------------------------------
    def preparing(self, tid: str) -> tuple[TxnRecord, int] | None:
        """The transaction ``tid`` while it waits for its markers, with our coordinator epoch; None when it
        does not (any more) or the slot is not ours. Raises LookupError while the slot loads."""
        own = self.ownership.lookup(tid)
        if own.status is SlotStatus.LOADING:
            raise LookupError(tid)
        with self._lock:
            m = self._txns.get(tid)
            if own.status is not SlotStatus.OWNED or m is None or not TxnState(m.state).preparing:
                return None
            return m.copy(), own.epoch

    def markers_written(self, snapshot: TxnRecord) -> bool:
        """Every marker of ``snapshot`` is written: CompleteCommit / CompleteAbort (False: retry the write)."""
        with self._lock:
            m = self._txns.get(snapshot.transactional_id)
            if m is None or (m.producer_id, m.producer_epoch, m.state) != (
                    snapshot.producer_id, snapshot.producer_epoch, snapshot.state):
                return True  # superseded or unloaded: nothing of ours left to complete
            st = TxnState(m.state)
            target = TxnState.COMPLETE_COMMIT if st is TxnState.PREPARE_COMMIT else TxnState.COMPLETE_ABORT
            check_transition(st, target)
            new = m.copy()
            new.state = target.value
            new.partitions, new.groups, new.txn_start_ms = set(), set(), -1
            try:
                self._persist(new)
            except _Refused as e:
                return e.code == S.NOT_COORDINATOR  # fenced: the new coordinator finishes it
            self._condition(m.transactional_id).notify_all()
            return True

    # ---- expiry ----------------------------------------------------------------------
    def expire(self) -> list[str]:
        """Abort (fencing the producer's epoch) every transaction open longer than its timeout."""
        now = self._now()
        aborted = []
        with self._lock:
            for tid, m in list(self._txns.items()):
                if m.state != TxnState.ONGOING.value or m.txn_start_ms < 0 or now - m.txn_start_ms <= m.timeout_ms:
                    continue
                try:
                    self._fence_and_abort(m)
                except _Refused:
                    continue
                self.stats["expired"] += 1
                aborted.append(tid)
                logger.info("transaction %r of producer %d timed out after %d ms: aborting it", tid,
                            m.producer_id, m.timeout_ms)
        return aborted

    def remove_expired_ids(self) -> list[str]:
        """Kafka's TransactionStateManager.removeExpiredTransactionalIds: forget (through Dead, the record
        deleted under our coordinator epoch) every id of our slots that is Empty, CompleteCommit or
        CompleteAbort and was last written ``id_expiration_ms`` ago or more; its next InitProducerId starts
        afresh with a new producer id. Open and preparing transactions never expire this way (their
        transaction timeout aborts them first). A delete the store refuses (another node coordinates the
        slot now, or the store is down) leaves the id as it is."""
        now = self._now()
        removed = []
        with self._lock:
            for tid, m in list(self._txns.items()):
                st = TxnState(m.state)
                if not (st is TxnState.EMPTY or st.complete) or now - m.update_ms < self.config.id_expiration_ms:
                    continue
                try:
                    slot, epoch = self._owned(tid)
                except _Refused:
                    continue
                check_transition(st, TxnState.DEAD)
                try:
                    self.store.delete(tid, slot=slot, broker_id=self.ownership.broker_id, coordinator_epoch=epoch)
                except CoordinatorFencedError:
                    self.stats["fenced_writes"] += 1
                    continue
                except Exception as e:  # noqa: BLE001 - the next round tries again
                    logger.warning("removing the expired transactional id %r failed: %s", tid, e)
                    continue
                del self._txns[tid]
                self._done.pop(tid, None)
                self.stats["expired_ids"] += 1
                removed.append(tid)
                logger.info("transactional id %r (producer %d) was idle in %s for %d ms: removed", tid,
                            m.producer_id, m.state, now - m.update_ms)
        return removed

    def _expire_loop(self) -> None:
        last_removal = time.monotonic()
        while not self._stop.wait(self.config.abort_check_interval_ms / 1000):
            try:
                self.expire()
                if time.monotonic() - last_removal >= self.config.remove_expired_interval_ms / 1000:
                    last_removal = time.monotonic()
                    self.remove_expired_ids()
            except Exception:  # noqa: BLE001 - the next round tries again
                logger.exception("the transaction expiry round failed")

    # ---- operators -------------------------------------------------------------------
    def describe(self, tid: str) -> tuple[int, TxnRecord | None]:
        try:
            with self._lock:
                self._owned(tid)
                m = self._txns.get(tid)
                return (S.NONE, m.copy()) if m is not None else (S.TRANSACTIONAL_ID_NOT_FOUND, None)
        except _Refused as e:
            return e.code, None

    def list(self) -> list[TxnRecord]:
        with self._lock:
            owned = self.ownership.owned_slots()
            return [m.copy() for tid, m in self._txns.items() if self.ownership.slot(tid) in owned]

    def snapshot(self) -> dict[str, Any]:
        """Counts for /metrics."""
        with self._lock:
            by_state: dict[str, int] = {}
            for m in self._txns.values():
                by_state[m.state] = by_state.get(m.state, 0) + 1
        return {"by_state": by_state, "stats": dict(self.stats), "pending_markers": self.markers.pending()}
