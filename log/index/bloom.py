"""The per-segment key bloom filter: one more segment index (seed 004 "Bloom Filter Index").

The tiered cleaner asks "could this remote segment hold any key of my offset map?" before
downloading it; a "no" lets it skip the segment and carry its metadata forward. The
filters are stored by the RemoteLogMetadataManager (never uploaded as objects), built by
the RemoteLogManager when it copies a segment and rebuilt when a segment is re-compacted.

Members are the 16-byte MD5 digests of record keys, not the keys: the cleaner's offset map
(Kafka's SkimpyOffsetMap) keeps only ``MD5(key)``, so it can test its entries directly with
:meth:`KeyBloomFilter.might_contain_digest`. :meth:`KeyBloomFilter.might_contain` hashes a
key first. Keyless records and control records are not members.

Serialised layout (big-endian; there is no Kafka equivalent, so the table is ours)::

    | bytes | field            | meaning                                                    |
    |-------|------------------|------------------------------------------------------------|
    | 0-3   | magic  "TCBF"    | identifies the blob                                        |
    | 4     | version int8     | 1                                                          |
    | 5     | scheme int8      | 1 = members are MD5(key).hex() fed to pybloom-live          |
    | 6-7   | reserved int16   | 0                                                          |
    | 8-11  | crc32c uint32    | CRC-32C of bytes 12..end                                   |
    | 12    | flags int8       | bit 0: the segment holds transactional or control batches  |
    | 13-20 | minHorizon int64 | earliest KIP-534 delete horizon of its batches, -1 = none  |
    | 21-   | payload          | pybloom_live.BloomFilter.tofile(): header '<dQQQQ'         |
    |       |                  | (error_rate, num_slices, bits_per_slice, capacity, count)  |
    |       |                  | then the bit array, little-endian bit order                |

Bytes 12-20 (version 2) summarise the segment for the tiered cleaner's skip policy: a
segment whose filter rules out every key of the offset map is still rewritten if it holds
transactional batches (so markers are only removed once no batch of their transaction is
left) or a delete horizon that has passed (so tombstones do expire). Version 1 blobs (no
summary) read as "may hold both", i.e. never skipped.

The scheme byte pins the hashing: pybloom-live derives slice positions from salted
xxh128/SHA digests of the member's UTF-8 bytes, so a filter is only valid for readers using
the same scheme; a new scheme gets a new number rather than silently mis-answering.

Size overhead: a filter sized for ``n`` keys at false-positive rate ``p`` takes
``n * ln(1/p) / ln(2)^2`` bits (pybloom rounds the slice count up to ``ceil(log2(1/p))``),
about 9.6 bits = 1.2 bytes per key at p = 1%, 1.8 bytes at 0.1%. For 100-byte records
that is ~1.2% of the segment size (seed 004: "~1-2%"); :func:`bloom_size_bytes` computes it.
Sizing uses the segment's exact data-record count (from batch headers, no decompression),
an upper bound on its distinct keys, so the filter never exceeds its capacity.
"""

from __future__ import annotations

import hashlib
import io
import math
import struct
from collections.abc import Iterable
from pathlib import Path
from typing import TYPE_CHECKING

from pybloom_live import BloomFilter

from log.errors import CorruptIndexError, InvalidRequestError
from log.record import crc32c, iter_file_batches

if TYPE_CHECKING:
    from log.segment import LogSegment

MAGIC = b"TCBF"
VERSION = 2
SCHEME_MD5_HEX = 1
HEADER = struct.Struct(">4sbbhI")
SUMMARY = struct.Struct(">bq")
FLAG_TRANSACTIONAL = 0x01
DEFAULT_FPP = 0.01
DIGEST_SIZE = 16


def key_digest(key: bytes) -> bytes:
    """The 16-byte MD5 digest the offset map and the bloom filter agree on."""
    return hashlib.md5(key).digest()  # noqa: S324 - a hash for bucketing, not for security


def estimate_expected_keys(segment_bytes: int, avg_record_bytes: float) -> int:
    """Seed 004's estimate of a segment's key cardinality: size / average record size."""
    if avg_record_bytes <= 0:
        raise InvalidRequestError(f"average record size must be > 0, got {avg_record_bytes}")
    return max(1, math.ceil(segment_bytes / avg_record_bytes))


def bloom_size_bytes(expected: int, fpp: float) -> int:
    """Serialized size of a filter for ``expected`` keys at ``fpp`` (the overhead figure)."""
    _check(expected, fpp)
    slices = math.ceil(math.log2(1.0 / fpp))
    bits_per_slice = math.ceil(max(expected, 1) * abs(math.log(fpp)) / (slices * math.log(2) ** 2))
    return HEADER.size + SUMMARY.size + struct.calcsize(BloomFilter.FILE_FMT) + math.ceil(slices * bits_per_slice / 8)


