"""RemoteReadCache: fetched pieces of remote segments kept as files, LRU within a byte budget.

Consumers reading old offsets walk a remote segment forward, so the read path fetches it in
fixed, aligned chunks (``chunk_bytes``) and keeps recent chunks and index objects here: the
next fetch of the same segment usually hits the disk instead of the object store. Entries
are keyed by remote segment id, which never names two different contents (a fresh id per
upload), so nothing ever needs revalidating; entries of deleted segments are dropped by
:meth:`invalidate_segment` or simply age out.

Each entry is one file under ``directory`` written atomically (temp file + rename). The sum
of entry sizes never exceeds ``capacity_bytes``: least recently used entries are evicted
first, and an entry larger than the whole budget is returned without being cached. The
directory is emptied on construction: the cache is not persistent.

Thread-safety: all methods are thread-safe. The entry table and file reads/deletes are
guarded by one lock (reads are small local file reads); object-store fetches run outside
it, serialised per key so concurrent misses of one chunk fetch it once.
"""

from __future__ import annotations

import functools
import hashlib
import os
import shutil
import tempfile
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from log.errors import InvalidRequestError
from log.locks import RANK_READ_CACHE, RANK_READ_CACHE_LOAD, ordered_lock

MiB = 1 << 20
DEFAULT_CHUNK_BYTES = 1 * MiB


@dataclass(frozen=True, slots=True)
class CacheStats:
    hits: int
    misses: int
    bytes_fetched: int
    used_bytes: int
    entries: int
    evictions: int


class RemoteReadCache:
    def __init__(self, directory: Path, capacity_bytes: int, *, chunk_bytes: int = DEFAULT_CHUNK_BYTES) -> None:
        if capacity_bytes < 0:
            raise InvalidRequestError(f"read cache capacity must be >= 0 bytes, got {capacity_bytes}")
        if chunk_bytes <= 0:
            raise InvalidRequestError(f"read cache chunk size must be > 0 bytes, got {chunk_bytes}")
        self.directory = Path(directory)
        self.capacity_bytes = capacity_bytes
        self.chunk_bytes = chunk_bytes
        shutil.rmtree(self.directory, ignore_errors=True)
        self.directory.mkdir(parents=True, exist_ok=True)
        self._lock = ordered_lock("remote.read_cache", RANK_READ_CACHE)
        self._entries: OrderedDict[str, int] = OrderedDict()  # key -> size, LRU first
        self._used = 0
        self._loading: dict[str, Any] = {}
        self._hits = self._misses = self._fetched = self._evictions = 0

    # ---- generic entries ---------------------------------------------------------------------
    def _path(self, key: str) -> Path:
        # keys are ours (segment id + suffix) but hashing keeps any key a safe flat file name
        return self.directory / (hashlib.sha1(key.encode()).hexdigest() + ".bin")  # noqa: S324

    def _lookup(self, key: str) -> bytes | None:
        with self._lock:
            if key not in self._entries:
                return None
            try:
                data = self._path(key).read_bytes()
            except OSError:  # removed behind our back: treat as a miss
                self._used -= self._entries.pop(key)
                return None
            self._entries.move_to_end(key)
            self._hits += 1
            return data

    def get(self, key: str, loader: Callable[[], bytes]) -> bytes:
        """The cached bytes of ``key``, else ``loader()`` (stored if it fits the budget)."""
        data = self._lookup(key)
        if data is not None:
            return data
        with self._lock:
            key_lock = self._loading.get(key)
            if key_lock is None:
                key_lock = self._loading[key] = ordered_lock("remote.read_cache.load", RANK_READ_CACHE_LOAD)
        with key_lock:
            data = self._lookup(key)  # another thread may have loaded it meanwhile
            if data is not None:
                return data
            try:
                data = loader()
            finally:
                with self._lock:
                    self._loading.pop(key, None)
            with self._lock:
                self._misses += 1
                self._fetched += len(data)
            self._store(key, data)
            return data

    def put(self, key: str, data: bytes) -> None:
        """Store bytes known without a fetch (write-through of an object just uploaded, e.g. a
        key index built from the local copy). Entries are immutable: an existing one is kept."""
        with self._lock:
            if key in self._entries:
                return
        self._store(key, data)

    def invalidate_key(self, key: str) -> None:
        """Drop one entry (its bytes turned out corrupt, or are being replaced)."""
        with self._lock:
            size = self._entries.pop(key, None)
            if size is not None:
                self._path(key).unlink(missing_ok=True)
                self._used -= size

    def _store(self, key: str, data: bytes) -> None:
        if len(data) > self.capacity_bytes:
            return
        fd, tmp = tempfile.mkstemp(prefix=".tmp-", dir=self.directory)
        try:
            with os.fdopen(fd, "wb") as f:
                f.write(data)
        except OSError:
            Path(tmp).unlink(missing_ok=True)
            return  # a full or broken cache disk degrades to uncached reads
        with self._lock:
            while self._entries and self._used + len(data) > self.capacity_bytes:
                old, size = self._entries.popitem(last=False)
                self._path(old).unlink(missing_ok=True)
                self._used -= size
                self._evictions += 1
            os.replace(tmp, self._path(key))
            self._used -= self._entries.pop(key, 0)  # a concurrent put of the same key: count it once
            self._entries[key] = len(data)
            self._used += len(data)

    # ---- segment data -------------------------------------------------------------------------
    def read_range(self, segment_id: str, segment_size: int, start: int, end: int,
                   fetch: Callable[[int, int], bytes]) -> bytes:
        """Bytes ``[start, end)`` of a segment's log, assembled from aligned chunks.

        ``fetch(chunk_start, chunk_end)`` reads a chunk from the object store on a miss.
        """
        end = min(end, segment_size)
        if start < 0 or end < start:
            raise InvalidRequestError(f"invalid byte range [{start}, {end}) of a {segment_size}-byte segment")
        if start == end:
            return b""
        cs = self.chunk_bytes
        parts: list[bytes] = []
        for ci in range(start // cs, (end - 1) // cs + 1):
            lo, hi = ci * cs, min((ci + 1) * cs, segment_size)
            chunk = self.get(f"{segment_id}.log.{ci}", functools.partial(fetch, lo, hi))
            parts.append(chunk[max(start, lo) - lo: min(end, hi) - lo])
        return b"".join(parts)

    def invalidate_segment(self, segment_id: str) -> None:
        """Drop every entry of a segment (its objects were deleted)."""
        prefix = segment_id + "."
        with self._lock:
            for key in [k for k in self._entries if k.startswith(prefix)]:
                self._path(key).unlink(missing_ok=True)
                self._used -= self._entries.pop(key)

    # ---- introspection ------------------------------------------------------------------------
    @property
    def used_bytes(self) -> int:
        with self._lock:
            return self._used

    def disk_bytes(self) -> int:
        """Bytes of entry files actually on disk (for tests and the metrics collector)."""
        return sum(p.stat().st_size for p in self.directory.glob("*.bin"))

    def stats(self) -> CacheStats:
        with self._lock:
            return CacheStats(self._hits, self._misses, self._fetched, self._used, len(self._entries),
                              self._evictions)

    def clear(self) -> None:
        with self._lock:
            for key in list(self._entries):
                self._path(key).unlink(missing_ok=True)
            self._entries.clear()
            self._used = 0
