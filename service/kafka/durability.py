"""acks=-1 on one copy: a produce answer waits until its records are on disk, one sync per lane job.

A Produce request's appends run in its connection's lane job (service/kafka/lane.py) on a worker
thread; for acks=-1 the job's :meth:`GroupSync.finish_job` then makes every partition its
requests appended to durable, and only then is the job's outcome handed back to the event loop,
all its answers at once. So the records of every request a connection pipelined meanwhile share
one sync, and the answer path has one thread hand-off per job instead of one per request and
fsync round.

How (the node's ``ack_sync_method``): with ``syncfs`` (the default where Linux has it), two or
more partitions of one file system are synced by one ``syncfs(2)`` of it (log/flush.py), one
journal commit and one device cache flush instead of one per partition: at 8 partitions it
halved the produce latency and took about a sixth off the worker's CPU per request. It also
writes back whatever else is dirty on that file system, so the data dir is best on a volume of
its own (Kafka's advice for ``log.dirs``); ``fsync`` syncs each partition's active segment
alone. A job with one partition to sync always fsyncs it, and so does a partition on a file
system not known to commit on ``syncfs`` (FUSE, network and unknown ones; log/flush.py's
``SYNCFS_FILE_SYSTEMS``). A sandbox that refuses the call (ENOSYS, EPERM) turns it off.
While more than :data:`SYNCFS_MAX_DIRTY_BYTES` of the machine's page cache is dirty, each
partition is fsynced instead: a syncfs would first write all of it. On the Kafka bench the
remote consume phase left about a gigabyte of read-cache files dirty, and the next 8-partition
job's syncfs took 498 ms (the first 8-partition run's server p99 of 500 ms in every bench
until then); eight fsyncs write only the partitions' own bytes.

Across connections it is a group commit: the syncs of a partition (or of a file system) run one
at a time, each covering everything appended before it began, so a job that finds its records
already covered (another connection's sync ran while it waited) does none. Each sync also tells
the node's FlushTracker (flush.messages / flush.ms).

The sync runs on the request worker that appended (Kafka's own flushes run on its request
handler threads too). Before it, the job takes in the connection's requests that arrived while
its appends ran (service/kafka/lane.py's late join): librdkafka sends one Produce per partition,
back to back, and at 8 partitions and half load this took the p99 of a request's round trip from
6-9 ms to about 5 (a burst's later requests had waited for the first one's sync, then synced again). What arrives during the sync makes the
connection's next job, which is the batching the group commit wants.
"""

from __future__ import annotations

import contextlib
import errno
import logging
import os
import threading
import time
import weakref
from typing import Any

from log.flush import FlushTracker, dirty_bytes, mounted_file_systems, syncfs_available, syncfs_device_of
from log.local_log import LocalLog
from log.locks import RANK_LOG_FLUSH, ordered_lock
from service.flush_policy import flush_tracker_for
from service.per_node import per_node

logger = logging.getLogger(__name__)


#: syncfs(2) errors that mean "not here" rather than "the data may be lost": the logs are fsynced instead
_SYNCFS_REFUSED = frozenset({errno.ENOSYS, errno.EPERM, errno.EACCES, errno.EINVAL, errno.EOPNOTSUPP})


#: the machine's dirty page cache (log/flush.py's dirty_bytes) above which a job's partitions are fsynced one by one
#: instead of sharing a syncfs, which would write all of it first: at 1-2 GB/s, 8 MiB costs about what the shared
#: journal commit saves against eight fsyncs
SYNCFS_MAX_DIRTY_BYTES = 8 * 1024 * 1024
#: how long one reading of the dirty bytes decides (a read of /proc/meminfo costs about 13 us)
DIRTY_CHECK_INTERVAL_S = 0.02


class NeedsDurable:
    """A lane item's result that waits for a sync: ``durable_ends`` (the end offset each log must be durable to)
    is read by :meth:`GroupSync.finish_job`, which fills ``sync_failed`` (the logs whose sync failed)."""

    __slots__ = ("durable_ends", "sync_failed")

    def __init__(self, durable_ends: dict[LocalLog, int]) -> None:
        self.durable_ends = durable_ends
        self.sync_failed: dict[LocalLog, Exception] = {}


