"""A connection's ordered lane: the blocking work of its pipelined requests, run in request order, many requests per worker job.

Kafka's broker processes one connection's requests strictly in order. A Produce handler puts
its appends on the connection's lane (:meth:`Lane.submit`, which queues at once and returns a
future) and returns, so the listener reads and decodes the client's next pipelined requests
while the appends run; whatever queued meanwhile runs next as one job on one worker thread, in
the order the requests came. Each request's future is settled as soon as its own work has run
(not when the whole job ends), so its answer and its fsync wait start while the job goes on.
Any request that is not pipelined waits until the lane has drained (:meth:`Lane.idle`) before
its handler runs, so an EndTxn or a Fetch never overtakes a Produce sent before it on the same
connection.

The jobs go to the listener's :class:`~service.request_threads.RequestThreads`, whose threads hand each
outcome back with one loop callback: no Task drives the lane and no executor future is chained.

The lane holds at most ``max_bytes`` of queued request payload before the listener stops
reading the connection (:meth:`Lane.room`), so memory stays bounded however fast a client
pipelines.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable
from typing import Any

from service.request_threads import RequestThreads, settle

Settle = Callable[[int, bool, Any], None]


def _run_all(work: list[tuple[Callable[..., Any], tuple[Any, ...]]], settle: Settle) -> None:
    """Run the job's work in order (on a worker thread), handing each outcome to ``settle`` as soon as it is known."""
    for i, (fn, args) in enumerate(work):
        try:
            value = fn(*args)
        except Exception as e:  # noqa: BLE001 - the failure belongs to that request's answer
            settle(i, False, e)
        else:
            settle(i, True, value)


class Lane:
    """One connection's queue of blocking work (used from the listener's event loop only)."""

    def __init__(self, workers: RequestThreads, max_bytes: int) -> None:
        self._workers = workers
        self.max_bytes = max_bytes
        self._queued: list[tuple[Callable[..., Any], tuple[Any, ...], asyncio.Future[Any], int]] = []
        self._bytes = 0
        self._running = False
        self._changed = asyncio.Event()
        #: worker jobs run and the work items they ran (metrics, tests)
        self.jobs = 0
        self.items = 0

    @property
    def busy(self) -> bool:
        return self._running

    def submit(self, fn: Callable[..., Any], *args: Any, size: int = 0) -> asyncio.Future[Any]:
        """Queue ``fn(*args)`` behind everything queued before it; the future gets its result or exception."""
        loop = asyncio.get_running_loop()
        fut: asyncio.Future[Any] = loop.create_future()
        self._queued.append((fn, args, fut, size))
        self._bytes += size
        if not self._running:
            self._start(loop)
        return fut

    def _start(self, loop: asyncio.AbstractEventLoop) -> None:
        """Hand everything queued to a worker as one job."""
        batch, self._queued = self._queued, []
        self._running = True
        settled = [0]  # items settled so far, in order (read and written on the loop only)

        def settle_now(i: int, ok: bool, value: Any) -> None:
            settled[0] = i + 1
            self._settle(batch[i], ok, value)

        def on_item(i: int, ok: bool, value: Any) -> None:  # on the worker thread, as each item finishes
            with contextlib.suppress(RuntimeError):  # the loop closed while stopping
                loop.call_soon_threadsafe(settle_now, i, ok, value)

        def job_done(ok: bool, value: Any) -> None:  # on the worker thread, after every settle of the job
            with contextlib.suppress(RuntimeError):
                loop.call_soon_threadsafe(self._job_done, loop, batch, settled, ok, value)

        self._workers.submit(_run_all, ([(fn, args) for fn, args, _f, _s in batch], on_item), job_done)

    def _job_done(self, loop: asyncio.AbstractEventLoop, batch: list[Any], settled: list[int], ok: bool,
                  value: Any) -> None:
        if not ok:  # a BaseException escaped a work item and ended the job: what it did not settle fails with it
            err = value if isinstance(value, Exception) else RuntimeError(f"lane job interrupted: {value!r}")
            for item in batch[settled[0]:]:
                self._settle(item, False, err)
        self.jobs += 1
        self.items += len(batch)
        if self._queued:
            self._start(loop)
        else:
            self._running = False
        self._changed.set()

    def _settle(self, item: tuple[Any, Any, asyncio.Future[Any], int], ok: bool, value: Any) -> None:
        self._bytes -= item[3]
        settle(item[2], ok, value)
        self._changed.set()

    async def idle(self) -> None:
        """Wait until everything queued so far has run."""
        while self._running:
            self._changed.clear()
            await self._changed.wait()

    async def room(self) -> None:
        """Wait while more than ``max_bytes`` of queued work waits to run."""
        while self._bytes > self.max_bytes and self._running:
            self._changed.clear()
            await self._changed.wait()
