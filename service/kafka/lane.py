"""A connection's ordered lane: the blocking work of its pipelined requests, run in request order, many requests per worker job.

Kafka's broker processes one connection's requests strictly in order. A Produce handler puts
its appends on the connection's lane (:meth:`Lane.submit`, which queues at once and returns a
future) and returns, so the listener reads and decodes the client's next pipelined requests
while the appends run; whatever queued meanwhile runs next as one job on one worker thread, in
the order the requests came. An item may name a ``finish`` step, run once per job on the worker
after every item, with the results of the items that named it: the acks=-1 sync of the
partitions the job appended to (service/kafka/durability.py). Requests queued while the job's
items ran join it before its finish step (:data:`LATE_JOIN_ROUNDS` times at most), so a client's
burst of requests, one per partition as librdkafka sends them, shares one sync instead of waiting
for the sync of the job ahead and then a second one of its own. The job's outcomes then go back to
the event loop in one hand-off, and each request's future is settled from it.
Any request that is not pipelined waits until the lane has drained (:meth:`Lane.idle`) before
its handler runs, so an EndTxn or a Fetch never overtakes a Produce sent before it on the same
connection.

The jobs go to the listener's :class:`~service.request_threads.RequestThreads`, whose threads hand each
job's outcome back with one loop callback: no Task drives the lane and no executor future is chained.

The lane holds at most ``max_bytes`` of queued request payload before the listener stops
reading the connection (:meth:`Lane.room`), so memory stays bounded however fast a client
pipelines.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable
from typing import Any

from log.locks import RANK_LEAF, ordered_lock
from service.request_threads import RequestThreads, settle

#: run once per job on the worker, after its items, with the results of the items that named it (the sync)
Finish = Callable[[list[Any]], None]
#: a queued request's work: function, arguments, finish, its future, the payload bytes it holds
_Item = tuple[Callable[..., Any], tuple[Any, ...], "Finish | None", asyncio.Future[Any], int]


#: how many times a job with a finish step takes in the requests queued while its items ran, before it finishes
LATE_JOIN_ROUNDS = 3

_Work = list[tuple[Callable[..., Any], tuple[Any, ...], "Finish | None"]]


def _run_all(work: _Work, more: Callable[[], _Work] | None = None) -> list[tuple[bool, Any]]:
    """Run the job's work in order (on a worker thread), then each distinct ``finish`` once with the results of
    the items that named it; returns every item's outcome, ``(True, result)`` or ``(False, exception)``.

    When an item named a finish step, ``more()`` is asked (up to :data:`LATE_JOIN_ROUNDS` times) for the work
    queued meanwhile, which runs next, in order, and shares the finish step: a late request rides on this job's
    sync instead of waiting for it and then syncing again."""
    outcomes: list[tuple[bool, Any]] = []
    finishing: dict[Finish, list[Any]] = {}
    todo, work = work, list(work)
    for round_ in range(LATE_JOIN_ROUNDS + 1):
        if round_:
            if not finishing or more is None:
                break
            todo = more()
            if not todo:
                break
            work.extend(todo)
        for fn, args, finish in todo:
            try:
                value = fn(*args)
            except Exception as e:  # noqa: BLE001 - the failure belongs to that request's answer
                outcomes.append((False, e))
            else:
                outcomes.append((True, value))
                if finish is not None:
                    finishing.setdefault(finish, []).append(value)
    for finish, values in finishing.items():
        try:
            finish(values)
        except Exception as e:  # noqa: BLE001 - those items fail with it; the others keep their results
            for i, (ok, _value) in enumerate(outcomes):
                if ok and work[i][2] == finish:  # == : a bound method is a new object at every access
                    outcomes[i] = (False, e)
    return outcomes


class Lane:
    """One connection's queue of blocking work (used from the listener's event loop, except that a running job's
    worker takes the late requests out of ``_queued``, under ``_guard``)."""

    def __init__(self, workers: RequestThreads, max_bytes: int) -> None:
        self._workers = workers
        self.max_bytes = max_bytes
        self._guard = ordered_lock("service.kafka.lane", RANK_LEAF)
        self._queued: list[_Item] = []
        self._bytes = 0
        self._running = False
        self._changed = asyncio.Event()
        #: worker jobs run and the work items they ran (metrics, tests)
        self.jobs = 0
        self.items = 0

    @property
    def busy(self) -> bool:
        return self._running

    def submit(self, fn: Callable[..., Any], *args: Any, size: int = 0,
               finish: Finish | None = None) -> asyncio.Future[Any]:
        """Queue ``fn(*args)`` behind everything queued before it; the future gets its result or exception once
        the job it runs in is done, after ``finish`` (see :func:`_run_all`) had that result."""
        loop = asyncio.get_running_loop()
        fut: asyncio.Future[Any] = loop.create_future()
        with self._guard:
            self._queued.append((fn, args, finish, fut, size))
        self._bytes += size
        if not self._running:
            self._start(loop)
        return fut

    def _start(self, loop: asyncio.AbstractEventLoop) -> None:
        """Hand everything queued to a worker as one job."""
        with self._guard:
            batch, self._queued = self._queued, []
        self._running = True

        def more() -> _Work:  # on the worker thread, before the job's finish step: the requests queued meanwhile
            with self._guard:
                late, self._queued = self._queued, []
            batch.extend(late)  # read by _job_done only after the worker handed the job back
            return [(fn, args, finish) for fn, args, finish, _f, _s in late]

        def job_done(ok: bool, value: Any) -> None:  # on the worker thread: one hand-back per job
            with contextlib.suppress(RuntimeError):  # the loop closed while stopping
                loop.call_soon_threadsafe(self._job_done, loop, batch, ok, value)

        self._workers.submit(_run_all, ([(fn, args, finish) for fn, args, finish, _f, _s in batch], more), job_done)

    def _job_done(self, loop: asyncio.AbstractEventLoop, batch: list[_Item], ok: bool, value: Any) -> None:
        if ok:
            for item, (item_ok, item_value) in zip(batch, value, strict=True):
                self._settle(item, item_ok, item_value)
        else:  # a BaseException escaped a work item and ended the job: every request of it fails with it
            err = value if isinstance(value, Exception) else RuntimeError(f"lane job interrupted: {value!r}")
            for item in batch:
                self._settle(item, False, err)
        self.jobs += 1
        self.items += len(batch)
        with self._guard:
            queued = bool(self._queued)
        if queued:
            self._start(loop)
        else:
            self._running = False
        self._changed.set()

    def _settle(self, item: _Item, ok: bool, value: Any) -> None:
        self._bytes -= item[4]
        settle(item[3], ok, value)

    async def idle(self) -> None:
        """Wait until everything queued so far has run."""
        while self._running:
            self._changed.clear()
            await self._changed.wait()

    def full(self) -> bool:
        """Whether :meth:`room` would wait."""
        return self._bytes > self.max_bytes and self._running

    async def room(self) -> None:
        """Wait while more than ``max_bytes`` of queued work waits to run."""
        while self._bytes > self.max_bytes and self._running:
            self._changed.clear()
            await self._changed.wait()
