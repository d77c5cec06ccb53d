"""RemoteReadCache: fetched pieces of remote segments kept as files, LRU within a byte budget.

Consumers reading old offsets walk a remote segment forward, so the read path fetches it in
fixed, aligned chunks (``chunk_bytes``) and keeps recent chunks and index objects here (the
tiered cleaner's key indexes too): the next fetch of the same object usually hits the disk
instead of the object store. Entries are keyed by remote segment id, which never names two
different contents (a fresh id per upload), so nothing ever needs revalidating against the
store; entries of deleted segments are dropped by :meth:`invalidate_segment` or simply age
out. A chunk's key names the chunk size too, so a restart with another size never takes a
chunk for a different byte range.

**Persistent across restarts.** Every entry is immutable, so the cache keeps its files when
the node stops and re-adopts them at start (a restarted node does not fetch its key indexes
again). Each entry is one file under ``directory`` written atomically (temp file + rename)::

    | magic "TCRC" | version u8 | key length u16 | data length u64 | CRC-32 of data u32 | key | data |

At start every ``*.bin`` file's header is checked (magic, version, its name is the hash of
its key, its size is header + key + data length); a file that fails is deleted, as are temp
files of writes a crash interrupted and anything else in the directory. The CRC of an adopted
entry is checked the first time it is read; a damaged entry is dropped and read as a miss,
never served. Entries written by this process are trusted, as before. :meth:`close` stamps
the files' modification times in LRU order, so the next start resumes the same LRU order
(after a crash the order is that of the writes). The budget may have shrunk meanwhile: the
least recently used adopted entries are evicted down to it.

The sum of entry *data* sizes never exceeds ``capacity_bytes`` (each file adds a header of
about 60 bytes, not counted): least recently used entries are evicted first, and an entry
larger than the whole budget is returned without being cached.

Thread-safety: all methods are thread-safe. The entry table and file reads/deletes are
guarded by one lock (reads are small local file reads); object-store fetches run outside
it, serialised per key so concurrent misses of one chunk fetch it once. Only one cache may
use a directory at a time (the node's data-dir lock guarantees it).
"""

from __future__ import annotations

import functools
import hashlib
import logging
import os
import shutil
import struct
import tempfile
import time
import zlib
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from log.errors import InvalidRequestError
from log.locks import RANK_READ_CACHE, RANK_READ_CACHE_LOAD, ordered_lock
from log.writeback import start_writeback

logger = logging.getLogger(__name__)

MiB = 1 << 20
DEFAULT_CHUNK_BYTES = 1 * MiB
ENTRY_MAGIC = b"TCRC"
ENTRY_VERSION = 1
#: magic, version, key length, data length, CRC-32 (zlib) of the data
ENTRY_HEADER = struct.Struct(">4sBHQI")
ENTRY_SUFFIX = ".bin"
TEMP_PREFIX = ".tmp-"


class DamagedEntryError(Exception):
    """A cache file that is not what its header promises (never served)."""


@dataclass(frozen=True, slots=True)
class CacheStats:
    hits: int
    misses: int
    bytes_fetched: int
    used_bytes: int
    entries: int
    evictions: int
    #: entries re-adopted from the directory at start (a previous run's)
    adopted: int = 0
    #: cache files found damaged (at start or at their first read) and deleted
    damaged: int = 0


def _entry_file_name(key: str) -> str:
    # keys are ours (segment id + suffix) but hashing keeps any key a safe flat file name
    return hashlib.sha1(key.encode()).hexdigest() + ENTRY_SUFFIX  # noqa: S324


def _read_header(f: Any, path: Path) -> tuple[str, int, int, int]:
    """(key, data length, crc, header + key bytes) of an open entry file; DamagedEntryError if
    the header is not one."""
    head = f.read(ENTRY_HEADER.size)
    if len(head) != ENTRY_HEADER.size:
        raise DamagedEntryError(f"{path.name}: {len(head)}-byte file is shorter than an entry header")
    magic, version, key_len, data_len, crc = ENTRY_HEADER.unpack(head)
    if magic != ENTRY_MAGIC or version != ENTRY_VERSION:
        raise DamagedEntryError(f"{path.name}: magic {magic!r} version {version} is not a cache entry")
    raw_key = f.read(key_len)
    try:
        key = raw_key.decode()
    except UnicodeDecodeError:
        raise DamagedEntryError(f"{path.name}: its key is not UTF-8") from None
    if len(raw_key) != key_len or _entry_file_name(key) != path.name:
        raise DamagedEntryError(f"{path.name}: its key does not match its file name")
    return key, data_len, crc, ENTRY_HEADER.size + key_len


