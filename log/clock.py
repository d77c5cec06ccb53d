"""Time as an injectable collaborator: every lag and retention decision reads a Clock."""

from __future__ import annotations

import time
from typing import Protocol

from log.locks import RANK_CLOCK, ordered_lock


class Clock(Protocol):
    def milliseconds(self) -> int:
        """Wall-clock time in epoch milliseconds."""

    def monotonic_ms(self) -> float:
        """A monotonic time in milliseconds, for measuring durations."""

    def sleep(self, ms: float) -> None:
        """Sleep for ``ms`` milliseconds (a fake clock advances instead)."""


class SystemClock:
    """The real clock."""

    def milliseconds(self) -> int:
        return time.time_ns() // 1_000_000

    def monotonic_ms(self) -> float:
        return time.monotonic() * 1000.0

    def sleep(self, ms: float) -> None:
        if ms > 0:
            time.sleep(ms / 1000.0)


class MockClock:
    """A clock that only moves when told to (Kafka's MockTime). Thread-safe."""

    def __init__(self, now_ms: int = 1_700_000_000_000) -> None:
        self._now = float(now_ms)
        self._lock = ordered_lock("log.clock", RANK_CLOCK)

    def milliseconds(self) -> int:
        with self._lock:
            return int(self._now)

    def monotonic_ms(self) -> float:
        with self._lock:
            return self._now

    def sleep(self, ms: float) -> None:
        self.advance(ms)

    def advance(self, ms: float) -> None:
        with self._lock:
            self._now += ms


SYSTEM_CLOCK = SystemClock()
