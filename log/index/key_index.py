"""The exact key index of a segment: the sorted 64-bit stable hashes of its record keys.

The tiered cleaner's question about a clean remote segment is "does it hold a record that
a dirty key supersedes?". The bloom filter (:mod:`log.index.bloom`, in the metadata store)
answers "certainly not" for most segments when few keys are dirty, but its false-positive
rate applies per probed key: a segment escapes N dirty keys with probability (1 - p)^N, so
from a few hundred dirty keys on it answers "maybe" for every segment. This index answers
exactly (up to a 64-bit hash collision, which only costs a needless rewrite, never a missed
one) and says *how many* records of the segment are superseded: one entry per keyed data
record, duplicates kept. It is stored in the object store beside its segment
(``<topic>-<p>/<20-digit base>-<uuid>.keyindex``) and immutable, like the segment.

Serialised layout (big-endian; there is no Kafka equivalent, so the table is ours)::

    | bytes | field            | meaning                                                     |
    |-------|------------------|-------------------------------------------------------------|
    | 0-3   | magic  "TCKI"    | identifies the object                                       |
    | 4     | version int8     | 1                                                           |
    | 5     | hash id int8     | 1 = the first 8 bytes of MD5(key), as a big-endian uint64   |
    | 6     | flags int8       | bit 0: the segment holds transactional or control batches   |
    | 7     | reserved int8    | 0                                                           |
    | 8-15  | minHorizon int64 | earliest KIP-534 delete horizon of its batches, -1 = none   |
    | 16-23 | count uint64     | number of entries                                           |
    | 24-27 | crc32c uint32    | CRC-32C of the entries (bytes 28..end)                      |
    | 28-   | entries          | ``count`` uint64, ascending (duplicates adjacent)           |

The hash id pins the hash of persisted files: a different hash gets a new id, never a
silent change, and a reader refuses ids it does not know (the caller then falls back to
downloading the segment). The stable hash is computed here from the key, never taken from
the offset map (whose slot hashing may change between releases). Keyless records and
control records are not entries.

Size: 8 bytes per keyed record plus 28: about 6% of a segment of 100-byte records and
0.8% of one of 1-KB records (:func:`key_index_size_bytes`).
"""

from __future__ import annotations

import hashlib
import struct
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from log.errors import CorruptIndexError, InvalidRequestError
from log.index.bloom import KeyBloomFilter
from log.record import (
    COMPRESSION_CODEC_MASK,
    CONTROL_FLAG_MASK,
    DELETE_HORIZON_FLAG_MASK,
    RECORDS_OFFSET,
    TRANSACTIONAL_FLAG_MASK,
    RecordBatch,
    crc32c,
    iter_file_batches,
)
from log.record._codec_py import md5_digests
from log.record.kernels import kernels, pure_kernels

if TYPE_CHECKING:
    from log.segment import LogSegment

MAGIC = b"TCKI"
VERSION = 1
HASH_MD5_64 = 1
HEADER = struct.Struct(">4sbbbbqQI")
FLAG_TRANSACTIONAL = 0x01
ENTRY = np.dtype(">u8")
SUFFIX = ".keyindex"


def stable_hash(key: bytes) -> int:
    """Hash id 1 of one key: the first 8 bytes of MD5(key), big-endian (never changes)."""
    return int.from_bytes(hashlib.md5(key).digest()[:8], "big")  # noqa: S324 - bucketing, not security


def stable_hashes(digests: np.ndarray) -> np.ndarray:
    """Hash id 1 of keys given as their (n, 16) MD5 digests: uint64, native byte order."""
    if digests.ndim != 2 or digests.shape[1] != 16:
        raise InvalidRequestError(f"a digest array must be (n, 16), got {digests.shape}")
    return np.ascontiguousarray(digests[:, :8]).view(ENTRY).ravel().astype(np.uint64)


def key_index_size_bytes(keyed_records: int) -> int:
    """Serialized size of the index of a segment with ``keyed_records`` keyed data records."""
    return HEADER.size + 8 * keyed_records


@dataclass(frozen=True, slots=True)
class KeyScan:
    """What one pass over a segment's batches yields: the MD5 digest of every keyed data
    record's key in the scanned range, and the segment summary the skip policy needs."""

    digests: np.ndarray  # (n, 16) uint8
    #: digests of the keys that have a tombstone (a record without a value) in the range
    tombstones: np.ndarray  # (m, 16) uint8
    has_transactional_batches: bool
    min_delete_horizon_ms: int | None
    data_records: int


