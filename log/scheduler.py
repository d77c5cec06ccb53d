"""A tiny delayed-task scheduler (Kafka's KafkaScheduler, for asynchronous file deletion).

One daemon thread runs tasks whose delay has passed. ``shutdown()`` drops pending tasks:
anything they would have done (deleting ``.deleted`` files) is redone by recovery.
"""

from __future__ import annotations

import heapq
import itertools
import logging
import threading
from collections.abc import Callable

from log.clock import SYSTEM_CLOCK, Clock
from log.locks import RANK_SCHEDULER, ordered_condition

logger = logging.getLogger(__name__)


class Scheduler:
    def __init__(self, clock: Clock = SYSTEM_CLOCK, name: str = "tiercompact-scheduler") -> None:
        self._clock = clock
        self._heap: list[tuple[float, int, Callable[[], None]]] = []
        self._seq = itertools.count()
        self._cv = ordered_condition("log.scheduler", RANK_SCHEDULER)
        self._stopped = False
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)
        self._thread.start()

    def schedule(self, delay_ms: float, task: Callable[[], None]) -> None:
        with self._cv:
            if self._stopped:
                return
            heapq.heappush(self._heap, (self._clock.monotonic_ms() + max(delay_ms, 0), next(self._seq), task))
            self._cv.notify()

    def run_due(self) -> int:
        """Run every task that is due now in the caller's thread (tests with a mock clock)."""
        ran = 0
        while True:
            with self._cv:
                if not self._heap or self._heap[0][0] > self._clock.monotonic_ms():
                    return ran
                _, _, task = heapq.heappop(self._heap)
            self._safe(task)
            ran += 1

    def pending(self) -> int:
        with self._cv:
            return len(self._heap)

    @staticmethod
    def _safe(task: Callable[[], None]) -> None:
        try:
            task()
        except Exception:  # a failed background task must not kill the scheduler
            logger.exception("scheduled task failed")

    def _run(self) -> None:
        while True:
            with self._cv:
                while not self._stopped and (not self._heap or self._heap[0][0] > self._clock.monotonic_ms()):
                    timeout = (self._heap[0][0] - self._clock.monotonic_ms()) / 1000 if self._heap else None
                    self._cv.wait(timeout=min(timeout, 0.5) if timeout is not None else 0.5)
                if self._stopped:
                    return
                _, _, task = heapq.heappop(self._heap)
            self._safe(task)

    def shutdown(self, timeout: float = 5.0) -> None:
        with self._cv:
            self._stopped = True
            self._heap.clear()
            self._cv.notify_all()
        self._thread.join(timeout=timeout)
