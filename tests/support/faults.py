"""FaultyObjectStore: an ObjectStore wrapper that injects failures for tests.

    store = FaultyObjectStore(FileObjectStore(tmp))
    store.inject("put", "transient", on_calls={1, 2})     # first two puts fail, then succeed
    store.inject("get_range", "truncate")                   # every ranged read returns half
    store.inject("put", "error", key_contains=".index")     # puts of index objects always fail

Kinds: ``transient`` (RemoteStorageTransientError), ``timeout`` (RemoteStorageTimeoutError),
``error`` (RemoteStorageIOError), ``not_found`` (ObjectNotFoundError), ``truncate`` (the
operation "succeeds" on half of the data: a put stores half, a read returns half),
``crash`` (a plain RuntimeError, like a bug or KeyboardInterrupt in the caller's thread).
Call numbers are 1-based per operation name and count every call, failed or not.
"""

from __future__ import annotations

import os
import threading
import time
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from remote.errors import (
    ObjectNotFoundError,
    RemoteStorageIOError,
    RemoteStorageTimeoutError,
    RemoteStorageTransientError,
)
from remote.object_store import ForwardingObjectStore, ObjectStore, PutData, open_put_data

OPS = ("put", "get", "get_range", "get_to_file", "size", "exists", "delete", "list")
#: "flip" damages one bit in the middle of what a read returns (corruption in transit)
KINDS = ("transient", "timeout", "error", "not_found", "truncate", "crash", "flip")


@dataclass
class Fault:
    op: str
    kind: str
    on_calls: frozenset[int] | None = None  # None: every call
    key_contains: str | None = None
    times: int | None = None  # stop after firing this many times
    fired: int = 0

    def matches(self, op: str, call: int, key: str) -> bool:
        if op != self.op or (self.times is not None and self.fired >= self.times):
            return False
        if self.on_calls is not None and call not in self.on_calls:
            return False
        return self.key_contains is None or self.key_contains in key


