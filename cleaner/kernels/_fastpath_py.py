"""Pure-Python reference of the compiled record kernels (``_fastpath.pyx``); the fallback
where no C compiler was available when tiercompact was installed.

Same contract as the compiled module (see its docstring and ``cleaner/kernels/fastpath.py``), with
two deliberate simplifications that change no output byte:

* the key digest is the first 12 bytes of MD5(key) (hashlib's C code: a keyed SipHash in Python
  would cost more than the rest of the round); MD5 has no practical second preimage, so a
  producer still cannot aim a key at another key's slot. The round's seed is ignored.
* :func:`rebuild_records` always answers ``None``: the reference for re-encoding retained
  records is :class:`~log.record.builder.RecordBatchBuilder` itself, which the caller uses.

The table keeps the compiled layout (16-byte slots: 12-byte digest, little-endian uint32
offset delta) and probing (linear from the digest's home slot), so both implementations size
and fill alike; it has no supersession bitmap (every record is looked up by its digest, which
is what the bitmap answers for the compiled table anyway).

Records are kept by :func:`cleaner.retention.decide_records`, the reference cleaner's own rule.
The chunk kernels: :func:`frame_batches` frames and checks for real (struct and the crc32c
package, as ``RecordBatch.ensure_valid``); :func:`map_batches` and :func:`clean_batches` leave
every batch to the cleaner's per-batch code (the reference for what they do).
"""

from __future__ import annotations

import struct

from cleaner.retention import decide_records
from log.errors import CorruptRecordError
from log.record._codec_py import MD5 as _MD5
from log.record.crc32c import crc32c
from log.record.decode import iter_key_offsets

OK = 0
FULL = 1
DELTA_OVERFLOW = 2
CORRUPT = -1

SLOT = 16
DIGEST = 12
MIN_SLOTS = 1024
MAX_DELTA = (1 << 32) - 1
_EMPTY = bytes(DIGEST)
_DELTA = struct.Struct("<I")
_UINT32 = struct.Struct(">I")
_FRAME = struct.Struct(">i4xb")  # batchLength, (partitionLeaderEpoch), magic
_COUNTS = struct.Struct(">i")


def _digest(key: bytes) -> bytes:
    d = _MD5(key).digest()[:DIGEST]
    return b"\x01" + d[1:] if d == _EMPTY else d


def _home(d: bytes, slots: int) -> int:
    """The first slot ``d`` probes: its first 32 bits (big-endian) scaled to ``[0, slots)``."""
    return (_UINT32.unpack_from(d, 0)[0] * slots) >> 32