def scan_keys(path: str | Path, start: int = 0, end: int | None = None) -> KeyScan:
    """MD5 digests of the keys of the data records of ``path`` with offsets in ``[start, end)``.

    One hash per record; no value is decompressed beyond what reading keys needs. Each batch's
    records go through the record kernels' ``md5_keys`` (compiled: one C loop per batch with
    libcrypto's MD5; built without libcrypto, or pure-Python kernels: hashlib in Python), which
    checks every record as ``iter_key_offsets`` does; a batch it refuses is read again by
    ``iter_key_offsets``, which raises the reader's error.
    """
    path = Path(path)
    size = path.stat().st_size
    k = kernels()
    if not k.MD5_KEYS:  # compiled without libcrypto: the pure-Python twin, same digests
        k = pure_kernels()
    md5_keys, ok = k.md5_keys, k.OK
    parts: list[bytes] = []
    dead: list[bytes] = []
    transactional = False
    horizon: int | None = None
    records = 0
    stop = end if end is not None else 2**63
    for _pos, batch in iter_file_batches(path, 0, size, source=str(path)):
        attributes = batch.attributes
        if attributes & (TRANSACTIONAL_FLAG_MASK | CONTROL_FLAG_MASK):
            transactional = True
        if attributes & DELETE_HORIZON_FLAG_MASK:
            h = batch.base_timestamp
            if horizon is None or h < horizon:
                horizon = h
        if attributes & CONTROL_FLAG_MASK:
            continue
        count = batch.records_count
        records += count
        if batch.last_offset < start or batch.base_offset >= stop:
            continue
        # uncompressed: the batch's own bytes, no copy of the section
        section = batch.raw[RECORDS_OFFSET:] if attributes & COMPRESSION_CODEC_MASK == 0 else batch._records_section()
        status, digests, tombstones = md5_keys(section, count, batch.base_offset, start, stop)
        if status != ok:
            digests, tombstones = _reference_digests(batch, start, stop)  # raises the reader's error
        parts.append(digests)
        if tombstones:
            dead.append(tombstones)
    return KeyScan(_as_digests(parts), _as_digests(dead), transactional, horizon, records)


def _reference_digests(batch: RecordBatch, start: int, stop: int) -> tuple[bytes, bytes]:
    """:func:`scan_keys`' digests of one batch by the reference record walker (raises
    CorruptRecordError for bad records)."""
    return md5_digests(batch.iter_key_offsets(), start, stop)


def _as_digests(parts: list[bytes]) -> np.ndarray:
    data = b"".join(parts)
    if not data:
        return np.zeros((0, 16), dtype=np.uint8)
    return np.frombuffer(data, dtype=np.uint8).reshape(-1, 16)