class RemoteReadCache:
    def __init__(self, directory: Path, capacity_bytes: int, *, chunk_bytes: int = DEFAULT_CHUNK_BYTES) -> None:
        if capacity_bytes < 0:
            raise InvalidRequestError(f"read cache capacity must be >= 0 bytes, got {capacity_bytes}")
        if chunk_bytes <= 0:
            raise InvalidRequestError(f"read cache chunk size must be > 0 bytes, got {chunk_bytes}")
        self.directory = Path(directory)
        self.capacity_bytes = capacity_bytes
        self.chunk_bytes = chunk_bytes
        self._lock = ordered_lock("remote.read_cache", RANK_READ_CACHE)
        self._entries: OrderedDict[str, int] = OrderedDict()  # key -> data size, LRU first
        #: adopted entries whose CRC was not checked yet (checked at their first read)
        self._unverified: set[str] = set()
        self._used = 0
        self._loading: dict[str, Any] = {}
        self._hits = self._misses = self._fetched = self._evictions = 0
        self._adopted = self._damaged = 0
        self.directory.mkdir(parents=True, exist_ok=True)
        self._adopt()

    # ---- persistence --------------------------------------------------------------------------
    def _adopt(self) -> None:
        """Take over the entries a previous run left (see the module docstring). Runs in the
        constructor, before any other thread can see the cache."""
        t0 = time.monotonic()
        found: list[tuple[int, str, int]] = []
        for path in self.directory.iterdir():
            try:
                if path.is_dir() and not path.is_symlink():
                    shutil.rmtree(path, ignore_errors=True)
                    continue
                if path.name.startswith(TEMP_PREFIX) or not path.name.endswith(ENTRY_SUFFIX):
                    path.unlink(missing_ok=True)  # a write a crash interrupted, or not ours
                    continue
                st = path.stat()
                with open(path, "rb") as f:
                    key, size, _crc, head = _read_header(f, path)
                if st.st_size != head + size:
                    raise DamagedEntryError(f"{path.name}: {st.st_size} bytes, its header says {head + size}")
                found.append((st.st_mtime_ns, key, size))
            except DamagedEntryError as e:
                logger.warning("read cache: dropping damaged entry (%s)", e)
                self._damaged += 1
                path.unlink(missing_ok=True)
            except OSError as e:
                logger.warning("read cache: dropping unreadable %s (%s)", path.name, e)
                path.unlink(missing_ok=True)
        found.sort()  # least recently used first
        for _mtime, key, size in found:
            self._entries[key] = size
            self._unverified.add(key)
            self._used += size
        self._adopted = len(found)
        self._evict_to(0)
        if found:
            logger.info("read cache %s: re-adopted %d entries (%d bytes) in %.2f s", self.directory,
                        len(self._entries), self._used, time.monotonic() - t0)

    def close(self) -> None:
        """Record the LRU order in the files' modification times for the next start (the files
        stay). The cache remains usable; idempotent."""
        with self._lock:
            keys = list(self._entries)
        base = time.time_ns() - len(keys) * 1000
        for i, key in enumerate(keys):  # oldest first, 1 us apart
            stamp = base + i * 1000
            try:
                os.utime(self._path(key), ns=(stamp, stamp))
            except OSError:
                pass  # evicted or invalidated meanwhile

    # ---- generic entries ---------------------------------------------------------------------
    def _path(self, key: str) -> Path:
        return self.directory / _entry_file_name(key)

    def _read_entry(self, key: str, verify: bool) -> bytes:
        path = self._path(key)
        with open(path, "rb") as f:
            found, size, crc, _head = _read_header(f, path)
            data = f.read(size + 1)
        if found != key or len(data) != size:
            raise DamagedEntryError(f"{path.name}: holds {len(data)} bytes of {found!r}, expected {size} of {key!r}")
        if verify and zlib.crc32(data) != crc:
            raise DamagedEntryError(f"{path.name}: checksum mismatch")
        return data

    def _lookup(self, key: str) -> bytes | None:
        with self._lock:
            if key not in self._entries:
                return None
            try:
                data = self._read_entry(key, key in self._unverified)
            except (OSError, DamagedEntryError) as e:  # removed behind our back, or damaged: a miss
                if isinstance(e, DamagedEntryError):
                    logger.warning("read cache: dropping damaged entry %s (%s)", key, e)
                    self._damaged += 1
                self._drop(key)
                return None
            self._unverified.discard(key)
            self._entries.move_to_end(key)
            self._hits += 1
            return data

    def _drop(self, key: str) -> None:
        """Forget one entry and delete its file. Caller holds the lock."""
        size = self._entries.pop(key, None)
        if size is not None:
            self._path(key).unlink(missing_ok=True)
            self._used -= size
        self._unverified.discard(key)

    def _evict_to(self, room: int) -> None:
        """Evict least recently used entries until ``room`` more bytes fit. Caller holds the
        lock (or is the constructor)."""
        while self._entries and self._used + room > self.capacity_bytes:
            old = next(iter(self._entries))
            self._drop(old)
            self._evictions += 1

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

    def contains(self, key: str) -> bool:
        """Whether ``key`` has an entry (its bytes are not checked here)."""
        with self._lock:
            return key in self._entries

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
            self._drop(key)

    def _store(self, key: str, data: bytes) -> None:
        if len(data) > self.capacity_bytes:
            return
        raw_key = key.encode()
        header = ENTRY_HEADER.pack(ENTRY_MAGIC, ENTRY_VERSION, len(raw_key), len(data), zlib.crc32(data))
        fd, tmp = tempfile.mkstemp(prefix=TEMP_PREFIX, dir=self.directory)
        try:
            with os.fdopen(fd, "wb") as f:
                f.write(header)
                f.write(raw_key)
                f.write(data)
                f.flush()
                # its write-back starts now rather than when the kernel's dirty expiry says: a remote consumer
                # reading gigabytes through the cache would otherwise leave them all dirty, and the next syncfs of
                # the data dir's file system (acks=-1, service/kafka/durability.py) would have to write them first
                start_writeback(f.fileno(), 0, len(header) + len(raw_key) + len(data))
        except OSError:
            Path(tmp).unlink(missing_ok=True)
            return  # a full or broken cache disk degrades to uncached reads
        with self._lock:
            self._evict_to(len(data))
            os.replace(tmp, self._path(key))
            self._used -= self._entries.pop(key, 0)  # a concurrent put of the same key: count it once
            self._unverified.discard(key)
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
            # the chunk size is part of the key: entries persist across restarts, maybe with another size
            chunk = self.get(f"{segment_id}.log.{cs}.{ci}", functools.partial(fetch, lo, hi))
            parts.append(chunk[max(start, lo) - lo: min(end, hi) - lo])
        return b"".join(parts)

    def invalidate_segment(self, segment_id: str) -> None:
        """Drop every entry of a segment (its objects were deleted)."""
        prefix = segment_id + "."
        with self._lock:
            for key in [k for k in self._entries if k.startswith(prefix)]:
                self._drop(key)

    # ---- introspection ------------------------------------------------------------------------
    @property
    def used_bytes(self) -> int:
        with self._lock:
            return self._used

    def disk_bytes(self) -> int:
        """Data bytes of the entry files actually on disk, headers not counted (for tests and
        the metrics collector)."""
        total = 0
        for path in self.directory.glob("*" + ENTRY_SUFFIX):
            try:
                with open(path, "rb") as f:
                    _key, _size, _crc, head = _read_header(f, path)
                total += path.stat().st_size - head
            except (OSError, DamagedEntryError):
                continue  # evicted meanwhile, or damaged (dropped at its next read)
        return total

    def stats(self) -> CacheStats:
        with self._lock:
            return CacheStats(self._hits, self._misses, self._fetched, self._used, len(self._entries),
                              self._evictions, self._adopted, self._damaged)

    def clear(self) -> None:
        """Drop every entry and its file (the cache stays usable)."""
        with self._lock:
            for key in list(self._entries):
                self._drop(key)
