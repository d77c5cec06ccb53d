"""Background threads of a node (Kafka's ShutdownableThread and the LogManager's scheduled tasks).

:class:`ShutdownableThread` runs ``do_work()`` until ``initiate_shutdown()``; a failing
iteration is logged and counted, never fatal, so a bad partition cannot stop the loop.
:class:`PeriodicTask` runs one function every ``interval_ms`` and can be woken early.
The node runs three of them:

* ``tiering``: the RemoteLogManager's copy/retention pass (when tiering exists) and, for
  ``cleanup.policy`` containing ``delete``, local retention (``delete_old_segments``);
* ``force-roll``: KIP-354: every log whose active segment is past ``segment.ms`` or
  ``max.compaction.lag.ms`` is rolled so the cleaner can reach its records;
* deferred deletes of replaced segments are done by the log's own Scheduler.

Intervals are wall-clock waits on an Event (not Clock decisions): they only say how often
to look; what to do is decided by the logs with the node's Clock.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable

logger = logging.getLogger(__name__)


class ShutdownableThread(threading.Thread):
    """A daemon thread that loops ``do_work`` until told to stop."""

    def __init__(self, name: str) -> None:
        super().__init__(name=name, daemon=True)
        self._stop_event = threading.Event()
        self._wake = threading.Event()
        self.failures = 0
        self.iterations = 0
        self.last_error: str | None = None

    @property
    def is_shutting_down(self) -> bool:
        return self._stop_event.is_set()

    def do_work(self) -> None:  # pragma: no cover - overridden
        raise NotImplementedError

    def pause(self, seconds: float) -> None:
        """Sleep up to ``seconds``; returns early on wake() or shutdown."""
        self._wake.wait(timeout=seconds)
        self._wake.clear()

    def wake(self) -> None:
        self._wake.set()

    def run(self) -> None:
        logger.info("%s started", self.name)
        while not self._stop_event.is_set():
            try:
                self.do_work()
                self.iterations += 1
            except Exception as e:  # keep the loop alive; the error is visible in logs and stats
                self.failures += 1
                self.last_error = f"{type(e).__name__}: {e}"
                logger.exception("%s: iteration failed", self.name)
                self.pause(1.0)
        logger.info("%s stopped", self.name)

    def initiate_shutdown(self) -> None:
        self._stop_event.set()
        self._wake.set()

    def shutdown(self, timeout: float = 30.0) -> None:
        self.initiate_shutdown()
        if self.is_alive() and threading.current_thread() is not self:
            self.join(timeout)


class PeriodicTask(ShutdownableThread):
    """Runs ``fn`` every ``interval_ms`` (first run after one interval)."""

    def __init__(self, name: str, fn: Callable[[], object], interval_ms: int) -> None:
        super().__init__(name)
        self._fn = fn
        self.interval_ms = interval_ms

    def do_work(self) -> None:
        self.pause(self.interval_ms / 1000.0)
        if not self.is_shutting_down:
            self._fn()