def _check(expected: int, fpp: float) -> None:
    if not 0 < fpp < 1:
        raise InvalidRequestError(f"bloom filter false-positive rate must be in (0, 1), got {fpp}")
    if expected < 0:
        raise InvalidRequestError(f"expected key count must be >= 0, got {expected}")


class KeyBloomFilter:
    """A bloom filter over MD5 digests of record keys. Immutable once built; thread-safe to query."""

    __slots__ = ("_bf", "has_transactional_batches", "min_delete_horizon_ms")

    def __init__(self, bf: BloomFilter, *, has_transactional_batches: bool = True,
                 min_delete_horizon_ms: int | None = None) -> None:
        self._bf = bf
        #: the segment holds transactional or control batches (unknown reads as True)
        self.has_transactional_batches = has_transactional_batches
        #: earliest delete horizon stamped in the segment's batches, None if none
        self.min_delete_horizon_ms = min_delete_horizon_ms

    # ---- building --------------------------------------------------------------------------
    @classmethod
    def build(cls, keys: Iterable[bytes], expected: int, fpp: float = DEFAULT_FPP) -> KeyBloomFilter:
        """A filter holding ``keys``, sized for ``expected`` distinct keys at rate ``fpp``.

        If more distinct keys than ``expected`` arrive the filter is rebuilt bigger, so an
        underestimate costs time, never correctness.
        """
        return cls.build_from_digests((key_digest(k) for k in keys), expected, fpp)

    @classmethod
    def build_from_digests(cls, digests: Iterable[bytes], expected: int, fpp: float = DEFAULT_FPP) -> KeyBloomFilter:
        _check(expected, fpp)
        items = digests if isinstance(digests, list | tuple) else list(digests)
        capacity = max(1, expected)
        while True:
            try:
                return cls._fill(BloomFilter(capacity=capacity, error_rate=fpp), items)
            except IndexError:  # pybloom's "at capacity": the estimate was too low
                capacity *= 2

    @classmethod
    def _fill(cls, bf: BloomFilter, digests: Iterable[bytes]) -> KeyBloomFilter:
        add = bf.add
        for d in digests:
            if len(d) != DIGEST_SIZE:
                raise InvalidRequestError(f"a key digest is {DIGEST_SIZE} bytes, got {len(d)}")
            add(d.hex())
        return cls(bf)

    # ---- queries ---------------------------------------------------------------------------
    def might_contain_digest(self, digest: bytes) -> bool:
        """False means the segment certainly holds no record with this key digest."""
        return digest.hex() in self._bf

    def might_contain(self, key: bytes) -> bool:
        return self.might_contain_digest(key_digest(key))

    def might_contain_any_digest(self, digests: Iterable[bytes]) -> bool:
        bf = self._bf
        return any(d.hex() in bf for d in digests)

    def might_contain_any(self, keys: Iterable[bytes]) -> bool:
        return self.might_contain_any_digest(key_digest(k) for k in keys)

    @property
    def count(self) -> int:
        """Distinct members added (as pybloom counts them: a false positive on add is not counted)."""
        return int(self._bf.count)

    @property
    def capacity(self) -> int:
        return int(self._bf.capacity)

    @property
    def fpp(self) -> float:
        return float(self._bf.error_rate)

    @property
    def num_bits(self) -> int:
        return int(self._bf.num_bits)

    # ---- serialisation ---------------------------------------------------------------------
    def to_bytes(self) -> bytes:
        buf = io.BytesIO()
        self._bf.tofile(buf)
        flags = FLAG_TRANSACTIONAL if self.has_transactional_batches else 0
        horizon = -1 if self.min_delete_horizon_ms is None else self.min_delete_horizon_ms
        body = SUMMARY.pack(flags, horizon) + buf.getvalue()
        return HEADER.pack(MAGIC, VERSION, SCHEME_MD5_HEX, 0, crc32c(body)) + body

    @classmethod
    def from_bytes(cls, data: bytes | bytearray | memoryview, *, source: str | None = None) -> KeyBloomFilter:
        """Parse :meth:`to_bytes` output. Raises CorruptIndexError for anything else."""
        data = bytes(data)
        if len(data) < HEADER.size + struct.calcsize(BloomFilter.FILE_FMT):
            raise CorruptIndexError(f"bloom filter blob of {len(data)} bytes is too short", source=source)
        magic, version, scheme, _reserved, crc = HEADER.unpack_from(data)
        if magic != MAGIC:
            raise CorruptIndexError(f"bloom filter blob has magic {magic!r}, expected {MAGIC!r}", source=source)
        if version not in (1, VERSION) or scheme != SCHEME_MD5_HEX:
            raise CorruptIndexError(f"unsupported bloom filter version {version} / hash scheme {scheme} "
                                    f"(this build reads version {VERSION}, scheme {SCHEME_MD5_HEX}); rebuild "
                                    f"the filter", source=source)
        body = data[HEADER.size:]
        if crc32c(body) != crc:
            raise CorruptIndexError("bloom filter checksum mismatch", source=source)
        summary: dict[str, object] = {}
        payload = body
        if version >= 2:
            if len(body) < SUMMARY.size:
                raise CorruptIndexError("bloom filter blob is missing its segment summary", source=source)
            flags, horizon = SUMMARY.unpack_from(body)
            summary = {"has_transactional_batches": bool(flags & FLAG_TRANSACTIONAL),
                       "min_delete_horizon_ms": None if horizon < 0 else horizon}
            payload = body[SUMMARY.size:]
        _check_pybloom_header(payload, source)
        try:
            bf = BloomFilter.fromfile(io.BytesIO(payload))
        except (ValueError, struct.error, OverflowError) as e:
            raise CorruptIndexError(f"bloom filter payload is invalid: {e}", source=source) from None
        return cls(bf, **summary)  # type: ignore[arg-type]

    def __repr__(self) -> str:
        return f"KeyBloomFilter(count={self.count}, capacity={self.capacity}, fpp={self.fpp}, bits={self.num_bits})"


