"""RemoteStorageManager: a segment's files <-> objects (Kafka's RemoteStorageManager).

Owns the key layout (Kafka's LocalTieredStorage naming)::

    <topic>-<partition>/<20-digit start offset>-<segment id>.log
                                                 ...        .index
                                                 ...        .timeindex
                                                 ...        .txnindex          (only if the segment has one)
                                                 ...        .snapshot          (producer state after the segment)
                                                 ...        .leader_epoch_checkpoint
                                                 ...        .keyindex          (exact key index, if built)

Because every upload attempt has a fresh segment id, objects are never shared between
attempts: a failed copy deletes what it wrote and a retry writes under a new id. Bloom
filters are not objects; they live in the metadata store.

The exact key index (:mod:`log.index.key_index`) is an object beside its segment, written
with the segment's other objects (or later, for a segment copied without one, by
:meth:`RemoteStorageManager.put_key_index`). Like every object of a segment id it never
changes, so it is cached on local disk: :meth:`RemoteStorageManager.attach_index_cache`
gives the manager the node's remote read cache (the remote cache budget), every key index
uploaded is written through to it, and :meth:`RemoteStorageManager.fetch_key_index` reads
it from there before the store.

The producer snapshot and the leader-epoch checkpoint travel with every segment, as in
KIP-405's LogSegmentData, so a node that lost its data dir can rebuild producer state and
its leader-epoch cache from the newest remote segment (:meth:`fetch_segment_state`).

Every object is uploaded with the CRC-32C of its source (:class:`ChecksummedData`), which
the store verifies before keeping it, and its size is checked; transient errors (a
checksum mismatch included) and a short write or read are retried with exponential backoff,
bounded by ``max_attempts`` and ``max_total_ms``, before giving up. A store known to be down
(:class:`~remote.errors.StoreUnavailableError`) is not retried. Thread-safe as long as the
underlying store is.
"""

from __future__ import annotations

import enum
import os
from dataclasses import dataclass
from pathlib import Path
from typing import TypeVar

from log.clock import SYSTEM_CLOCK, Clock
from log.errors import InvalidRequestError
from metadata.types import RemoteLogSegmentMetadata
from remote.errors import (
    ObjectNotFoundError,
    RemoteStorageError,
    RemoteStorageIOError,
    RemoteStorageTransientError,
    StoreUnavailableError,
)
from remote.object_store import ChecksummedData, ObjectStore, source_crc32c
from remote.read_cache import RemoteReadCache

T = TypeVar("T")


class IndexType(enum.Enum):
    """Kafka's RemoteStorageManager.IndexType, with the object suffix of each."""

    OFFSET = ".index"
    TIMESTAMP = ".timeindex"
    PRODUCER_SNAPSHOT = ".snapshot"
    TRANSACTION = ".txnindex"
    LEADER_EPOCH = ".leader_epoch_checkpoint"
    KEY_INDEX = ".keyindex"


LOG_SUFFIX = ".log"


@dataclass(frozen=True, slots=True)
class LogSegmentData:
    """The local files of one rolled segment (Kafka's LogSegmentData).

    ``leader_epoch_index``: the leader-epoch checkpoint (every epoch entry that starts below
    the segment's end), as the checkpoint file's bytes. ``producer_snapshot``: the producer
    state after the segment's last offset in Kafka's ``.snapshot`` format (a file or its
    bytes); None only where it cannot be had (then the segment is copied without one).
    ``key_index``: the serialized exact key index; its size must be the metadata's
    ``key_index_bytes`` (None: copied without one, and the metadata must say so).
    """

    log_segment: Path
    offset_index: Path
    time_index: Path
    transaction_index: Path | None
    leader_epoch_index: bytes
    producer_snapshot: Path | bytes | None = None
    key_index: bytes | None = None

    def __post_init__(self) -> None:
        if isinstance(self.producer_snapshot, str | os.PathLike):
            object.__setattr__(self, "producer_snapshot", Path(self.producer_snapshot))
        for name in ("log_segment", "offset_index", "time_index", "transaction_index"):
            v = getattr(self, name)
            if v is not None and not isinstance(v, Path):
                object.__setattr__(self, name, Path(v))
        if not isinstance(self.leader_epoch_index, bytes | bytearray):
            raise InvalidRequestError("leader_epoch_index must be the checkpoint file's bytes")


