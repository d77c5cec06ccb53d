"""RequestThreads: the worker threads that run a request's blocking work (HTTP fast lane, Kafka listener).

The hot routes (service/routes/partitions.py ``RecordsFastLane``) hand each request's work,
decode-and-append or read-and-encode, to a thread so that the event loop never waits on a
disk write, a roll's fsync, a log lock or an object-store download. AnyIO's
``to_thread.run_sync`` (Starlette's ``run_in_threadpool``) costs about 75 us of CPU per hop
(a checkpoint, a capacity limiter, a context copy, a Python-level queue with a condition),
as much as the append itself; this pool costs about 10 us: a C ``SimpleQueue`` to the
workers and ``call_soon_threadsafe`` back.

:meth:`RequestThreads.run` is the awaitable form. :meth:`RequestThreads.submit` hands the outcome
to a callback on the worker thread instead, for callers that chain work without a Task per hop
(the Kafka listener's connection lanes call ``loop.call_soon_threadsafe`` from it once per
job).

Like AnyIO's, a request whose task is cancelled (uvicorn cancels the requests still running
when a stop's drain time is over) is not abandoned half-way: its thread finishes the work and
the answer is dropped. A request takes an idle worker or starts one, up to ``max_threads``
(AnyIO's default of 40); beyond that it waits in the queue for the next worker to finish.
Workers are daemon threads (a worker idle on the queue must not keep a process from exiting);
:meth:`stop` ends them, the idle ones at once and the busy ones when done (the app's lifespan
calls it at shutdown).
"""

from __future__ import annotations

import asyncio
import logging
import queue
import threading
from collections.abc import Callable
from typing import Any, TypeVar

from log.locks import RANK_LEAF, ordered_lock, request_scope

logger = logging.getLogger(__name__)

T = TypeVar("T")

#: AnyIO's default thread limiter, which the routes used before
DEFAULT_MAX_THREADS = 40


#: what a worker calls with a job's outcome: ``done(True, result)`` or ``done(False, exception)``
Done = Callable[[bool, Any], None]


def settle(fut: asyncio.Future[Any], ok: bool, value: Any) -> None:
    """Set an asyncio future from a worker's outcome (on its loop)."""
    if fut.done():  # a cancelled request: its answer is dropped
        return
    if ok:
        fut.set_result(value)
    else:
        fut.set_exception(value)


def _hand_back(loop: asyncio.AbstractEventLoop, fut: asyncio.Future[Any]) -> Done:
    def done(ok: bool, value: Any) -> None:
        try:
            loop.call_soon_threadsafe(settle, fut, ok, value)
        except RuntimeError:  # the loop is closed: nobody waits for the answer any more
            logger.debug("request finished after its event loop closed; answer dropped")
    return done


class RequestThreads:
    def __init__(self, max_threads: int = DEFAULT_MAX_THREADS, name: str = "tiercompact-request") -> None:
        if max_threads < 1:
            raise ValueError(f"max_threads={max_threads} must be at least 1")
        self.max_threads = max_threads
        self.name = name
        self._queue: queue.SimpleQueue[tuple[Callable[..., Any], tuple[Any, ...], Done] | None] = queue.SimpleQueue()
        self._lock = ordered_lock("service.request_threads", RANK_LEAF)
        # Every queued request has a thread: an idle one it claimed, one started for it, or
        # (all max_threads busy) the next to finish, which counts it in _waiting.
        self._threads = 0  # running
        self._idle = 0  # waiting on the queue, not claimed by a request
        self._waiting = 0  # queued requests no thread is claimed for yet
        self._closing = False  # stop(): a thread with nothing queued for it ends
        self._started = 0  # for thread names

    async def run(self, fn: Callable[..., T], *args: Any) -> T:
        """``fn(*args)`` on a worker thread; its result, or its exception raised here."""
        loop = asyncio.get_running_loop()
        fut: asyncio.Future[T] = loop.create_future()
        self.submit(fn, args, _hand_back(loop, fut))
        return await fut

    def submit(self, fn: Callable[..., Any], args: tuple[Any, ...], done: Done) -> None:
        """Queue ``fn(*args)`` for a worker thread, which then calls ``done(ok, value)`` itself (on that thread)."""
        spawn = 0
        with self._lock:
            self._closing = False
            if self._idle:
                self._idle -= 1
            elif self._threads < self.max_threads:
                self._threads += 1
                self._started += 1
                spawn = self._started
            else:
                self._waiting += 1
        if spawn:
            try:
                threading.Thread(target=self._work, name=f"{self.name}-{spawn}", daemon=True).start()
            except BaseException:
                with self._lock:
                    self._threads -= 1
                raise
        self._queue.put((fn, args, done))

    def _work(self) -> None:
        with request_scope():  # every job here is a request's: its partition-lock waits are bounded
            self._serve()

    def _serve(self) -> None:
        get, lock = self._queue.get, self._lock
        while True:
            item = get()
            if item is None:  # stop() counted this thread out already
                return
            fn, args, done = item
            del item
            try:
                value: Any = fn(*args)
                ok = True
            except BaseException as e:  # handed to the awaiting request, as AnyIO does
                value, ok = e, False
            # idle (or on to a waiting request) before the answer goes back, so that the request
            # it lets go on finds this thread instead of starting another
            with lock:
                if self._waiting:
                    self._waiting -= 1
                    end = False
                elif self._closing:
                    self._threads -= 1
                    end = True
                else:
                    self._idle += 1
                    end = False
            try:
                done(ok, value)
            except Exception:  # noqa: BLE001 - a callback's bug must not end the worker
                logger.exception("a request thread's completion callback failed")
            del fn, args, done, value
            if end:
                return

    @property
    def threads(self) -> int:
        """Worker threads running (busy or idle)."""
        with self._lock:
            return self._threads

    def stop(self) -> None:
        """End the idle workers now and the busy ones when they have no more queued work (the
        app's lifespan calls it at shutdown). A request after it starts workers again."""
        with self._lock:
            self._closing = True
            n, self._idle = self._idle, 0
            self._threads -= n
            for _ in range(n):
                self._queue.put(None)