_PYBLOOM_HEADER = struct.Struct(BloomFilter.FILE_FMT)
#: pybloom uses ceil(log2(1/p)) slices: 64 covers any p >= 2^-64
MAX_SLICES = 64


def _check_pybloom_header(payload: bytes, source: str | None) -> None:
    """Validate pybloom's header before handing it the payload: a CRC-valid blob with a
    nonsense header (wrong version byte, a bug) must fail fast, not make pybloom derive
    billions of hash salts or allocate a huge bit array."""
    if len(payload) < _PYBLOOM_HEADER.size:
        raise CorruptIndexError("bloom filter payload is invalid: shorter than its header", source=source)
    error_rate, slices, bits_per_slice, capacity, count = _PYBLOOM_HEADER.unpack_from(payload)
    if not (0 < error_rate < 1 and 1 <= slices <= MAX_SLICES and bits_per_slice >= 1 and capacity >= 1
            and count <= capacity + 1):
        raise CorruptIndexError(f"bloom filter payload is invalid: header (error_rate={error_rate}, "
                                f"slices={slices}, bits_per_slice={bits_per_slice}, capacity={capacity}, "
                                f"count={count}) is inconsistent", source=source)
    if len(payload) - _PYBLOOM_HEADER.size != math.ceil(slices * bits_per_slice / 8):
        raise CorruptIndexError(f"bloom filter payload is invalid: {len(payload) - _PYBLOOM_HEADER.size} bytes "
                                f"of bits for {slices * bits_per_slice} bits", source=source)


def build_segment_bloom(segment: LogSegment | str | Path, fpp: float = DEFAULT_FPP) -> KeyBloomFilter:
    """The filter of every key of every data record in a segment's ``.log`` file.

    Sized by the segment's data-record count, read from batch headers in a first pass that
    decompresses nothing.
    """
    path = Path(segment) if isinstance(segment, str | Path) else segment.log_path
    size = path.stat().st_size
    expected = 0
    transactional = False
    horizon: int | None = None
    for _pos, batch in iter_file_batches(path, 0, size, source=str(path)):
        transactional = transactional or batch.is_transactional or batch.is_control
        if batch.has_delete_horizon:
            h = batch.delete_horizon_ms
            horizon = h if horizon is None or (h is not None and h < horizon) else horizon
        if not batch.is_control:
            expected += batch.records_count
    _check(expected, fpp)

    def digests() -> Iterable[bytes]:
        md5 = hashlib.md5
        for _pos, batch in iter_file_batches(path, 0, size, source=str(path)):
            if batch.is_control:
                continue
            for _off, key, _has_value in batch.iter_key_offsets():
                if key is not None:
                    yield md5(key).digest()

    # streamed: the record count bounds the distinct keys, so the filter cannot overflow
    bloom = KeyBloomFilter._fill(BloomFilter(capacity=max(1, expected), error_rate=fpp), digests())
    bloom.has_transactional_batches = transactional
    bloom.min_delete_horizon_ms = horizon
    return bloom
