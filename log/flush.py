"""Making a log's appended records durable: an fsync of the active segment outside the log's lock, and Kafka's flush.messages / flush.ms.

What an append leaves volatile is the tail of the active segment and, right after a roll, the
rolled segment (a roll syncs it in the background, :meth:`LocalLog.sync_rolled`):
:func:`sync_log` syncs what rolls left first, then fsyncs the active segment, without holding
the log's lock (appends go on meanwhile), and returns the offset below which every record is
on disk. The active segment's indexes are not synced: recovery rebuilds them from the segment.

:class:`FlushTracker` remembers, per log, the offset synced so far and when, which is what
Kafka's ``flush.messages`` (sync once that many records are unsynced) and ``flush.ms`` (sync
records unsynced for that long) need.

:func:`sync_logs_on_fs` makes several logs of one file system durable with a single
``syncfs(2)`` (Linux): one journal commit and one device cache flush instead of one per
partition, about half the CPU and wall time of eight fsyncs on ext4 here. It also writes back
whatever else is dirty on that file system, so it suits a data dir on its own volume (Kafka's
advice for ``log.dirs``); the Kafka listener's group commit uses it when one job needs two or
more partitions of a file system synced and little else is dirty (:func:`dirty_bytes`,
service/kafka/durability.py).
"""

from __future__ import annotations

import bisect
import ctypes
import errno
import os
import threading
import time
import weakref
from collections.abc import Callable, Sequence

from log.checkpoint import fsync_path
from log.local_log import LocalLog
from log.segment import LogSegment


def sync_log(log: LocalLog) -> int:
    """fsync the log's appended bytes (what rolls left first); returns the log end offset they cover."""
    with log.lock:
        end = log.log_end_offset
        active = log.active_segment
        path, size = active.log_path, active.size
    log.sync_rolled()  # after the end is read: every roll below it is synced, the active segment's name too
    # missing: rolled (and so synced by the roll's sync, which came first) and deleted by retention meanwhile
    fsync_path(path, missing_ok=True)
    _synced_to(log, active, size)
    return end


def _synced_to(log: LocalLog, segment: LogSegment, size: int) -> None:
    """Tell ``segment`` its first ``size`` bytes are on disk (no write-back to start for them, LogSegment.note_synced)."""
    with log.lock:
        segment.note_synced(size)


def _load_syncfs() -> Callable[[int], int] | None:
    try:
        fn = ctypes.CDLL(None, use_errno=True).syncfs  # glibc 2.14+, Linux 2.6.39+
    except (OSError, AttributeError):
        return None
    fn.argtypes = [ctypes.c_int]
    fn.restype = ctypes.c_int
    return fn  # type: ignore[no-any-return]


_SYNCFS = _load_syncfs()


def syncfs_available() -> bool:
    """Whether this platform has ``syncfs(2)``."""
    return _SYNCFS is not None


#: local file systems whose syncfs(2) writes back and commits what fsync(2) of each file would; elsewhere (FUSE, whose
#: syncfs may not reach the daemon, network and unknown file systems) every log is fsynced on its own
SYNCFS_FILE_SYSTEMS = frozenset({"ext4", "ext3", "xfs", "btrfs", "f2fs", "tmpfs"})
MOUNTINFO = "/proc/self/mountinfo"


def mounted_file_systems(mountinfo: str = MOUNTINFO) -> dict[int, str]:
    """Device id -> file system type of every mount (Linux's mountinfo; empty where there is none)."""
    out: dict[int, str] = {}
    try:
        with open(mountinfo, encoding="utf-8", errors="replace") as f:
            for line in f:
                fields, sep, rest = line.partition(" - ")
                parts = fields.split()
                if not sep or len(parts) < 3 or ":" not in parts[2]:
                    continue
                major, _, minor = parts[2].partition(":")
                fstype = rest.split(" ", 1)[0]
                try:
                    out[os.makedev(int(major), int(minor))] = fstype
                except ValueError:
                    continue
    except OSError:
        pass
    return out


def syncfs_device_of(log: LocalLog, types: dict[int, str] | None = None) -> int | None:
    """The device id of the file system holding ``log``'s directory when one ``syncfs(2)`` of it makes the log's
    appended records durable (a local file system of :data:`SYNCFS_FILE_SYSTEMS`), else None (fsync it alone)."""
    if _SYNCFS is None:
        return None
    try:
        dev = os.stat(log.dir).st_dev
    except OSError:
        return None
    fstype = (types if types is not None else mounted_file_systems()).get(dev)
    return dev if fstype in SYNCFS_FILE_SYSTEMS else None


