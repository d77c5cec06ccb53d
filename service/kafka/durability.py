"""acks=-1 on one copy: a produce answer waits until its records are fsynced, one fsync shared by every request waiting on a partition.

A request whose records end at offset ``end`` awaits :meth:`GroupSync.wait_durable`. The
first waiter on a partition starts an fsync (log/flush.py's ``sync_log`` on a worker thread,
outside the log's lock); requests arriving while it runs wait for the next one, which then
covers all of them: however many producers wait, a partition has at most one fsync running
and one queued. Each fsync also tells the node's FlushTracker (flush.messages / flush.ms).
"""

from __future__ import annotations

import asyncio
import weakref
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

from log.flush import FlushTracker
from log.local_log import LocalLog
from service.flush_policy import flush_tracker_for

Runner = Callable[..., Awaitable[Any]]


@dataclass
class _PartitionSync:
    durable: int = -1
    running: bool = False
    waiters: list[tuple[int, asyncio.Future[None]]] = field(default_factory=list)


class GroupSync:
    """The grouped fsync of every partition of one node (used from the listener's event loop)."""

    def __init__(self, tracker: FlushTracker) -> None:
        self.tracker = tracker
        self._state: weakref.WeakKeyDictionary[LocalLog, _PartitionSync] = weakref.WeakKeyDictionary()
        #: fsyncs run, and requests they answered (metrics, tests)
        self.syncs = 0
        self.answered = 0

    async def wait_durable(self, run: Runner, log: LocalLog, end_offset: int) -> None:
        """Return once every record below ``end_offset`` of ``log`` is on disk."""
        st = self._state.get(log)
        if st is None:
            st = self._state[log] = _PartitionSync()
        if st.durable >= end_offset:
            return
        fut: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        st.waiters.append((end_offset, fut))
        if not st.running:
            st.running = True
            asyncio.ensure_future(self._drain(run, log, st))
        await fut

    async def _drain(self, run: Runner, log: LocalLog, st: _PartitionSync) -> None:
        try:
            while st.waiters:
                waiting, st.waiters = st.waiters, []
                try:
                    durable = await run(self.tracker.sync, log)
                except BaseException as e:  # noqa: BLE001 - every waiter gets the failure
                    for _end, fut in waiting:
                        if not fut.done():
                            fut.set_exception(e if isinstance(e, Exception) else RuntimeError(str(e)))
                    continue
                self.syncs += 1
                st.durable = max(st.durable, durable)
                for end, fut in waiting:
                    if end <= st.durable:
                        self.answered += 1
                        if not fut.done():
                            fut.set_result(None)
                    else:  # appended after the fsync read the log end: the next one covers it
                        st.waiters.append((end, fut))
        finally:
            st.running = False


_BY_NODE: weakref.WeakKeyDictionary[Any, GroupSync] = weakref.WeakKeyDictionary()


def group_sync_for(node: Any) -> GroupSync:
    """The node's GroupSync (made on first use; it shares the node's FlushTracker)."""
    gs = _BY_NODE.get(node)
    if gs is None:
        gs = _BY_NODE[node] = GroupSync(flush_tracker_for(node))
    return gs
