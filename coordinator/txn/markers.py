"""Completing a prepared transaction: its COMMIT/ABORT markers written to every partition's leader and its groups' offsets, retried until done.

Kafka's TransactionMarkerChannelManager: the coordinator hands a transaction in PrepareCommit or
PrepareAbort to :class:`MarkerCompleter`, which asks the :class:`MarkerSink` (the service layer:
the local node, or a WriteTxnMarkers request to the partition's leader) to write the markers,
retries the partitions that failed with a growing pause, completes the transactional offsets of
its consumer groups, then tells the coordinator (``markers_written``), which records
CompleteCommit / CompleteAbort. A transaction whose slot this node no longer holds is left to
the node that took it over.
"""

from __future__ import annotations

import logging
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from typing import TYPE_CHECKING, Protocol

from log.types import TopicPartition

if TYPE_CHECKING:
    from metadata.txn_state import TxnRecord

logger = logging.getLogger(__name__)

RETRY_MIN_S = 0.05
RETRY_MAX_S = 2.0


class MarkerSink(Protocol):
    def write_markers(self, producer_id: int, producer_epoch: int, commit: bool, coordinator_epoch: int,
                      partitions: set[TopicPartition]) -> set[TopicPartition]:
        """Write the marker to each partition on its leader; the partitions to try again."""

    def complete_groups(self, producer_id: int, commit: bool, groups: set[str]) -> None:
        """Make the transaction's pending offsets of ``groups`` committed (or drop them); raises to retry."""


class _Coordinator(Protocol):
    stats: dict[str, int]

    def preparing(self, tid: str) -> tuple[TxnRecord, int] | None: ...  # pragma: no cover
    def markers_written(self, snapshot: TxnRecord) -> bool: ...  # pragma: no cover


class MarkerCompleter:
    """Runs one completion per prepared transaction on a small pool (a slow partition holds up only its own)."""

    def __init__(self, sink: MarkerSink, coordinator: _Coordinator, *, workers: int = 4) -> None:
        self.sink = sink
        self.coordinator = coordinator
        self._pool = ThreadPoolExecutor(max_workers=workers, thread_name_prefix="tiercompact-txn-markers")
        self._lock = threading.Lock()
        self._running: set[str] = set()
        self._again: set[str] = set()
        self._closed = threading.Event()

    def submit(self, tid: str) -> None:
        with self._lock:
            if self._closed.is_set():
                return
            if tid in self._running:
                self._again.add(tid)  # a newer preparation: run once more after this one
                return
            self._running.add(tid)
        self._pool.submit(self._run, tid)

    def pending(self) -> int:
        with self._lock:
            return len(self._running)

    def close(self) -> None:
        self._closed.set()
        self._pool.shutdown(wait=False, cancel_futures=True)

    def _run(self, tid: str) -> None:
        try:
            while True:
                self._complete(tid)
                with self._lock:
                    if tid not in self._again:
                        self._running.discard(tid)
                        return
                    self._again.discard(tid)
        except BaseException:
            with self._lock:
                self._running.discard(tid)
                self._again.discard(tid)
            raise

    def _complete(self, tid: str) -> None:
        pause = RETRY_MIN_S
        remaining: set[TopicPartition] | None = None
        groups_done = False
        while not self._closed.is_set():
            try:
                got = self.coordinator.preparing(tid)
            except LookupError:  # the slot is loading: its load submits us again anyway
                self._closed.wait(pause)
                continue
            if got is None:
                return
            snap, coordinator_epoch = got
            commit = snap.state == "PrepareCommit"
            if remaining is None:
                remaining = set(snap.partitions)
            try:
                if remaining:
                    before = len(remaining)
                    remaining = self.sink.write_markers(snap.producer_id, snap.producer_epoch, commit,
                                                        coordinator_epoch, remaining)
                    self.coordinator.stats["markers_written"] += before - len(remaining)
                if not remaining and not groups_done and snap.groups:
                    self.sink.complete_groups(snap.producer_id, commit, set(snap.groups))
                    groups_done = True
            except Exception as e:  # noqa: BLE001 - retried below
                logger.warning("markers of transaction %r: %s (retrying)", tid, e)
            if not remaining and (groups_done or not snap.groups):
                if self.coordinator.markers_written(snap):
                    return
            self.coordinator.stats["marker_retries"] += 1
            self._closed.wait(pause)
            pause = min(pause * 2, RETRY_MAX_S)
            time.sleep(0)