class KeyTable:
    """Digest -> offset table with 16-byte slots, growing up to ``capacity`` slots. Not thread-safe."""

    bits_ok = False  # no supersession bitmap here
    bitmap_bytes = 0

    def __init__(self, capacity: int) -> None:
        if capacity < 1:
            raise ValueError(f"a key table needs at least one slot, got {capacity}")
        if capacity > 1 << 32:
            raise ValueError(f"a key table holds at most 2^32 slots, got {capacity}")
        self.capacity = capacity
        self.slots = 0
        self.size = 0
        self.base = -1
        self.collisions = 0
        self._buf = bytearray()

    @property
    def memory_bytes(self) -> int:
        return len(self._buf)

    def reset(self, seed: bytes) -> None:
        if len(seed) != 16:
            raise ValueError("the round's seed must be 16 bytes")
        self._buf = bytearray()
        self.slots = self.size = self.collisions = 0
        self.base = -1

    def _grow(self) -> None:
        new_slots = min(MIN_SLOTS if self.slots == 0 else self.slots * 2, self.capacity)
        old, self._buf, self.slots = self._buf, bytearray(new_slots * SLOT), new_slots
        for i in range(0, len(old), SLOT):
            if old[i : i + DIGEST] != _EMPTY:
                d = bytes(old[i : i + DIGEST])
                pos = self._find(d)
                self._buf[pos * SLOT : pos * SLOT + SLOT] = old[i : i + SLOT]

    def _find(self, d: bytes) -> int:
        buf, slots = self._buf, self.slots
        if not slots:
            return -1
        pos = _home(d, slots)
        for _ in range(slots):
            s = buf[pos * SLOT : pos * SLOT + DIGEST]
            if s == d or s == _EMPTY:
                return pos
            pos = pos + 1 if pos + 1 < slots else 0
            self.collisions += 1
        return -1

    def note_batch(self, base_offset: int, last_offset: int) -> None:
        """The compiled table checks batch offsets for its bitmap; nothing to do here."""

    def put(self, key: bytes, offset: int, max_entries: int) -> int:
        if self.size >= max_entries or self.size >= self.capacity:
            return FULL
        if self.base < 0:
            self.base = offset
        delta = offset - self.base
        if not 0 <= delta <= MAX_DELTA:
            return DELTA_OVERFLOW
        if self.slots < self.capacity and (self.size + 1) * 2 > self.slots:
            self._grow()
        d = _digest(bytes(key))
        pos = self._find(d)
        if pos < 0:
            return FULL
        at = pos * SLOT
        if self._buf[at : at + DIGEST] == _EMPTY:
            self._buf[at : at + DIGEST] = d
            self.size += 1
        _DELTA.pack_into(self._buf, at + DIGEST, delta)
        return OK

    def get(self, key: bytes) -> int:
        if self.size == 0:
            return -1
        d = _digest(bytes(key))
        pos = self._find(d)
        if pos < 0:
            return -1
        at = pos * SLOT
        if self._buf[at : at + DIGEST] == _EMPTY:
            return -1
        return self.base + _DELTA.unpack_from(self._buf, at + DIGEST)[0]

    def digests(self) -> list[bytes]:
        b = self._buf
        return [bytes(b[i : i + DIGEST]) for i in range(0, len(b), SLOT) if b[i : i + DIGEST] != _EMPTY]


def map_records(table: KeyTable, data: bytes, count: int, base_offset: int, start: int,
                max_entries: int) -> tuple[int, int, int]:
    last_put = -1
    try:
        for i, (off, key, _has_value) in enumerate(iter_key_offsets(data, count, base_offset)):
            if key is not None and off >= start:
                st = table.put(key, off, max_entries)
                if st != OK:
                    return st, i, last_put
                last_put = off
    except CorruptRecordError:
        return CORRUPT, 0, last_put
    return OK, count, last_put


def retain_records(table: KeyTable, data: bytes, count: int, base_offset: int, latest: int,
                   retain_deletes: bool, keep: bytearray) -> tuple[int, int, bool, int, int]:
    try:
        kos = list(iter_key_offsets(data, count, base_offset))
    except CorruptRecordError:
        return CORRUPT, 0, False, 0, 0
    kept = decide_records(kos, latest, table.get, retain_deletes)
    keep[:] = bytes(kept.keep)
    return OK, kept.retained, kept.tombstone_kept, kept.keyless, kept.superseded


def rebuild_records(data: bytes, count: int, base_offset: int, base_timestamp: int, keep: bytes,
                    has_horizon: bool, horizon: int, log_append_time: bool, log_append_ts: int,
                    last_offset_delta: int) -> None:
    """Always ``None``: the builder is the reference encoder (see the module docstring)."""
    return None


def siphash128(data: bytes, key16: bytes) -> bytes:  # pragma: no cover - the compiled module's helper
    raise NotImplementedError("SipHash is only available in the compiled kernels")


def hash_keys(data: bytes, count: int, base_offset: int, seed: bytes) -> tuple[int, int, int]:
    """Hash every key of one records section once (the benchmarks' ceiling)."""
    n = acc = 0
    try:
        for _off, key, _hv in iter_key_offsets(data, count, base_offset):
            if key is not None:
                acc ^= int.from_bytes(_digest(key)[:8], "little")
                n += 1
    except CorruptRecordError:
        return CORRUPT, n, acc
    return OK, n, acc


