"""RequestThreads: the fast lane's worker threads (results, errors, bounds, cancellation, stop)."""

from __future__ import annotations

import asyncio
import threading
import time

import pytest

from service.request_threads import RequestThreads


def test_runs_on_a_worker_and_hands_back_results_and_errors() -> None:
    pool = RequestThreads(max_threads=4)

    def boom() -> None:
        raise KeyError("nope")

    async def main() -> None:
        me = threading.get_ident()
        assert await pool.run(lambda a, b: (a + b, threading.get_ident() != me), 2, 3) == (5, True)
        with pytest.raises(KeyError, match="nope"):
            await pool.run(boom)
        # sequential requests reuse the one idle worker
        for _ in range(20):
            await pool.run(time.sleep, 0)
        assert pool.threads == 1

    asyncio.run(main())
    pool.stop()


def test_at_most_max_threads_and_the_rest_wait() -> None:
    pool = RequestThreads(max_threads=3)
    release = threading.Event()
    running = []
    lock = threading.Lock()

    def work(i: int) -> int:
        with lock:
            running.append(threading.current_thread().name)
        release.wait(10)
        return i

    async def main() -> list[int]:
        tasks = [asyncio.ensure_future(pool.run(work, i)) for i in range(8)]
        await asyncio.sleep(0.2)
        assert pool.threads == 3 and len(running) == 3  # the other 5 wait in the queue
        release.set()
        return await asyncio.gather(*tasks)

    assert asyncio.run(main()) == list(range(8))
    assert len(set(running)) == 3
    pool.stop()


def test_a_cancelled_request_is_not_abandoned_half_way() -> None:
    """uvicorn cancels the requests still running when a stop's drain time is over: the work
    finishes on its thread, the answer is dropped, and the pool goes on serving."""
    pool = RequestThreads(max_threads=2)
    started, finished = threading.Event(), threading.Event()

    def slow() -> str:
        started.set()
        time.sleep(0.2)
        finished.set()
        return "late"

    async def main() -> str:
        task = asyncio.ensure_future(pool.run(slow))
        while not started.is_set():
            await asyncio.sleep(0.01)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        await asyncio.sleep(0.4)  # the late answer arrives for a cancelled future: dropped quietly
        assert finished.is_set()
        return await pool.run(lambda: "next")

    assert asyncio.run(main()) == "next"
    pool.stop()


def test_stop_ends_the_workers_and_work_queued_after_it_still_runs() -> None:
    pool = RequestThreads(max_threads=4, name="test-stop")

    async def burst() -> None:
        await asyncio.gather(*(pool.run(time.sleep, 0.05) for _ in range(4)))

    asyncio.run(burst())
    names = {t.name for t in threading.enumerate() if t.name.startswith("test-stop-")}
    assert pool.threads == 4 and len(names) == 4
    pool.stop()
    assert pool.threads == 0

    async def after() -> str:  # queued behind the stop sentinels: a new worker takes it
        return await pool.run(lambda: "served")

    assert asyncio.run(after()) == "served"
    pool.stop()
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline and any(
            t.name.startswith("test-stop-") and t.is_alive() for t in threading.enumerate()):
        time.sleep(0.01)
    assert not any(t.name.startswith("test-stop-") for t in threading.enumerate())


def test_max_threads_must_be_positive() -> None:
    with pytest.raises(ValueError, match="at least 1"):
        RequestThreads(max_threads=0)