class GroupSync:
    """The grouped sync of every partition of one node (called from request worker threads)."""

    def __init__(self, tracker: FlushTracker, *, use_syncfs: bool | None = None) -> None:
        self.tracker = tracker
        #: sync two or more partitions of one file system with one syncfs(2) (default: where the platform has it)
        self.use_syncfs = syncfs_available() if use_syncfs is None else use_syncfs
        self._fs_locks: dict[int, Any] = {}
        #: per file system, a descriptor its syncfs goes through (the data dir's, opened once: not a directory per sync)
        self._fs_fds: dict[int, int] = {}
        weakref.finalize(self, _close_all, self._fs_fds)
        self._fs: weakref.WeakKeyDictionary[LocalLog, int | None] = weakref.WeakKeyDictionary()  # its file system
        #: per log, the end offset known durable (read and written under _state)
        self._durable: weakref.WeakKeyDictionary[LocalLog, int] = weakref.WeakKeyDictionary()
        self._locks: weakref.WeakKeyDictionary[LocalLog, Any] = weakref.WeakKeyDictionary()
        self._state = threading.Lock()  # a leaf: guards the two maps and the counters, never held across a call
        #: syncs run (an fsync of one log or a syncfs of several is one) and requests answered durable (tests)
        self.syncs = 0
        self.answered = 0
        #: jobs whose partitions were fsynced one by one because too much else was dirty (tests, metrics)
        self.dirty_fallbacks = 0
        self._dirty_checked = (-1.0, True)  # (when, whether little was dirty then), under _state

    def durable_offset(self, log: LocalLog) -> int:
        with self._state:
            return self._durable.get(log, -1)

    def finish_job(self, results: list[NeedsDurable]) -> None:
        """The lane's finish step: make every log the job's results need durable to their ends (one sync each at
        most), then record in each result the logs whose sync failed."""
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
        """Block until, for each log, every record below its end offset is on disk; returns the logs whose sync
        failed, with the error. Two or more logs of one file system share one ``syncfs`` (when ``use_syncfs``)."""
        with self._state:
            pending = [(log, end) for log, end in ends.items() if self._durable.get(log, -1) < end]
        failed: dict[LocalLog, Exception] = {}
        if self.use_syncfs and len(pending) >= 2 and self._little_dirty():
            by_fs: dict[int | None, list[tuple[LocalLog, int]]] = {}
            for log, end in pending:
                by_fs.setdefault(self._file_system(log), []).append((log, end))
            pending = []
            for fs, group in by_fs.items():
                if fs is None or len(group) < 2:
                    pending.extend(group)
                else:
                    failed.update(self._sync_fs(fs, group))
        for log, end in pending:
            err = self._sync_one(log, end)
            if err is not None:
                failed[log] = err
        return failed

    def _little_dirty(self) -> bool:
        """Whether the machine's dirty page cache is small enough for a syncfs (read at most every
        DIRTY_CHECK_INTERVAL_S); counts a fallback when it is not."""
        now = time.monotonic()
        with self._state:
            at, ok = self._dirty_checked
        if now - at >= DIRTY_CHECK_INTERVAL_S:
            dirty = dirty_bytes()
            ok = dirty is None or dirty <= SYNCFS_MAX_DIRTY_BYTES
            with self._state:
                self._dirty_checked = (now, ok)
        if not ok:
            with self._state:
                self.dirty_fallbacks += 1
        return ok

    def _file_system(self, log: LocalLog) -> int | None:
        """The device a syncfs may sync ``log`` with (None: fsync it alone), looked up once per log."""
        with self._state:
            fs = self._fs.get(log, -1)
        if fs == -1:
            fs = syncfs_device_of(log, mounted_file_systems())
            with self._state:
                self._fs[log] = fs
        return fs

    def _lock(self, locks: weakref.WeakKeyDictionary[Any, Any] | dict[Any, Any], key: Any, name: str) -> Any:
        with self._state:
            lock = locks.get(key)
            if lock is None:
                lock = locks[key] = ordered_lock(name, RANK_LOG_FLUSH)
            return lock

    def _sync_one(self, log: LocalLog, end: int) -> Exception | None:
        """One fsync of ``log`` (unless the one before it, which this waited for, covered ``end``)."""
        with self._lock(self._locks, log, "service.kafka.group_sync"):
            with self._state:
                if self._durable.get(log, -1) >= end:
                    return None
            try:
                durable = self.tracker.sync(log)
            except Exception as e:  # noqa: BLE001 - the requests waiting on this log get the failure
                return e
            self._covered({log: durable})
        return None

    def _sync_fs(self, fs: int, group: list[tuple[LocalLog, int]]) -> dict[LocalLog, Exception]:
        """One syncfs of file system ``fs`` for the logs of ``group`` it has not covered yet."""
        refused = False
        with self._lock(self._fs_locks, fs, "service.kafka.group_sync_fs"):
            with self._state:
                todo = [log for log, end in group if self._durable.get(log, -1) < end]
            if not todo:
                return {}
            try:
                durable = self.tracker.sync_on_fs(todo, self._fs_fd(fs, todo[0]))
            except OSError as e:
                if e.errno not in _SYNCFS_REFUSED:
                    return dict.fromkeys(todo, e)  # a writeback error: none of them is known durable
                # refused (a sandbox's seccomp filter, say): fsync each (after this lock), and from now on
                logger.warning("syncfs(2) refused (%s); acks=-1 syncs each partition with fsync from now on", e)
                self.use_syncfs = False
                refused = True
            except Exception as e:  # noqa: BLE001 - none of them is known durable: their requests get the failure
                return dict.fromkeys(todo, e)
            else:
                self._covered(durable)
        if refused:
            return {log: err for log, end in group if (err := self._sync_one(log, end)) is not None}
        return {}

    def _fs_fd(self, fs: int, log: LocalLog) -> int | None:
        """A descriptor on file system ``fs`` kept open for its syncs: the directory holding ``log``'s partition
        directory (the data dir, which outlives any partition) when it is on ``fs``; None: the sync opens one."""
        fd = self._fs_fds.get(fs)  # called under fs's lock: no other thread opens one for fs meanwhile
        if fd is None:
            try:
                fd = os.open(log.dir.parent, os.O_RDONLY)
            except OSError:
                return None
            if os.fstat(fd).st_dev != fs:
                os.close(fd)
                return None
            self._fs_fds[fs] = fd
        return fd

    def _covered(self, durable: dict[LocalLog, int]) -> None:
        """Record one sync and the end offset it made durable for each of its logs."""
        with self._state:
            for log, end in durable.items():
                if self._durable.get(log, -1) < end:
                    self._durable[log] = end
            self.syncs += 1


def _close_all(fds: dict[int, int]) -> None:
    for fd in fds.values():
        with contextlib.suppress(OSError):
            os.close(fd)


def _for_node(node: Any) -> GroupSync:
    method = getattr(getattr(node, "config", None), "ack_sync_method", "syncfs")
    return GroupSync(flush_tracker_for(node), use_syncfs=None if method == "syncfs" else False)


#: the node's GroupSync (made on first use; it shares the node's FlushTracker and follows its ack_sync_method)
group_sync_for = per_node(_for_node)