def retain_and_rebuild(table: KeyTable, data: bytes, count: int, base_offset: int, latest: int, retain_deletes: bool,
                       keep: bytearray, base_timestamp: int, has_delete_horizon: bool, delete_horizon: int,
                       new_delete_horizon: int, log_append_time: bool, log_append_ts: int,
                       last_offset_delta: int, known: bool = False) -> tuple[int, int, bool, int, int, None]:
    """:func:`retain_records`; the rebuild is always left to the caller (the builder is the
    reference encoder, see :func:`rebuild_records`). ``known`` changes nothing here (no bitmap)."""
    return (*retain_records(table, data, count, base_offset, latest, retain_deletes, keep), None)


# ---- chunks of batches (the compiled module's _fastpath_batches.pxi) ----------------------------

FRAME_CHUNK = 0
FRAME_MORE = 1
FRAME_BAD = 2
STOP = 3
FLUSH = 4
N_COUNTS = 9
_NO_BATCH = -(2**63)


def _batch_ok(buf: bytes | bytearray | memoryview, pos: int, size: int, crc: bool) -> bool:
    """RecordBatch.ensure_valid's checks on a batch whose length and magic were read."""
    if crc and crc32c(memoryview(buf)[pos + 21 : pos + size]) != _UINT32.unpack_from(buf, pos + 17)[0]:
        return False
    (count,) = _COUNTS.unpack_from(buf, pos + 57)
    (lod,) = _COUNTS.unpack_from(buf, pos + 23)
    body = size - 61
    if count < 0:
        return False
    if buf[pos + 22] & 0x07 == 0:
        if count * 7 > body or (count == 0 and body != 0):
            return False
    elif count == 0 and body != 0:
        return False
    return not (count and lod < count - 1)


def frame_batches(buf: bytes | bytearray | memoryview, pos: int, end: int, chunk_bytes: int,
                  have: int, checked_lo: int = 0, checked_hi: int = 0) -> tuple[int, int, int]:
    """Walk and check the batches of ``buf[pos:end]`` into a chunk (the compiled docstring)."""
    while True:
        if end - pos < 17:
            return FRAME_MORE, pos, have
        length, magic = _FRAME.unpack_from(buf, pos + 8)
        if length < 49 or magic != 2:
            return FRAME_BAD, pos, have
        size = length + 12
        if size > end - pos:
            return FRAME_MORE, pos, have
        if not _batch_ok(buf, pos, size, not (checked_lo <= pos and pos + size <= checked_hi)):
            return FRAME_BAD, pos, have
        pos += size
        have += size
        if have >= chunk_bytes:
            return FRAME_CHUNK, pos, have


def map_batches(table: KeyTable, buf: bytes | bytearray | memoryview, pos: int, end: int, start: int,
                max_entries: int, latest: int, notes: bytearray | None = None, file_base: int = 0,
                note_min: int = 0) -> tuple[int, int, int, int, int, int]:
    """Leaves every batch to the cleaner's per-batch code (the reference for this kernel), so
    no batch is noted."""
    return (STOP if pos < end else OK), pos, 0, latest, 0, _NO_BATCH


def superseded_runs(table: KeyTable, notes: bytes | bytearray | memoryview, latest: int, upper: int,
                    specials: object, min_bytes: int) -> list[tuple[int, int, int, int, int, int]]:
    """None: there are no notes (:func:`map_batches`) and no bitmap here; every batch is read."""
    return []


_NOTE = struct.Struct("=5q")


def chunk_walk(notes: bytes | bytearray | memoryview, first: int, n: int, have: int,
               chunk_bytes: int) -> tuple[int, int]:
    """The reference's chunking over noted batches (the compiled docstring)."""
    closed = 0
    for i in range(first, first + n):
        have += _NOTE.unpack_from(notes, i * _NOTE.size)[1]
        if have >= chunk_bytes:
            closed += 1
            have = 0
    return closed, have


def clean_batches(table: KeyTable, buf: bytes | bytearray | memoryview, pos: int, end: int, known_lo: int,
                  known_hi: int, latest: int, now: int, new_horizon: int, upper: int, specials: object,
                  out: bytearray, pend: object, counts: object, flush_at: int) -> tuple[int, int, int]:
    """Leaves every batch to the cleaner's per-batch code (the reference for this kernel)."""
    return (STOP if pos < end else OK), pos, _NO_BATCH
