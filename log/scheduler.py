"""A tiny delayed-task scheduler (Kafka's KafkaScheduler, for asynchronous file deletion).

One daemon thread runs tasks whose delay has passed. A segment's files, once its delete delay is
over, go to the scheduler's :class:`~log.file_remover.FileRemover` thread, which removes them paced
(:meth:`Scheduler.remove_later`), so a burst of deletions neither stalls the disk's syncs nor holds
up the tasks behind it here (a roll's sync). The logs' drop-behind calls run on its
:class:`~log.page_cache.CacheDropper` thread, off their append path. ``shutdown()`` drops pending tasks and removals:
anything they would have done (deleting ``.deleted`` files) is redone by recovery.
"""

from __future__ import annotations

import heapq
import itertools
import logging
import threading
from collections.abc import Callable
from pathlib import Path

from log.clock import SYSTEM_CLOCK, Clock
from log.file_remover import TRUNCATE_MIN_DELAY_MS, FileRemover
from log.locks import RANK_SCHEDULER, ordered_condition
from log.page_cache import CacheDropper

logger = logging.getLogger(__name__)


class Scheduler:
    def __init__(self, clock: Clock = SYSTEM_CLOCK, name: str = "tiercompact-scheduler") -> None:
        self._clock = clock
        self._heap: list[tuple[float, int, Callable[[], None]]] = []
        self._seq = itertools.count()
        self._cv = ordered_condition("log.scheduler", RANK_SCHEDULER)
        self._stopped = False
        self.remover = FileRemover(f"{name}-remover")
        #: the drop-behind thread: the logs' page-cache drops run there, off their append path (log/page_cache.py)
        self.dropper = CacheDropper(f"{name}-cache-dropper")
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)
        self._thread.start()

    def remove_later(self, delay_ms: float, close: Callable[[], None], files: Callable[[], list[Path]]) -> None:
        """After ``delay_ms``, call ``close`` and hand the paths ``files()`` names then to the remover thread
        (a segment's ``close`` and ``files``: its files are named at removal time, as it was renamed meanwhile)."""
        truncate = delay_ms >= TRUNCATE_MIN_DELAY_MS

        def hand_over() -> None:
            close()
            self.remover.remove(files(), truncate)
        self.schedule(delay_ms, hand_over)

    def schedule(self, delay_ms: float, task: Callable[[], None]) -> None:
        with self._cv:
            if self._stopped:
                return
            heapq.heappush(self._heap, (self._clock.monotonic_ms() + max(delay_ms, 0), next(self._seq), task))
            self._cv.notify()

    def run_due(self) -> int:
        """Run every task that is due now in the caller's thread, and the removals they queued (tests with a mock
        clock)."""
        ran = 0
        while True:
            with self._cv:
                task = heapq.heappop(self._heap)[2] if self._heap and self._heap[0][0] <= self._clock.monotonic_ms() \
                    else None
            if task is None:
                self.remover.drain()
                self.dropper.drain()
                return ran
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
        self.remover.shutdown(timeout=timeout)
        self.dropper.shutdown(timeout=timeout)
