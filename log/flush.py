"""Making a log's appended records durable: an fsync of the active segment outside the log's lock, and Kafka's flush.messages / flush.ms.

Rolled segments are fsynced when they roll (LocalLog.roll), so what an append leaves
volatile is the tail of the active segment: :func:`sync_log` fsyncs it without holding the
log's lock (appends go on meanwhile) and returns the offset below which every record is on
disk. Indexes are not synced: recovery rebuilds them from the segment.

:class:`FlushTracker` remembers, per log, the offset synced so far and when, which is what
Kafka's ``flush.messages`` (sync once that many records are unsynced) and ``flush.ms`` (sync
records unsynced for that long) need.
"""

from __future__ import annotations

import os
import threading
import weakref

from log.local_log import LocalLog


def sync_log(log: LocalLog) -> int:
    """fsync the active segment's appended bytes; returns the log end offset they cover."""
    with log.lock:
        end = log.log_end_offset
        path = log.active_segment.log_path
    try:
        fd = os.open(path, os.O_RDONLY)
    except FileNotFoundError:
        return end  # rolled (and so synced) and then deleted by retention meanwhile
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
    return end


class FlushTracker:
    """Per log: the offset known durable and when it was synced (thread-safe)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._synced: weakref.WeakKeyDictionary[LocalLog, tuple[int, int]] = weakref.WeakKeyDictionary()

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
        end = sync_log(log)
        self.note_synced(log, end, now)
        return end

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