@dataclass(frozen=True, slots=True)
class RemoteSegmentState:
    """The state objects copied with a remote segment (None: that segment has none)."""

    producer_snapshot: bytes | None
    leader_epoch_checkpoint: bytes | None


class _ShortWrite(RemoteStorageIOError):
    """A verified object did not have the expected size (retried like a transient error)."""


class RemoteStorageManager:
    """Copies, fetches and deletes segment data in an :class:`ObjectStore`."""

    def __init__(
        self,
        store: ObjectStore,
        *,
        max_attempts: int = 4,
        backoff_ms: float = 50.0,
        max_backoff_ms: float = 2000.0,
        max_total_ms: float = 60_000.0,
        clock: Clock = SYSTEM_CLOCK,
    ) -> None:
        if max_attempts < 1 or max_total_ms <= 0:
            raise InvalidRequestError("max_attempts must be >= 1 and max_total_ms > 0")
        self.store = store
        self._max_attempts = max_attempts
        self._max_total_ms = max_total_ms
        self._backoff_ms = backoff_ms
        self._max_backoff_ms = max_backoff_ms
        self._clock = clock
        self._index_cache: RemoteReadCache | None = None

    def attach_index_cache(self, cache: RemoteReadCache) -> None:
        """Cache key index objects in ``cache`` (the node's remote read cache and its budget)."""
        self._index_cache = cache

    # ------------------------------------------------------------------ keys

    @staticmethod
    def object_prefix(md: RemoteLogSegmentMetadata) -> str:
        return f"{md.topic_partition.dir_name}/{md.start_offset:020d}-{md.id}"

    def object_key(self, md: RemoteLogSegmentMetadata, index: IndexType | None = None) -> str:
        """Key of the segment's log (``index=None``) or of one of its indexes."""
        return self.object_prefix(md) + (LOG_SUFFIX if index is None else index.value)

    def object_keys(self, md: RemoteLogSegmentMetadata) -> list[str]:
        """Every key a copy of ``md`` may have written (the txn index may be absent)."""
        return [self.object_key(md)] + [self.object_key(md, t) for t in IndexType]

    # ------------------------------------------------------------------ copy

    def copy_log_segment_data(self, md: RemoteLogSegmentMetadata, data: LogSegmentData) -> None:
        """Upload the segment and its indexes under ``md``'s id; copying again overwrites.

        On failure every object written for ``md`` is deleted before the error propagates,
        so nothing partial remains (the caller then abandons this segment id).

        Raises:
            RemoteStorageError: the copy failed after retries (``RemoteStorageTransientError``
                if the last failure was transient).
            InvalidRequestError: the local log file's size differs from
                ``md.segment_size_in_bytes``.
        """
        size = os.path.getsize(data.log_segment)
        if size != md.segment_size_in_bytes:
            raise InvalidRequestError(
                f"{data.log_segment} has {size} bytes but the metadata of segment {md.remote_log_segment_id} "
                f"says {md.segment_size_in_bytes}"
            )
        uploads: list[tuple[str, Path | bytes]] = [
            (self.object_key(md), data.log_segment),
            (self.object_key(md, IndexType.OFFSET), data.offset_index),
            (self.object_key(md, IndexType.TIMESTAMP), data.time_index),
            (self.object_key(md, IndexType.LEADER_EPOCH), bytes(data.leader_epoch_index)),
        ]
        if data.transaction_index is not None:
            uploads.append((self.object_key(md, IndexType.TRANSACTION), data.transaction_index))
        if data.producer_snapshot is not None:
            uploads.append((self.object_key(md, IndexType.PRODUCER_SNAPSHOT), data.producer_snapshot))
        if (None if data.key_index is None else len(data.key_index)) != md.key_index_bytes:
            raise InvalidRequestError(
                f"the key index given for segment {md.remote_log_segment_id} has "
                f"{None if data.key_index is None else len(data.key_index)} bytes but its metadata says "
                f"{md.key_index_bytes}")
        if data.key_index is not None:
            uploads.append((self.object_key(md, IndexType.KEY_INDEX), bytes(data.key_index)))
        try:
            for key, src in uploads:
                expected = len(src) if isinstance(src, bytes) else os.path.getsize(src)
                # the source's checksum, taken before any byte leaves: the store verifies it
                crc = source_crc32c(src)
                self._retry(f"upload {key}", lambda k=key, s=src, n=expected, c=crc: self._put_verified(k, s, n, c))
        except BaseException:
            self._cleanup(md)
            raise
        if data.key_index is not None:
            self._cache_key_index(md, bytes(data.key_index))

    def put_key_index(self, md: RemoteLogSegmentMetadata, data: bytes) -> None:
        """Upload (or replace a corrupt) key index of an already copied segment; the caller
        then records it in the metadata store (``set_key_index``).

        Raises:
            RemoteStorageError: the upload failed after retries.
        """
        key = self.object_key(md, IndexType.KEY_INDEX)
        crc = source_crc32c(data)
        if self._index_cache is not None:
            self._index_cache.invalidate_key(f"{md.id}{IndexType.KEY_INDEX.value}")
        self._retry(f"upload {key}", lambda: self._put_verified(key, data, len(data), crc))
        self._cache_key_index(md, data)

    def _cache_key_index(self, md: RemoteLogSegmentMetadata, data: bytes) -> None:
        if self._index_cache is not None:
            self._index_cache.put(f"{md.id}{IndexType.KEY_INDEX.value}", data)

    def fetch_key_index(self, md: RemoteLogSegmentMetadata) -> tuple[bytes, bool]:
        """The segment's key index object, from the attached cache if it holds it; returns
        (bytes, whether the object store was read).

        Raises:
            ObjectNotFoundError: the segment has no key index object.
            RemoteStorageError: the read failed after retries.
        """
        key = self.object_key(md, IndexType.KEY_INDEX)
        fetched = False

        def load() -> bytes:
            nonlocal fetched
            fetched = True
            return self._retry(f"fetch {key}", lambda: self.store.get(key))

        if self._index_cache is None:
            return load(), True
        return self._index_cache.get(f"{md.id}{IndexType.KEY_INDEX.value}", load), fetched

    def drop_cached_key_index(self, md: RemoteLogSegmentMetadata) -> None:
        """Forget a cached key index (it did not decode: the next fetch reads the store)."""
        if self._index_cache is not None:
            self._index_cache.invalidate_key(f"{md.id}{IndexType.KEY_INDEX.value}")

    def _put_verified(self, key: str, src: Path | bytes, expected: int, crc: int) -> None:
        written = self.store.put(key, ChecksummedData(src, crc))
        # a store that verifies its own writes already compared sizes (S3: one HEAD); read the
        # size back only from stores that cannot promise it
        actual = written if self.store.verifies_writes else self.store.size(key)
        if actual != expected:
            # a truncated object must not stay readable under a live key
            self.store.delete(key)
            raise _ShortWrite(f"uploaded {actual} of {expected} bytes", key=key)

    def _cleanup(self, md: RemoteLogSegmentMetadata) -> None:
        for key in self.object_keys(md):
            try:
                self._retry(f"delete {key}", lambda k=key: self.store.delete(k))
            except RemoteStorageError:
                # the segment id is abandoned; the deferred-delete loop finds it via its
                # COPY_SEGMENT_STARTED metadata and retries
                pass

    # ------------------------------------------------------------------ fetch

    def _log_range(
        self, md: RemoteLogSegmentMetadata, start_position: int, end_position: int | None
    ) -> tuple[str, int, int]:
        """(the log object's key, the end position clamped to the segment, bytes to read)."""
        end = md.segment_size_in_bytes if end_position is None else min(end_position, md.segment_size_in_bytes)
        if start_position < 0 or end < start_position:
            raise InvalidRequestError(f"invalid position range [{start_position}, {end_position})")
        return self.object_key(md), end, end - start_position

    def fetch_log_segment(
        self, md: RemoteLogSegmentMetadata, start_position: int, end_position: int | None = None
    ) -> bytes:
        """Bytes ``[start_position, end_position)`` of the segment's log (``None``: to the end).

        Raises:
            ObjectNotFoundError: the segment's objects are gone.
            RemoteStorageError: the read failed after retries or returned fewer bytes than
                the segment holds.
        """
        key, end, want = self._log_range(md, start_position, end_position)

        def read() -> bytes:
            data = self.store.get_range(key, start_position, end)
            if len(data) != want:
                raise _ShortWrite(f"read {len(data)} of {want} bytes at position {start_position}", key=key)
            return data

        return self._retry(f"fetch {key}", read)

    def fetch_log_segment_to_file(
        self, md: RemoteLogSegmentMetadata, path: str | os.PathLike[str], start_position: int = 0,
        end_position: int | None = None,
    ) -> int:
        """Like :meth:`fetch_log_segment` but streams into ``path`` (atomically); returns bytes written."""
        key, end, want = self._log_range(md, start_position, end_position)

        def read() -> int:
            n = self.store.get_to_file(key, path, start_position, end)
            if n != want:
                Path(path).unlink(missing_ok=True)
                raise _ShortWrite(f"read {n} of {want} bytes at position {start_position}", key=key)
            return n

        return self._retry(f"fetch {key}", read)

    def fetch_index(self, md: RemoteLogSegmentMetadata, index_type: IndexType) -> bytes:
        """The whole index object. A segment copied without a transaction index returns
        ``b""`` for TRANSACTION (an empty txn index means the same thing).

        Raises:
            ObjectNotFoundError: the index object is missing (other than TRANSACTION).
            RemoteStorageError: the read failed after retries.
        """
        key = self.object_key(md, index_type)
        try:
            return self._retry(f"fetch {key}", lambda: self.store.get(key))
        except ObjectNotFoundError:
            if index_type is IndexType.TRANSACTION and self.store.exists(self.object_key(md)):
                return b""
            raise

    def fetch_segment_state(self, md: RemoteLogSegmentMetadata) -> RemoteSegmentState:
        """The producer snapshot and leader-epoch checkpoint copied with ``md`` (KIP-405's
        LogSegmentData); a segment copied without one (by an older version) gives None.

        Raises:
            RemoteStorageError: a read failed after retries.
        """
        out: list[bytes | None] = []
        for index in (IndexType.PRODUCER_SNAPSHOT, IndexType.LEADER_EPOCH):
            key = self.object_key(md, index)
            try:
                out.append(self._retry(f"fetch {key}", lambda k=key: self.store.get(k)))
            except ObjectNotFoundError:
                out.append(None)
        return RemoteSegmentState(out[0], out[1])

    # ------------------------------------------------------------------ delete

    def delete_log_segment_data(self, md: RemoteLogSegmentMetadata) -> None:
        """Delete every object of ``md``. Idempotent (missing objects are fine).

        Raises:
            RemoteStorageError: a delete failed after retries; calling again is safe.
        """
        for key in self.object_keys(md):
            self._retry(f"delete {key}", lambda k=key: self.store.delete(k))

    # ------------------------------------------------------------------ retry

    def _retry(self, what: str, fn: object) -> T:  # type: ignore[type-var]
        assert callable(fn)
        delay = self._backoff_ms
        deadline = self._clock.milliseconds() + self._max_total_ms
        for attempt in range(1, self._max_attempts + 1):
            try:
                return fn()  # type: ignore[no-any-return]
            except StoreUnavailableError:
                raise  # known down: fail fast, the caller backs off
            except (RemoteStorageTransientError, _ShortWrite) as e:
                if attempt == self._max_attempts or self._clock.milliseconds() + delay >= deadline:
                    if isinstance(e, _ShortWrite):
                        raise RemoteStorageIOError(
                            f"{what} failed after {attempt} attempts: {e}", key=e.key) from e
                    raise
                self._clock.sleep(delay)
                delay = min(delay * 2, self._max_backoff_ms)
        raise AssertionError("unreachable")  # pragma: no cover
