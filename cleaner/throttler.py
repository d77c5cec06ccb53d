"""A bytes/second I/O throttle shared by every cleaner thread (Kafka's kafka.utils.Throttler).

Callers report bytes read and written with :meth:`Throttler.maybe_throttle`. Once more than
``check_interval_ms`` has passed since the current period began and something was observed,
the observed rate is compared with the desired one; if it is higher, the caller sleeps
``round(observed / (rate / 1000) - elapsed_ms)`` ms, so that the period's average comes back to
the rate. Then a new period starts.

Thread-safety: thread-safe. As in Kafka, the sleep happens while holding the lock, so every
thread sharing the throttler is held back together.
"""

from __future__ import annotations

import math

from log.clock import SYSTEM_CLOCK, Clock
from log.locks import RANK_LEAF, ordered_lock


class Throttler:
    def __init__(self, desired_rate_per_sec: float = math.inf, *, check_interval_ms: float = 300.0,
                 clock: Clock = SYSTEM_CLOCK) -> None:
        if not desired_rate_per_sec > 0:
            raise ValueError(f"throttle rate must be > 0, got {desired_rate_per_sec}")
        self.desired_rate_per_sec = desired_rate_per_sec
        self.check_interval_ms = check_interval_ms
        self._clock = clock
        self._lock = ordered_lock("cleaner.throttler", RANK_LEAF)
        self._period_start = clock.monotonic_ms()
        self._observed = 0.0
        #: total bytes observed (Kafka's cleaner-io meter) and total ms slept
        self.total_bytes = 0
        self.total_sleep_ms = 0.0

    @property
    def unlimited(self) -> bool:
        return math.isinf(self.desired_rate_per_sec)

    def maybe_throttle(self, observed: float) -> float:
        """Account ``observed`` bytes; sleep if the rate is exceeded. Returns ms slept."""
        with self._lock:
            self.total_bytes += int(observed)
            if self.unlimited:
                return 0.0
            self._observed += observed
            now = self._clock.monotonic_ms()
            elapsed = now - self._period_start
            slept = 0.0
            if elapsed > self.check_interval_ms and self._observed > 0:
                rate = self._observed * 1000.0 / elapsed
                if rate > self.desired_rate_per_sec:
                    sleep_ms = round(self._observed / (self.desired_rate_per_sec / 1000.0) - elapsed)
                    if sleep_ms > 0:
                        self._clock.sleep(sleep_ms)
                        slept = float(sleep_ms)
                        self.total_sleep_ms += slept
                self._period_start = self._clock.monotonic_ms()
                self._observed = 0.0
            return slept