class FaultyObjectStore(ForwardingObjectStore):
    """Forwards to ``inner`` except where an injected fault matches."""

    def __init__(self, inner: ObjectStore, *faults: Fault) -> None:
        super().__init__(inner)
        self.verifies_writes = False  # a "truncate" fault stores less than put() answers
        self.faults: list[Fault] = list(faults)
        self.calls: Counter[str] = Counter()
        self.log: list[tuple[str, str, str | None]] = []  # (op, key, fault kind or None)
        self._lock = threading.Lock()

    def inject(self, op: str, kind: str, *, on_calls: set[int] | None = None, key_contains: str | None = None,
               times: int | None = None) -> FaultyObjectStore:
        if op not in OPS or kind not in KINDS:
            raise ValueError(f"unknown op {op!r} or kind {kind!r}")
        self.faults.append(Fault(op, kind, frozenset(on_calls) if on_calls else None, key_contains, times))
        return self

    def clear(self) -> None:
        self.faults.clear()

    def _fault(self, op: str, key: str) -> str | None:
        with self._lock:
            self.calls[op] += 1
            call = self.calls[op]
            for f in self.faults:
                if f.matches(op, call, key):
                    f.fired += 1
                    self.log.append((op, key, f.kind))
                    return f.kind
            self.log.append((op, key, None))
            return None

    @staticmethod
    def _raise(kind: str, op: str, key: str) -> None:
        msg = f"injected {kind} on {op}"
        if kind == "transient":
            raise RemoteStorageTransientError(msg, key=key)
        if kind == "timeout":
            raise RemoteStorageTimeoutError(msg, key=key)
        if kind == "error":
            raise RemoteStorageIOError(msg, key=key)
        if kind == "not_found":
            raise ObjectNotFoundError(msg, key=key)
        if kind == "crash":
            raise RuntimeError(f"{msg} of {key!r}")

    def put(self, key: str, data: PutData) -> int:
        kind = self._fault("put", key)
        if kind == "truncate":
            stream, _, owned = open_put_data(data)
            try:
                body = stream.read()
            finally:
                if owned:
                    stream.close()
            self.inner.put(key, body[: len(body) // 2])
            return len(body)  # the lie a broken transport tells
        if kind is not None:
            self._raise(kind, "put", key)
        return self.inner.put(key, data)

    def get(self, key: str) -> bytes:
        kind = self._fault("get", key)
        if kind == "truncate":
            data = self.inner.get(key)
            return data[: len(data) // 2]
        if kind is not None:
            self._raise(kind, "get", key)
        return self.inner.get(key)

    def get_range(self, key: str, start: int, end_exclusive: int) -> bytes:
        kind = self._fault("get_range", key)
        if kind == "truncate":
            data = self.inner.get_range(key, start, end_exclusive)
            return data[: len(data) // 2]
        if kind is not None:
            self._raise(kind, "get_range", key)
        return self.inner.get_range(key, start, end_exclusive)

    def get_to_file(self, key: str, path: str | os.PathLike[str], start: int = 0, end: int | None = None) -> int:
        kind = self._fault("get_to_file", key)
        if kind == "flip":
            n = self.inner.get_to_file(key, path, start, end)
            if n:
                with Path(path).open("r+b") as f:
                    f.seek(n // 2)
                    b = f.read(1)
                    f.seek(n // 2)
                    f.write(bytes([b[0] ^ 0x10]))
            return n
        if kind == "truncate":
            n = self.inner.get_to_file(key, path, start, end)
            with Path(path).open("r+b") as f:
                f.truncate(n // 2)
            return n // 2
        if kind is not None:
            self._raise(kind, "get_to_file", key)
        return self.inner.get_to_file(key, path, start, end)

    def size(self, key: str) -> int:
        kind = self._fault("size", key)
        if kind is not None and kind != "truncate":
            self._raise(kind, "size", key)
        return self.inner.size(key)

    def exists(self, key: str) -> bool:
        kind = self._fault("exists", key)
        if kind is not None and kind != "truncate":
            self._raise(kind, "exists", key)
        return self.inner.exists(key)

    def delete(self, key: str) -> None:
        kind = self._fault("delete", key)
        if kind is not None and kind != "truncate":
            self._raise(kind, "delete", key)
        self.inner.delete(key)

    def list(self, prefix: str = "") -> Iterator[str]:
        kind = self._fault("list", prefix)
        if kind is not None and kind != "truncate":
            self._raise(kind, "list", prefix)
        return self.inner.list(prefix)


class SlowObjectStore(ForwardingObjectStore):
    """Answers every call correctly, but only after ``delay_s`` (an S3 that is slow, not down:
    no error, so a circuit breaker stays closed). ``delay_s`` may be changed at any time."""

    def __init__(self, inner: ObjectStore, delay_s: float) -> None:
        super().__init__(inner)
        self.delay_s = delay_s
        self.calls = 0
        self._lock = threading.Lock()

    def _wait(self) -> None:
        with self._lock:
            self.calls += 1
        if self.delay_s > 0:
            time.sleep(self.delay_s)

    def put(self, key: str, data: PutData) -> int:
        self._wait()
        return self.inner.put(key, data)

    def get(self, key: str) -> bytes:
        self._wait()
        return self.inner.get(key)

    def get_range(self, key: str, start: int, end_exclusive: int) -> bytes:
        self._wait()
        return self.inner.get_range(key, start, end_exclusive)

    def get_to_file(self, key: str, path: str | os.PathLike[str], start: int = 0, end: int | None = None) -> int:
        self._wait()
        return self.inner.get_to_file(key, path, start, end)

    def size(self, key: str) -> int:
        self._wait()
        return self.inner.size(key)

    def exists(self, key: str) -> bool:
        self._wait()
        return self.inner.exists(key)

    def delete(self, key: str) -> None:
        self._wait()
        self.inner.delete(key)

    def list(self, prefix: str = "") -> Iterator[str]:
        self._wait()
        return self.inner.list(prefix)