class KeyIndex:
    """A segment's sorted stable key hashes. Immutable once built; thread-safe to query."""

    __slots__ = ("entries", "has_transactional_batches", "min_delete_horizon_ms", "hash_id")

    def __init__(self, entries: np.ndarray, *, has_transactional_batches: bool = True,
                 min_delete_horizon_ms: int | None = None, hash_id: int = HASH_MD5_64) -> None:
        #: ascending uint64 (native order); do not modify
        self.entries = entries
        #: the segment holds transactional or control batches
        self.has_transactional_batches = has_transactional_batches
        #: earliest delete horizon stamped in the segment's batches, None if none
        self.min_delete_horizon_ms = min_delete_horizon_ms
        self.hash_id = hash_id

    # ---- building --------------------------------------------------------------------------
    @classmethod
    def from_hashes(cls, hashes: np.ndarray, **summary: object) -> KeyIndex:
        return cls(np.sort(np.asarray(hashes, dtype=np.uint64)), **summary)  # type: ignore[arg-type]

    @classmethod
    def from_keys(cls, keys: list[bytes], **summary: object) -> KeyIndex:
        return cls.from_hashes(np.array([stable_hash(k) for k in keys], dtype=np.uint64), **summary)

    @classmethod
    def from_scan(cls, scan: KeyScan) -> KeyIndex:
        return cls.from_hashes(stable_hashes(scan.digests), has_transactional_batches=scan.has_transactional_batches,
                               min_delete_horizon_ms=scan.min_delete_horizon_ms)

    # ---- queries ---------------------------------------------------------------------------
    def __len__(self) -> int:
        return len(self.entries)

    def count_matching(self, dirty: np.ndarray) -> int:
        """Entries whose hash is in ``dirty`` (sorted, unique uint64, e.g. from :func:`dirty_hash_set`):
        the number of this segment's records a dirty key supersedes (0: it holds none)."""
        entries = self.entries
        if not len(entries) or not len(dirty):
            return 0
        if len(dirty) <= len(entries):
            lo = np.searchsorted(entries, dirty, side="left")
            hi = np.searchsorted(entries, dirty, side="right")
            return int((hi - lo).sum())
        # more dirty keys than entries: look each entry up in the dirty set instead (binary
        # searches over sorted arrays, no sort or hash table per segment)
        at = np.searchsorted(dirty, entries)
        np.minimum(at, len(dirty) - 1, out=at)
        return int(np.count_nonzero(dirty[at] == entries))

    def contains(self, key: bytes) -> bool:
        h = np.uint64(stable_hash(key))
        i = int(np.searchsorted(self.entries, h))
        return i < len(self.entries) and self.entries[i] == h

    # ---- serialisation ---------------------------------------------------------------------
    def to_bytes(self) -> bytes:
        body = self.entries.astype(ENTRY).tobytes()
        flags = FLAG_TRANSACTIONAL if self.has_transactional_batches else 0
        horizon = -1 if self.min_delete_horizon_ms is None else self.min_delete_horizon_ms
        return HEADER.pack(MAGIC, VERSION, self.hash_id, flags, 0, horizon, len(self.entries), crc32c(body)) + body

    @classmethod
    def from_bytes(cls, data: bytes | bytearray | memoryview, *, source: str | None = None) -> KeyIndex:
        """Parse :meth:`to_bytes` output. Raises CorruptIndexError (naming ``source``) for anything else."""
        data = memoryview(bytes(data))
        if len(data) < HEADER.size:
            raise CorruptIndexError(f"key index of {len(data)} bytes is shorter than its {HEADER.size}-byte header",
                                    source=source)
        magic, version, hash_id, flags, _reserved, horizon, count, crc = HEADER.unpack_from(data)
        if magic != MAGIC:
            raise CorruptIndexError(f"key index has magic {magic!r}, expected {MAGIC!r}", source=source)
        if version != VERSION or hash_id != HASH_MD5_64:
            raise CorruptIndexError(f"unsupported key index version {version} / hash id {hash_id} (this build "
                                    f"reads version {VERSION}, hash id {HASH_MD5_64}); rebuild the index",
                                    source=source)
        body = data[HEADER.size:]
        if len(body) != 8 * count:
            raise CorruptIndexError(f"key index says {count} entries but holds {len(body)} bytes of entries",
                                    source=source)
        if crc32c(body) != crc:
            raise CorruptIndexError("key index checksum mismatch", source=source)
        entries = np.frombuffer(body, dtype=ENTRY).astype(np.uint64)
        if count > 1 and bool((entries[1:] < entries[:-1]).any()):
            raise CorruptIndexError("key index entries are not sorted", source=source)
        return cls(entries, has_transactional_batches=bool(flags & FLAG_TRANSACTIONAL),
                   min_delete_horizon_ms=None if horizon < 0 else horizon, hash_id=hash_id)

    def __repr__(self) -> str:
        return (f"KeyIndex(entries={len(self.entries)}, transactional={self.has_transactional_batches}, "
                f"min_delete_horizon_ms={self.min_delete_horizon_ms})")


def dirty_hash_set(digests: np.ndarray) -> np.ndarray:
    """The sorted, unique stable hashes of dirty keys given as their MD5 digests."""
    return np.unique(stable_hashes(digests))


def build_segment_key_index(segment: LogSegment | str | Path) -> KeyIndex:
    """The key index of every keyed data record of a segment's ``.log`` file."""
    path = Path(segment) if isinstance(segment, str | Path) else segment.log_path
    return KeyIndex.from_scan(scan_keys(path))


def build_segment_indexes(segment: LogSegment | str | Path, fpp: float) -> tuple[KeyBloomFilter, KeyIndex]:
    """The bloom filter and the key index of a segment from one pass over its batches."""
    path = Path(segment) if isinstance(segment, str | Path) else segment.log_path
    scan = scan_keys(path)
    bloom = KeyBloomFilter.build_from_digests(scan.digests, max(1, scan.data_records), fpp)
    bloom.has_transactional_batches = scan.has_transactional_batches
    bloom.min_delete_horizon_ms = scan.min_delete_horizon_ms
    return bloom, KeyIndex.from_scan(scan)
