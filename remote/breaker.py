"""A circuit breaker for the object store: once it is known to be down, fail fast.

Without one, every caller (``POST .../tier``, the tiering loop, the tiered cleaner, reads)
spends its whole retry budget against a dead endpoint, one after the other, before it can
answer. With one, ``failure_threshold`` consecutive failures that say "the store is not
answering" (:class:`~remote.errors.RemoteStorageTransientError`: connection refused or
reset, timeouts, 5xx, throttling) open the circuit; for ``cooldown_s`` every call raises
:class:`~remote.errors.StoreUnavailableError` at once, without touching the network, with
``retry_after_s`` set to the time left (the service answers 503 with ``Retry-After``).
After the cool-down, calls go through again (half open): one success closes the circuit,
one more failure opens it for another cool-down.

What does not count as the store being down: a missing object, access denied, a bad
request (the store answered), and a checksum mismatch (the store answered; the bytes were
damaged on the way, and a retry may well succeed). Those reset the failure count.

:class:`BreakerObjectStore` wraps any ObjectStore with a breaker. Thread-safe. Pickling
(Spark) keeps the configuration and starts a fresh, closed breaker.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from typing import Any, TypeVar

from log.errors import InvalidConfigError
from log.locks import RANK_LEAF, ordered_lock
from remote.errors import RemoteStorageChecksumError, RemoteStorageTransientError, StoreUnavailableError
from remote.object_store import ForwardingObjectStore, ObjectStore, PutData

T = TypeVar("T")


class CircuitBreaker:
    """Counts consecutive store-down failures; see the module docstring."""

    def __init__(self, *, failure_threshold: int = 5, cooldown_s: float = 10.0,
                 now: Callable[[], float] = time.monotonic, name: str = "object store") -> None:
        if failure_threshold < 1 or cooldown_s <= 0:
            raise InvalidConfigError(f"circuit breaker needs failure_threshold >= 1 (got {failure_threshold}) "
                                     f"and cooldown_s > 0 (got {cooldown_s})")
        self.failure_threshold = failure_threshold
        self.cooldown_s = cooldown_s
        self.name = name
        self._now = now
        self._lock = ordered_lock("remote.breaker", RANK_LEAF)
        self._failures = 0
        self._open_until: float | None = None
        self._last_error = ""
        self.times_opened = 0
        self.calls_refused = 0

    def __getstate__(self) -> dict[str, Any]:
        state = self.__dict__.copy()
        del state["_lock"]
        state.update(_failures=0, _open_until=None, _now=time.monotonic)
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        self._lock = ordered_lock("remote.breaker", RANK_LEAF)

    @property
    def is_open(self) -> bool:
        with self._lock:
            return self._open_until is not None and self._now() < self._open_until

    def retry_after_s(self) -> float:
        """Seconds until calls are let through again (0 when closed)."""
        with self._lock:
            return 0.0 if self._open_until is None else max(0.0, self._open_until - self._now())

    def before_call(self, op: str, key: str | None) -> None:
        """Raise StoreUnavailableError while the circuit is open."""
        with self._lock:
            if self._open_until is None:
                return
            left = self._open_until - self._now()
            if left <= 0:
                return  # half open: let calls through; the next outcome decides
            self.calls_refused += 1
            err = self._last_error
        raise StoreUnavailableError(
            f"the {self.name} is unavailable ({self.failure_threshold} consecutive failures, last: {err}); "
            f"{op} not attempted, retry in {left:.1f} s", key=key, retry_after_s=left)

    def record_success(self) -> None:
        with self._lock:
            self._failures = 0
            self._open_until = None

    def record_failure(self, error: BaseException) -> None:
        with self._lock:
            self._failures += 1
            self._last_error = str(error)
            if self._failures >= self.failure_threshold:
                if self._open_until is None or self._now() >= self._open_until:
                    self.times_opened += 1
                self._open_until = self._now() + self.cooldown_s

    def call(self, op: str, key: str | None, fn: Callable[[], T]) -> T:
        self.before_call(op, key)
        try:
            result = fn()
        except StoreUnavailableError:
            raise
        except RemoteStorageChecksumError:
            self.record_success()  # the store answered
            raise
        except RemoteStorageTransientError as e:
            self.record_failure(e)
            raise
        except Exception:
            self.record_success()  # the store answered (not found, denied, bad request)
            raise
        self.record_success()
        return result


class BreakerObjectStore(ForwardingObjectStore):
    """Forwards to ``inner`` through a :class:`CircuitBreaker`."""

    def __init__(self, inner: ObjectStore, breaker: CircuitBreaker | None = None) -> None:
        super().__init__(inner)
        self.breaker = breaker if breaker is not None else CircuitBreaker()

    def put(self, key: str, data: PutData) -> int:
        return self.breaker.call("put", key, lambda: self.inner.put(key, data))

    def get(self, key: str) -> bytes:
        return self.breaker.call("get", key, lambda: self.inner.get(key))

    def get_range(self, key: str, start: int, end_exclusive: int) -> bytes:
        return self.breaker.call("ranged get", key, lambda: self.inner.get_range(key, start, end_exclusive))

    def get_to_file(self, key: str, path: Any, start: int = 0, end: int | None = None) -> int:
        return self.breaker.call("download", key, lambda: self.inner.get_to_file(key, path, start, end))

    def size(self, key: str) -> int:
        return self.breaker.call("head", key, lambda: self.inner.size(key))

    def exists(self, key: str) -> bool:
        return self.breaker.call("head", key, lambda: self.inner.exists(key))

    def delete(self, key: str) -> None:
        self.breaker.call("delete", key, lambda: self.inner.delete(key))

    def list(self, prefix: str = "") -> Iterator[str]:
        return self.breaker.call("list", prefix, lambda: self.inner.list(prefix))
