"""acks=-1 on one copy: a produce answer waits until its records are fsynced, in shared fsync rounds.

A request whose records end at offsets ``ends`` (one per partition it wrote) registers a callback
with :meth:`GroupSync.when_durable`, called on the event loop once they are on disk. The node has
one sync round running at a time, on its own thread (never on the request workers, so an append
never waits behind an fsync): the round
fsyncs every partition some waiting request still needs (log/flush.py's ``sync_log``, outside
the log's lock), then answers every request it covered. Requests arriving while a round runs
wait for the next one, which covers all of them, so however many producers and partitions
wait, the fsync count per second stays bounded by the disk's round time, not by the request
rate: Kafka's group commit, done node-wide. Each fsync also tells the node's FlushTracker
(flush.messages / flush.ms).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import weakref
from collections.abc import Callable
from typing import Any

from log.flush import FlushTracker
from log.local_log import LocalLog
from service.flush_policy import flush_tracker_for
from service.request_threads import RequestThreads

logger = logging.getLogger(__name__)

#: what a waiting request is called with: the logs whose fsync failed (empty when all are durable)
Durable = Callable[[dict[LocalLog, Exception]], None]


class _Waiter:
    __slots__ = ("needs", "done")

    def __init__(self, needs: dict[LocalLog, int], done: Durable) -> None:
        self.needs = needs
        self.done = done


class GroupSync:
    """The grouped fsync of every partition of one node (waited on from the listener's event loop)."""

    def __init__(self, tracker: FlushTracker) -> None:
        self.tracker = tracker
        self._durable: weakref.WeakKeyDictionary[LocalLog, int] = weakref.WeakKeyDictionary()
        self._waiting: list[_Waiter] = []
        self._running = False
        #: one thread: 8 fsyncs side by side shortened a round by a quarter on ext4 here, but cost ~80% more CPU
        self._thread = RequestThreads(1, "tiercompact-fsync")
        #: fsyncs run, rounds run, and requests they answered (metrics, tests)
        self.syncs = 0
        self.rounds = 0
        self.answered = 0

    def when_durable(self, ends: dict[LocalLog, int], done: Durable) -> None:
        """Call ``done(failed)`` on the event loop once, for each log, every record below its end offset is on disk
        (at once when they already are); ``failed`` holds the logs whose fsync failed."""
        needs = {log: end for log, end in ends.items() if self._durable.get(log, -1) < end}
        if not needs:
            done({})
            return
        self._waiting.append(_Waiter(needs, done))
        if not self._running:
            self._start_round(asyncio.get_running_loop())

    def _start_round(self, loop: asyncio.AbstractEventLoop) -> None:
        """Hand the round thread every log a waiting request still needs (on the loop)."""
        waiting, self._waiting = self._waiting, []
        logs = {log for w in waiting for log, end in w.needs.items() if self._durable.get(log, -1) < end}
        self._running = True

        def done(ok: bool, value: Any) -> None:  # on the round thread
            with contextlib.suppress(RuntimeError):  # the loop closed while stopping
                loop.call_soon_threadsafe(self._round_done, loop, waiting, logs, ok, value)

        self._thread.submit(self._sync_all, (logs,), done)

    def _round_done(self, loop: asyncio.AbstractEventLoop, waiting: list[_Waiter], logs: set[LocalLog], ok: bool,
                    value: Any) -> None:
        if ok:
            synced, failed = value
        else:  # a BaseException escaped _sync_all: every log the round held fails, so no request waits for ever
            err = value if isinstance(value, Exception) else RuntimeError(f"fsync round interrupted: {value!r}")
            synced, failed = {}, dict.fromkeys(logs, err)
        self.rounds += 1
        self.syncs += len(synced)
        for log, end in synced.items():
            self._durable[log] = max(self._durable.get(log, -1), end)
        try:
            for w in waiting:
                bad = {log: failed[log] for log in w.needs if log in failed}
                if bad:
                    _call(w.done, bad)
                elif all(self._durable.get(log, -1) >= end for log, end in w.needs.items()):
                    self.answered += 1
                    _call(w.done, {})
                else:  # appended after the round read that log's end: the next round covers it
                    self._waiting.append(w)
        finally:
            if self._waiting:
                self._start_round(loop)
            else:
                self._running = False

    def _sync_all(self, logs: set[LocalLog]) -> tuple[dict[LocalLog, int], dict[LocalLog, Exception]]:
        synced: dict[LocalLog, int] = {}
        failed: dict[LocalLog, Exception] = {}
        for log in logs:
            try:
                synced[log] = self.tracker.sync(log)
            except Exception as e:  # noqa: BLE001 - the requests waiting on this log get the failure
                failed[log] = e
        return synced, failed


def _call(done: Durable, failed: dict[LocalLog, Exception]) -> None:
    try:
        done(failed)
    except Exception:  # noqa: BLE001 - one request's bug must not stop the rounds of the others
        logger.exception("a durable-append callback failed")


_BY_NODE: weakref.WeakKeyDictionary[Any, GroupSync] = weakref.WeakKeyDictionary()


def group_sync_for(node: Any) -> GroupSync:
    """The node's GroupSync (made on first use; it shares the node's FlushTracker)."""
    gs = _BY_NODE.get(node)
    if gs is None:
        gs = _BY_NODE[node] = GroupSync(flush_tracker_for(node))
    return gs
