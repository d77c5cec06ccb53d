"""acks=-1 on one copy: a produce answer waits until its records are fsynced, one fsync per partition per lane job.

A Produce request's appends run in its connection's lane job (service/kafka/lane.py) on a worker
thread; for acks=-1 the job's :meth:`GroupSync.finish_job` then fsyncs, once each, every partition
its requests appended to (log/flush.py's ``sync_log``, outside the log's lock), and only then is
the job's outcome handed back to the event loop, all its answers at once. So the records of every
request a connection pipelined meanwhile share one fsync per partition, and the answer path has
one thread hand-off per job instead of one per request and fsync round.

Across connections it is a group commit: a partition's fsyncs run one at a time (a lock per
partition), each covering everything appended before it began, so a job that finds the
partition already durable past its records' end (another connection's fsync covered them while
it waited) does none. However many producers and partitions wait, a partition is fsynced at most
once per disk round trip. Each fsync also tells the node's FlushTracker (flush.messages /
flush.ms).

The fsync runs on the request worker that appended (Kafka's own flushes run on its request
handler threads too): a connection's next job waits behind its fsync, and grows by the requests
that came meanwhile, which is the batching the group commit wants.
"""

from __future__ import annotations

import threading
import weakref
from typing import Any

from log.flush import FlushTracker
from log.local_log import LocalLog
from log.locks import RANK_LOG_FLUSH, ordered_lock
from service.flush_policy import flush_tracker_for


class NeedsDurable:
    """A lane item's result that waits for an fsync: ``durable_ends`` (the end offset each log must be durable to)
    is read by :meth:`GroupSync.finish_job`, which fills ``sync_failed`` (the logs whose fsync failed)."""

    __slots__ = ("durable_ends", "sync_failed")

    def __init__(self, durable_ends: dict[LocalLog, int]) -> None:
        self.durable_ends = durable_ends
        self.sync_failed: dict[LocalLog, Exception] = {}


class GroupSync:
    """The grouped fsync of every partition of one node (called from request worker threads)."""

    def __init__(self, tracker: FlushTracker) -> None:
        self.tracker = tracker
        #: per log, the end offset known durable (read and written under _state)
        self._durable: weakref.WeakKeyDictionary[LocalLog, int] = weakref.WeakKeyDictionary()
        self._locks: weakref.WeakKeyDictionary[LocalLog, Any] = weakref.WeakKeyDictionary()
        self._state = threading.Lock()  # a leaf: guards the two maps and the counters, never held across a call
        #: fsyncs run, jobs that ran at least one, and requests answered durable (metrics, tests)
        self.syncs = 0
        self.rounds = 0
        self.answered = 0

    def durable_offset(self, log: LocalLog) -> int:
        with self._state:
            return self._durable.get(log, -1)

    def finish_job(self, results: list[NeedsDurable]) -> None:
        """The lane's finish step: make every log the job's results need durable to their ends (one fsync each at
        most), then record in each result the logs whose fsync failed."""
        ends: dict[LocalLog, int] = {}
        for r in results:
            for log, end in r.durable_ends.items():
                if ends.get(log, -1) < end:
                    ends[log] = end
        failed = self.make_durable(ends)
        answered = 0
        for r in results:
            if failed:
                r.sync_failed = {log: failed[log] for log in r.durable_ends if log in failed}
            answered += not r.sync_failed
        with self._state:
            self.answered += answered

    def make_durable(self, ends: dict[LocalLog, int]) -> dict[LocalLog, Exception]:
        """Block until, for each log, every record below its end offset is on disk; returns the logs whose fsync
        failed, with the error."""
        failed: dict[LocalLog, Exception] = {}
        synced = 0
        for log, end in ends.items():
            with self._state:
                if self._durable.get(log, -1) >= end:
                    continue
                lock = self._locks.get(log)
                if lock is None:
                    lock = self._locks[log] = ordered_lock("service.kafka.group_sync", RANK_LOG_FLUSH)
            with lock:  # one fsync of a log at a time: who waited here finds its records covered by the last one
                with self._state:
                    if self._durable.get(log, -1) >= end:
                        continue
                try:
                    durable = self.tracker.sync(log)
                except Exception as e:  # noqa: BLE001 - the requests waiting on this log get the failure
                    failed[log] = e
                    continue
                synced += 1
                with self._state:
                    if self._durable.get(log, -1) < durable:
                        self._durable[log] = durable
        if synced:
            with self._state:
                self.syncs += synced
                self.rounds += 1
        return failed


_BY_NODE: weakref.WeakKeyDictionary[Any, GroupSync] = weakref.WeakKeyDictionary()
_BY_NODE_LOCK = threading.Lock()


def group_sync_for(node: Any) -> GroupSync:
    """The node's GroupSync (made on first use; it shares the node's FlushTracker)."""
    with _BY_NODE_LOCK:
        gs = _BY_NODE.get(node)
        if gs is None:
            gs = _BY_NODE[node] = GroupSync(flush_tracker_for(node))
        return gs