def sync_logs_on_fs(logs: Sequence[LocalLog], fd: int | None = None) -> dict[LocalLog, int]:
    """Make every record appended to ``logs`` so far durable with one ``syncfs(2)`` of the file system they share (the
    caller groups them, :func:`syncfs_device_of`); returns the end offset of each log it covers. Each log's end is read
    before the call, so all it covers was written before the file system was synced. Raises OSError when the call
    fails (a writeback error anywhere on the file system since it was opened: none of ``logs`` is known durable).
    ``fd``: an open descriptor on that file system to sync it through (else a log's directory is opened for it)."""
    if _SYNCFS is None:
        raise OSError(errno.ENOSYS, "syncfs(2) is not available on this platform")
    ends: dict[LocalLog, int] = {}
    actives: list[tuple[LocalLog, LogSegment, int]] = []
    for log in logs:
        with log.lock:
            ends[log] = log.log_end_offset
            active = log.active_segment
            actives.append((log, active, active.size))
    own = fd is None
    if fd is None:
        fd = -1
        for log in logs:  # any directory of that file system; a deleted partition's is gone
            try:
                fd = os.open(log.dir, os.O_RDONLY)
                break
            except FileNotFoundError:
                continue
        if fd < 0:
            return ends  # every one was deleted meanwhile: nothing of theirs is left to sync
    try:
        if _SYNCFS(fd) != 0:  # ctypes releases the GIL for the call
            err = ctypes.get_errno()
            raise OSError(err, f"syncfs of {logs[0].dir}'s file system failed: {os.strerror(err)}")
    finally:
        if own:
            os.close(fd)
    for log, active, size in actives:
        _synced_to(log, active, size)
    return ends


MEMINFO = "/proc/meminfo"


def dirty_bytes(meminfo: str = MEMINFO) -> int | None:
    """The machine's page-cache bytes waiting to be written back or being written (Linux's ``/proc/meminfo`` Dirty +
    Writeback): what a ``syncfs(2)`` of a file system may have to write besides its caller's own appends. None where
    unknown (no such file, an unreadable line)."""
    try:
        with open(meminfo, "rb") as f:
            text = f.read()
    except OSError:
        return None
    total = 0
    found = 0
    for line in text.splitlines():
        if line.startswith((b"Dirty:", b"Writeback:")):
            parts = line.split()
            if len(parts) < 2 or not parts[1].isdigit():
                return None
            total += int(parts[1]) * (1024 if parts[2:3] == [b"kB"] else 1)
            found += 1
    return total if found == 2 else None


#: upper bounds (milliseconds) of the sync-time histogram's buckets; one more counts the slower ones
FLUSH_TIME_BUCKETS_MS = (0.5, 1, 2, 5, 10, 25, 50, 100, 250, 500, 1000, 2500, 5000, 10000)


class FlushTracker:
    """Per log: the offset known durable and when it was synced; and how long each sync took (thread-safe)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._synced: weakref.WeakKeyDictionary[LocalLog, tuple[int, int]] = weakref.WeakKeyDictionary()
        self._times = [0] * (len(FLUSH_TIME_BUCKETS_MS) + 1)  # syncs per bucket, the last one unbounded
        self._times_sum_ms = 0.0

    def flush_times(self) -> tuple[list[int], float]:
        """Syncs so far by duration (a count per FLUSH_TIME_BUCKETS_MS bucket, then the slower ones) and their total
        milliseconds: Kafka's LogFlushRateAndTimeMs. An fsync of one log or one syncfs of several is one sync."""
        with self._lock:
            return list(self._times), self._times_sum_ms

    def _timed(self, started: float) -> None:
        ms = (time.perf_counter() - started) * 1000
        with self._lock:
            self._times[bisect.bisect_left(FLUSH_TIME_BUCKETS_MS, ms)] += 1
            self._times_sum_ms += ms

    def synced_offset(self, log: LocalLog) -> int:
        with self._lock:
            got = self._synced.get(log)
        return got[0] if got is not None else -1

    def note_synced(self, log: LocalLog, offset: int, now_ms: int) -> None:
        with self._lock:
            old = self._synced.get(log)
            if old is None or offset >= old[0]:
                self._synced[log] = (offset, now_ms)

    def sync(self, log: LocalLog) -> int:
        """:func:`sync_log` and remember it; returns the durable offset."""
        now = log.clock.milliseconds()
        started = time.perf_counter()
        end = sync_log(log)
        self._timed(started)
        self.note_synced(log, end, now)
        return end

    def sync_on_fs(self, logs: Sequence[LocalLog], fd: int | None = None) -> dict[LocalLog, int]:
        """:func:`sync_logs_on_fs` and remember it for each log; returns their durable offsets."""
        now = logs[0].clock.milliseconds()
        started = time.perf_counter()
        ends = sync_logs_on_fs(logs, fd)
        self._timed(started)
        for log, end in ends.items():
            self.note_synced(log, end, now)
        return ends

    def flush_due(self, log: LocalLog, now_ms: int) -> bool:
        """Whether ``flush.messages`` or ``flush.ms`` asks for a sync of ``log`` now."""
        policy = log.config.flush_policy
        if policy is None:
            return False
        messages, interval = policy
        with self._lock:
            synced, at = self._synced.get(log, (-1, -1))
        if at < 0:  # first sight of this log: start counting from here
            self.note_synced(log, log.log_start_offset, now_ms)
            synced, at = log.log_start_offset, now_ms
        unsynced = log.log_end_offset - synced
        if unsynced <= 0:
            return False
        return unsynced >= messages or now_ms - at >= interval

    def maybe_flush(self, log: LocalLog, now_ms: int | None = None) -> bool:
        """Sync ``log`` if its flush.messages / flush.ms say so; returns whether it did."""
        if not self.flush_due(log, log.clock.milliseconds() if now_ms is None else now_ms):
            return False
        self.sync(log)
        return True
