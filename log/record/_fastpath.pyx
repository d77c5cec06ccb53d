# cython: language_level=3, boundscheck=False, wraparound=False, cdivision=True, initializedcheck=False
"""Compiled record kernels for the cleaner (the pure-Python reference is ``_fastpath_py.py``).

What is compiled, and why here: the cleaner's cost is per record (decode the key, hash it, probe
the offset map, decide, copy), so one C loop per batch replaces millions of Python-level steps.
The module sits in ``log/record`` because it reads the v2 record layout (``decode.py``'s table);
the key table it probes is the cleaner's offset map storage, kept here so the loops can inline
the probe (``cleaner/offset_map.py`` wraps it as an :class:`OffsetMap`).

Contract shared with ``_fastpath_py.py`` (see ``log/record/fastpath.py``'s Protocol):

* ``KeyTable(capacity)``: open addressing over 16-byte slots: a 12-byte key digest (96 bits
  compared) then the little-endian uint32 ``offset - base`` (base = the first offset put since
  :meth:`KeyTable.reset`). A digest of 12 zero bytes marks an empty slot (a computed all-zero
  digest gets its first byte set to 1). Probing is Kafka's ``positionOf`` for a 12-byte hash:
  attempt ``i`` reads the big-endian int32 at digest bytes ``[min(i, 8), +4)`` plus
  ``max(0, i - 8)``; slot ``abs(probe) % slots`` (``abs(INT_MIN) = 0``). The table starts small
  and doubles (rehashing) while it is under its logical capacity, so memory follows the keys.
* Digest: SipHash-2-4 with 128-bit output, keyed by a secret chosen per round (``reset``'s
  16-byte seed), truncated to 96 bits. A producer who knows the algorithm but not the round's
  key cannot aim a second preimage at another key's record.
* ``map_records`` / ``retain_records`` mirror ``decode.iter_key_offsets``' checks exactly and
  return a negative status for anything it would reject, so the caller re-runs the pure code to
  raise the same error. ``rebuild_records`` re-encodes retained records as
  :class:`~log.record.builder.RecordBatchBuilder` would and returns ``None`` for whatever it does
  not handle (headers, non-canonical varints, anything the builder would refuse): the caller
  then uses the builder. So compiled output is byte-identical or not produced at all.
"""

from libc.stdint cimport int32_t, int64_t, uint8_t, uint32_t, uint64_t
from libc.stdlib cimport calloc, free, malloc
from libc.string cimport memcpy, memset
from cpython.bytes cimport PyBytes_AS_STRING, PyBytes_FromStringAndSize

cdef extern from *:
    """
    #if defined(__GNUC__) || defined(__clang__)
    #define TC_PREFETCH(p) __builtin_prefetch((const void*)(p))
    #else
    #define TC_PREFETCH(p) ((void)0)
    #endif
    """
    void TC_PREFETCH(const void* p) noexcept nogil

cdef enum:
    SLOT = 16
    DIGEST = 12
    MIN_SLOTS = 1024

cdef int64_t MAX_DELTA = (<int64_t>1 << 32) - 1

# status codes of the kernels
OK = 0
FULL = 1          # size reached max_entries before a put (Kafka refuses even an overwrite)
DELTA_OVERFLOW = 2  # offset - base does not fit 32 bits: the caller ends the round there
CORRUPT = -1


# ---- SipHash-2-4, 128-bit output (Aumasson & Bernstein, reference siphash.c) -----------------

cdef inline uint64_t _rotl(uint64_t x, int b) noexcept nogil:
    return (x << b) | (x >> (64 - b))


cdef inline uint64_t _le64(const uint8_t* p) noexcept nogil:
    return (<uint64_t>p[0] | (<uint64_t>p[1] << 8) | (<uint64_t>p[2] << 16) | (<uint64_t>p[3] << 24)
            | (<uint64_t>p[4] << 32) | (<uint64_t>p[5] << 40) | (<uint64_t>p[6] << 48)
            | (<uint64_t>p[7] << 56))


cdef inline void _siphash128(const uint8_t* m, Py_ssize_t n, uint64_t k0, uint64_t k1,
                             uint64_t* out0, uint64_t* out1) noexcept nogil:
    cdef uint64_t v0 = 0x736f6d6570736575ULL ^ k0
    cdef uint64_t v1 = 0x646f72616e646f6dULL ^ k1
    cdef uint64_t v2 = 0x6c7967656e657261ULL ^ k0
    cdef uint64_t v3 = 0x7465646279746573ULL ^ k1
    cdef uint64_t mi, b
    cdef Py_ssize_t i, left = n & 7, full = n - left
    cdef int r
    v1 ^= 0xee
    i = 0
    while i < full:
        mi = _le64(m + i)
        v3 ^= mi
        for r in range(2):
            v0 += v1; v1 = _rotl(v1, 13); v1 ^= v0; v0 = _rotl(v0, 32)
            v2 += v3; v3 = _rotl(v3, 16); v3 ^= v2
            v0 += v3; v3 = _rotl(v3, 21); v3 ^= v0
            v2 += v1; v1 = _rotl(v1, 17); v1 ^= v2; v2 = _rotl(v2, 32)
        v0 ^= mi
        i += 8
    b = (<uint64_t>n) << 56
    for r in range(left - 1, -1, -1):
        b |= (<uint64_t>m[full + r]) << (8 * r)
    v3 ^= b
    for r in range(2):
        v0 += v1; v1 = _rotl(v1, 13); v1 ^= v0; v0 = _rotl(v0, 32)
        v2 += v3; v3 = _rotl(v3, 16); v3 ^= v2
        v0 += v3; v3 = _rotl(v3, 21); v3 ^= v0
        v2 += v1; v1 = _rotl(v1, 17); v1 ^= v2; v2 = _rotl(v2, 32)
    v0 ^= b
    v2 ^= 0xee
    for r in range(4):
        v0 += v1; v1 = _rotl(v1, 13); v1 ^= v0; v0 = _rotl(v0, 32)
        v2 += v3; v3 = _rotl(v3, 16); v3 ^= v2
        v0 += v3; v3 = _rotl(v3, 21); v3 ^= v0
        v2 += v1; v1 = _rotl(v1, 17); v1 ^= v2; v2 = _rotl(v2, 32)
    out0[0] = v0 ^ v1 ^ v2 ^ v3
    v1 ^= 0xdd
    for r in range(4):
        v0 += v1; v1 = _rotl(v1, 13); v1 ^= v0; v0 = _rotl(v0, 32)
        v2 += v3; v3 = _rotl(v3, 16); v3 ^= v2
        v0 += v3; v3 = _rotl(v3, 21); v3 ^= v0
        v2 += v1; v1 = _rotl(v1, 17); v1 ^= v2; v2 = _rotl(v2, 32)
    out1[0] = v0 ^ v1 ^ v2 ^ v3


def siphash128(const uint8_t[::1] data, bytes key16):
    """SipHash-2-4-128 of ``data`` under the 16-byte ``key16`` (the reference's byte order)."""
    if len(key16) != 16:
        raise ValueError("SipHash needs a 16-byte key")
    cdef const uint8_t* k = <const uint8_t*>PyBytes_AS_STRING(key16)
    cdef uint64_t a, b
    cdef uint8_t out[16]
    cdef int i
    _siphash128(&data[0] if data.shape[0] else <const uint8_t*>k, data.shape[0], _le64(k), _le64(k + 8),
                &a, &b)
    for i in range(8):
        out[i] = (a >> (8 * i)) & 0xFF
        out[8 + i] = (b >> (8 * i)) & 0xFF
    return PyBytes_FromStringAndSize(<char*>out, 16)


# ---- the key table ---------------------------------------------------------------------------

cdef inline void _digest(const uint8_t* key, Py_ssize_t n, uint64_t k0, uint64_t k1,
                         uint8_t* out) noexcept nogil:
    cdef uint64_t a, b
    cdef int i
    _siphash128(key, n, k0, k1, &a, &b)
    for i in range(8):
        out[i] = (a >> (8 * i)) & 0xFF
    for i in range(4):
        out[8 + i] = (b >> (8 * i)) & 0xFF
    if a == 0 and <uint32_t>b == 0:
        out[0] = 1


cdef inline bint _is_empty(const uint8_t* s) noexcept nogil:
    cdef int i
    for i in range(DIGEST):
        if s[i]:
            return False
    return True


cdef inline bint _same(const uint8_t* s, const uint8_t* d) noexcept nogil:
    cdef int i
    for i in range(DIGEST):
        if s[i] != d[i]:
            return False
    return True


cdef inline Py_ssize_t _position(const uint8_t* d, Py_ssize_t attempt, Py_ssize_t slots) noexcept nogil:
    cdef Py_ssize_t w = attempt if attempt < 8 else 8
    cdef int32_t probe = <int32_t>((<uint32_t>d[w] << 24) | (<uint32_t>d[w + 1] << 16)
                                   | (<uint32_t>d[w + 2] << 8) | <uint32_t>d[w + 3])
    if attempt > 8:
        probe = <int32_t>(<uint32_t>probe + <uint32_t>(attempt - 8))
    cdef int64_t p = probe
    if p < 0:
        p = -p
        if p == (<int64_t>1 << 31):
            p = 0
    return <Py_ssize_t>(p % slots)


cdef class KeyTable:
    """Digest -> offset table with 16-byte slots (see the module docstring). Not thread-safe."""

    cdef uint8_t* buf
    cdef readonly Py_ssize_t capacity   # logical slots: what the dedupe buffer pays for
    cdef readonly Py_ssize_t slots      # physical slots allocated now (<= capacity)
    cdef readonly Py_ssize_t size
    cdef readonly int64_t base          # offset of delta 0; -1 before the first put
    cdef uint64_t k0, k1
    cdef readonly Py_ssize_t collisions

    def __cinit__(self, Py_ssize_t capacity):
        if capacity < 1:
            raise ValueError(f"a key table needs at least one slot, got {capacity}")
        self.capacity = capacity
        self.buf = NULL
        self.slots = 0
        self.size = 0
        self.base = -1

    def __dealloc__(self):
        free(self.buf)

    @property
    def memory_bytes(self):
        return self.slots * SLOT

    def reset(self, bytes seed):
        """Empty the table, give memory back, and key the digest with the 16-byte ``seed``."""
        if len(seed) != 16:
            raise ValueError("the round's seed must be 16 bytes")
        cdef const uint8_t* k = <const uint8_t*>PyBytes_AS_STRING(seed)
        self.k0 = _le64(k)
        self.k1 = _le64(k + 8)
        free(self.buf)
        self.buf = NULL
        self.slots = 0
        self.size = 0
        self.base = -1
        self.collisions = 0

    cdef int _grow(self) except -1:
        cdef Py_ssize_t new_slots = MIN_SLOTS if self.slots == 0 else self.slots * 2
        if new_slots > self.capacity:
            new_slots = self.capacity
        cdef uint8_t* nb = <uint8_t*>calloc(new_slots, SLOT)
        if nb == NULL:
            raise MemoryError()
        cdef Py_ssize_t i, pos
        cdef Py_ssize_t attempt
        cdef uint8_t* s
        for i in range(self.slots):
            s = self.buf + i * SLOT
            if _is_empty(s):
                continue
            attempt = 0
            while True:
                pos = _position(s, attempt, new_slots)
                if _is_empty(nb + pos * SLOT):
                    memcpy(nb + pos * SLOT, s, SLOT)
                    break
                attempt += 1
        free(self.buf)
        self.buf = nb
        self.slots = new_slots
        return 0

    cdef inline Py_ssize_t _find(self, const uint8_t* d) noexcept nogil:
        """Slot holding ``d``, or the first empty slot probed; -1 if the table is full of others."""
        cdef Py_ssize_t attempt = 0
        cdef Py_ssize_t pos
        cdef uint8_t* s
        if self.slots == 0:
            return -1
        while attempt < self.slots + 8:
            pos = _position(d, attempt, self.slots)
            s = self.buf + pos * SLOT
            if _is_empty(s) or _same(s, d):
                return pos
            attempt += 1
            self.collisions += 1
        return -1

    cdef inline void _prefetch(self, const uint8_t* d) noexcept nogil:
        """Start loading the first slot ``d`` probes (the kernels digest a whole batch first)."""
        if self.slots:
            TC_PREFETCH(self.buf + _position(d, 0, self.slots) * SLOT)

    cdef inline int64_t _get(self, const uint8_t* key, Py_ssize_t n) noexcept nogil:
        cdef uint8_t d[DIGEST]
        if self.size == 0:
            return -1
        _digest(key, n, self.k0, self.k1, d)
        return self._get_d(d)

    cdef inline int64_t _get_d(self, const uint8_t* d) noexcept nogil:
        cdef Py_ssize_t pos
        cdef uint8_t* s
        if self.size == 0:
            return -1
        pos = self._find(d)
        if pos < 0:
            return -1
        s = self.buf + pos * SLOT
        if _is_empty(s):
            return -1
        return self.base + (<uint32_t>s[12] | (<uint32_t>s[13] << 8) | (<uint32_t>s[14] << 16)
                            | (<uint32_t>s[15] << 24))

    cdef int _put(self, const uint8_t* key, Py_ssize_t n, int64_t offset, Py_ssize_t max_entries) except -2:
        """OK, FULL (size >= max_entries or every slot taken) or DELTA_OVERFLOW."""
        cdef uint8_t d[DIGEST]
        _digest(key, n, self.k0, self.k1, d)
        return self._put_d(d, offset, max_entries)

    cdef int _put_d(self, const uint8_t* d, int64_t offset, Py_ssize_t max_entries) except -2:
        cdef Py_ssize_t pos
        cdef uint8_t* s
        cdef int64_t delta
        if self.size >= max_entries or self.size >= self.capacity:
            return FULL
        if self.base < 0:
            self.base = offset
        delta = offset - self.base
        if delta < 0 or delta > MAX_DELTA:
            return DELTA_OVERFLOW
        # grow before the physical table passes 3/4 full (Kafka's load factor applies to capacity)
        if self.slots < self.capacity and (self.size + 1) * 4 > self.slots * 3:
            self._grow()
        pos = self._find(d)
        if pos < 0:
            return FULL
        s = self.buf + pos * SLOT
        if _is_empty(s):
            memcpy(s, d, DIGEST)
            self.size += 1
        s[12] = delta & 0xFF
        s[13] = (delta >> 8) & 0xFF
        s[14] = (delta >> 16) & 0xFF
        s[15] = (delta >> 24) & 0xFF
        return OK

    def put(self, const uint8_t[::1] key, int64_t offset, Py_ssize_t max_entries):
        """Map ``key`` to ``offset``; returns OK, FULL or DELTA_OVERFLOW (nothing changed then)."""
        cdef uint8_t dummy = 0
        return self._put(&key[0] if key.shape[0] else &dummy, key.shape[0], offset, max_entries)

    def get(self, const uint8_t[::1] key):
        """The offset mapped for ``key``, or -1."""
        cdef uint8_t dummy = 0
        return self._get(&key[0] if key.shape[0] else &dummy, key.shape[0])

    def digests(self):
        """The 12-byte digests in the table (tests and diagnostics)."""
        out = []
        cdef Py_ssize_t i
        for i in range(self.slots):
            if not _is_empty(self.buf + i * SLOT):
                out.append(PyBytes_FromStringAndSize(<char*>(self.buf + i * SLOT), DIGEST))
        return out


# ---- record scanning -------------------------------------------------------------------------

cdef inline int _varint(const uint8_t* p, Py_ssize_t* pos, Py_ssize_t end, int max_bytes,
                        int64_t* out) noexcept nogil:
    """Zigzag varint at pos[0] (at most ``max_bytes``), as varint.py decodes it; -1 if bad."""
    cdef uint64_t z = 0
    cdef int shift = 0, n = 0
    cdef uint8_t b
    cdef int64_t v
    while True:
        if pos[0] >= end:
            return -1
        b = p[pos[0]]
        pos[0] += 1
        n += 1
        if shift < 64:
            z |= (<uint64_t>(b & 0x7F)) << shift
        if b < 0x80:
            break
        shift += 7
        if n >= max_bytes:
            return -1
    v = <int64_t>(z >> 1) ^ -(<int64_t>(z & 1))
    if max_bytes == 5 and (v < -2147483648 or v > 2147483647):
        return -1
    out[0] = v
    return 0


cdef struct KeySpan:
    int64_t offset
    Py_ssize_t key_pos
    Py_ssize_t key_len   # -1: null key
    bint has_value


cdef inline int _next_key_offset(const uint8_t* p, Py_ssize_t* pos, Py_ssize_t end, int64_t base_offset,
                                 KeySpan* r) noexcept nogil:
    """One record the way ``decode.iter_key_offsets`` reads it (the same checks); -1 if it would raise."""
    cdef int64_t length, od, klen
    cdef Py_ssize_t rec_end
    if _varint(p, pos, end, 5, &length) < 0:
        return -1
    rec_end = pos[0] + length
    if length < 6 or rec_end > end:
        return -1
    pos[0] += 1  # attributes
    while True:   # timestampDelta: skipped
        if pos[0] >= end:
            return -1
        if p[pos[0]] < 0x80:
            break
        pos[0] += 1
    pos[0] += 1
    if _varint(p, pos, end, 5, &od) < 0:
        return -1
    if _varint(p, pos, end, 5, &klen) < 0:
        return -1
    if klen >= 0:
        r.key_pos = pos[0]
        r.key_len = klen
        pos[0] += klen
    elif klen == -1:
        r.key_pos = pos[0]
        r.key_len = -1
    else:
        return -1
    if pos[0] >= rec_end:
        return -1
    r.has_value = p[pos[0]] != 1
    r.offset = base_offset + od
    pos[0] = rec_end
    return 0


cdef struct Scanned:
    int64_t offset
    Py_ssize_t key_len   # -1: null key
    bint has_value
    bint hashed
    uint8_t digest[12]


cdef Scanned* _alloc_scanned(Py_ssize_t count) except? NULL:
    if count <= 0:
        return NULL
    cdef Scanned* sc = <Scanned*>malloc(count * sizeof(Scanned))
    if sc == NULL:
        raise MemoryError()
    return sc


def map_records(KeyTable table, const uint8_t[::1] data, Py_ssize_t count, int64_t base_offset,
                int64_t start, Py_ssize_t max_entries):
    """Put every keyed record at or after ``start`` (one batch's records section).

    Returns ``(status, index, last_put)``: status OK, or FULL / DELTA_OVERFLOW at record
    ``index`` (nothing from it on was put), or CORRUPT; ``last_put`` is the last offset put, -1
    if none. The batch is scanned and hashed first, prefetching each key's slot, then put in
    order: the same result as putting record by record, with the table's cache misses overlapped.
    """
    cdef const uint8_t* p = &data[0] if data.shape[0] else NULL
    cdef Py_ssize_t end = data.shape[0], pos = 0, i, n_ok = count
    cdef KeySpan r
    cdef int64_t last_put = -1
    cdef int st
    cdef bint corrupt = False
    cdef uint8_t dummy = 0
    cdef Scanned* sc = _alloc_scanned(count)
    try:
        for i in range(count):
            if p == NULL or _next_key_offset(p, &pos, end, base_offset, &r) < 0:
                n_ok = i
                corrupt = True
                break
            sc[i].offset = r.offset
            sc[i].key_len = r.key_len
            sc[i].hashed = r.key_len >= 0 and r.offset >= start
            if sc[i].hashed:
                _digest(p + r.key_pos if r.key_len else &dummy, r.key_len, table.k0, table.k1, sc[i].digest)
                table._prefetch(sc[i].digest)
        for i in range(n_ok):
            if sc[i].hashed:
                st = table._put_d(sc[i].digest, sc[i].offset, max_entries)
                if st != OK:
                    return st, i, last_put
                last_put = sc[i].offset
        if corrupt:
            return CORRUPT, n_ok, last_put
        if pos != end:
            return CORRUPT, count, last_put
        return OK, count, last_put
    finally:
        free(sc)


def retain_records(KeyTable table, const uint8_t[::1] data, Py_ssize_t count, int64_t base_offset,
                   int64_t latest, bint retain_deletes, bytearray keep):
    """The cleaner's record-level decisions for one data batch (``shouldRetainRecord``, keyless
    records kept). Writes 1/0 per record into ``keep`` (resized to ``count``).

    Returns ``(status, retained, tombstone_kept, keyless_in_range, superseded)``; status CORRUPT
    if the records would not decode. ``superseded`` counts the records dropped because the map
    holds a later offset of their key; the other dropped ones are tombstones past the delete
    horizon (the round report's reasons, from this one scan). Scans and hashes the batch first
    (prefetching), then decides.
    """
    cdef const uint8_t* p = &data[0] if data.shape[0] else NULL
    cdef Py_ssize_t end = data.shape[0], pos = 0, i, retained = 0, invalid = 0, superseded = 0
    cdef KeySpan r
    cdef bint k, tomb = False
    cdef int64_t found
    cdef uint8_t dummy = 0
    if len(keep) != count:
        keep[:] = bytes(count)
    cdef uint8_t* out = <uint8_t*>(<char*>keep) if count else &dummy
    cdef Scanned* sc = _alloc_scanned(count)
    try:
        for i in range(count):
            if p == NULL or _next_key_offset(p, &pos, end, base_offset, &r) < 0:
                return CORRUPT, 0, False, 0, 0
            sc[i].offset = r.offset
            sc[i].key_len = r.key_len
            sc[i].has_value = r.has_value
            sc[i].hashed = r.offset <= latest and r.key_len >= 0 and table.size > 0
            if sc[i].hashed:
                _digest(p + r.key_pos if r.key_len else &dummy, r.key_len, table.k0, table.k1, sc[i].digest)
                table._prefetch(sc[i].digest)
        if pos != end:
            return CORRUPT, 0, False, 0, 0
        for i in range(count):
            if sc[i].offset > latest:
                k = True
            elif sc[i].key_len < 0:
                invalid += 1
                k = True
            else:
                found = table._get_d(sc[i].digest) if sc[i].hashed else -1
                if sc[i].offset < found:
                    k = False
                    superseded += 1
                else:
                    k = sc[i].has_value or retain_deletes
            if k:
                retained += 1
                if not sc[i].has_value and sc[i].key_len >= 0:
                    tomb = True
            out[i] = k
        return OK, retained, tomb, invalid, superseded
    finally:
        free(sc)


# ---- writing retained records -------------------------------------------------------------------

cdef inline Py_ssize_t _put_varlong(uint8_t* out, int64_t v) noexcept nogil:
    cdef uint64_t z = (<uint64_t>v << 1) ^ <uint64_t>(v >> 63)
    cdef Py_ssize_t n = 0
    while z >= 0x80:
        out[n] = (z & 0x7F) | 0x80
        z >>= 7
        n += 1
    out[n] = <uint8_t>z
    return n + 1


cdef inline int _canon_varint(const uint8_t* p, Py_ssize_t* pos, Py_ssize_t end, int max_bytes,
                              int64_t* out) noexcept nogil:
    """Like _varint, and -1 also for a non-minimal encoding (the builder never writes one)."""
    cdef Py_ssize_t start = pos[0]
    if _varint(p, pos, end, max_bytes, out) < 0:
        return -1
    if pos[0] - start > 1 and p[pos[0] - 1] == 0:
        return -1
    return 0


def rebuild_records(const uint8_t[::1] data, Py_ssize_t count, int64_t base_offset, int64_t base_timestamp,
                    const uint8_t[::1] keep, bint has_horizon, int64_t horizon,
                    bint log_append_time, int64_t log_append_ts, int64_t last_offset_delta):
    """The retained records of one batch, encoded as RecordBatchBuilder.append would encode them.

    ``keep[i]`` says whether record ``i`` stays. The new baseTimestamp is ``horizon`` when
    ``has_horizon``, else the first retained record's timestamp; with ``log_append_time`` every
    record's timestamp is ``log_append_ts`` (what the reader yields). A record whose bytes would
    come out unchanged is copied; otherwise only its length and timestampDelta are rewritten.

    Returns ``(records_bytes, retained, base_timestamp, max_timestamp)`` or ``None`` when the
    builder must do it (headers, a non-canonical encoding, anything the builder or the reader
    would refuse).
    """
    cdef const uint8_t* p = &data[0] if data.shape[0] else NULL
    cdef Py_ssize_t end = data.shape[0], pos = 0, i, rec_start, rec_end, od_pos, w = 0, body
    cdef int64_t length, ts_delta, od, klen, vlen, hcount, ts, new_base = horizon, new_delta
    cdef int64_t last_kept = -1, max_ts = -1
    cdef Py_ssize_t retained = 0
    cdef bint have_base = has_horizon
    cdef uint8_t attr
    cdef uint8_t tmp[10]
    cdef Py_ssize_t tn
    if p == NULL or keep.shape[0] != count:
        return None
    out = PyBytes_FromStringAndSize(NULL, end + 16 * count)  # each rewrite grows a record <= 10 bytes
    cdef uint8_t* o = <uint8_t*>PyBytes_AS_STRING(out)
    for i in range(count):
        rec_start = pos
        if _canon_varint(p, &pos, end, 5, &length) < 0:
            return None
        rec_end = pos + length
        if length < 6 or rec_end > end:
            return None
        attr = p[pos]
        pos += 1
        if _canon_varint(p, &pos, rec_end, 10, &ts_delta) < 0:
            return None
        od_pos = pos
        if _canon_varint(p, &pos, rec_end, 5, &od) < 0:
            return None
        if _canon_varint(p, &pos, rec_end, 5, &klen) < 0 or klen < -1:
            return None
        if klen > 0:
            if klen > rec_end - pos:
                return None
            pos += klen
        if _canon_varint(p, &pos, rec_end, 5, &vlen) < 0 or vlen < -1:
            return None
        if vlen > 0:
            if vlen > rec_end - pos:
                return None
            pos += vlen
        if _canon_varint(p, &pos, rec_end, 5, &hcount) < 0 or hcount != 0:
            return None  # headers: the builder re-encodes them (and checks their UTF-8 keys)
        if pos != rec_end:
            return None
        if not keep[i]:
            continue
        ts = log_append_ts if log_append_time else base_timestamp + ts_delta
        if ts < -1 or od < 0 or base_offset + od <= last_kept:
            return None
        last_kept = base_offset + od
        if not have_base:
            new_base = ts
            have_base = True
        if ts > max_ts:
            max_ts = ts
        new_delta = ts - new_base
        retained += 1
        if new_delta == ts_delta and attr == 0:
            memcpy(o + w, p + rec_start, rec_end - rec_start)
            w += rec_end - rec_start
        else:
            tn = _put_varlong(tmp, new_delta)
            body = 1 + tn + (rec_end - od_pos)
            w += _put_varlong(o + w, body)
            o[w] = 0
            w += 1
            memcpy(o + w, tmp, tn)
            w += tn
            memcpy(o + w, p + od_pos, rec_end - od_pos)
            w += rec_end - od_pos
    if pos != end or retained == 0:
        return None
    if last_kept - base_offset > last_offset_delta:
        return None
    return out[:w], retained, new_base, max_ts


def hash_keys(const uint8_t[::1] data, Py_ssize_t count, int64_t base_offset, bytes seed):
    """Scan one records section and hash every key once (the benchmarks' ceiling: what any
    cleaner must do at least). Returns ``(status, keys_hashed, xor of the digests' first 8 bytes)``."""
    if len(seed) != 16:
        raise ValueError("the seed must be 16 bytes")
    cdef const uint8_t* k = <const uint8_t*>PyBytes_AS_STRING(seed)
    cdef uint64_t k0 = _le64(k), k1 = _le64(k + 8), a, b, acc = 0
    cdef const uint8_t* p = &data[0] if data.shape[0] else NULL
    cdef Py_ssize_t end = data.shape[0], pos = 0, i, n = 0
    cdef KeySpan r
    cdef uint8_t dummy = 0
    for i in range(count):
        if p == NULL or _next_key_offset(p, &pos, end, base_offset, &r) < 0:
            return CORRUPT, n, acc
        if r.key_len >= 0:
            _siphash128(p + r.key_pos if r.key_len else &dummy, r.key_len, k0, k1, &a, &b)
            acc ^= a
            n += 1
    return OK, n, acc


# ---- record decoding for readers -------------------------------------------------------------

cdef int64_t _I64_MAX = 0x7FFFFFFFFFFFFFFF
cdef int64_t _I64_MIN = -0x7FFFFFFFFFFFFFFF - 1


cdef inline bint _add_overflows(int64_t a, int64_t b) noexcept nogil:
    return (b > 0 and a > _I64_MAX - b) or (b < 0 and a < _I64_MIN - b)


def decode_records(const uint8_t[::1] data, Py_ssize_t count, int64_t base_offset, int64_t base_timestamp,
                   int64_t base_sequence, log_append_time):
    """Every record of one batch's (decompressed) records section as the tuples
    ``decode.iter_record_fields`` yields: ``(offset, timestamp, key, value, headers, sequence)``.

    Returns ``None`` for anything it does not decode exactly as the reference would: records
    with headers, a varlong of 10 bytes, arithmetic beyond int64, and every malformed record
    (the caller then runs the reference, which raises its own error). So its answer is the
    reference's list or nothing.
    """
    cdef const uint8_t* p = &data[0] if data.shape[0] else NULL
    cdef Py_ssize_t end = data.shape[0], pos = 0, rec_end, start, i
    cdef int64_t length, ts_delta, od, klen, vlen, ts, off, seq
    cdef bint append_time = log_append_time is not None
    cdef int64_t lat = log_append_time if append_time else 0
    cdef int32_t i32max = 2147483647
    out = []
    if count and p == NULL:
        return None
    for i in range(count):
        if _varint(p, &pos, end, 5, &length) < 0:
            return None
        rec_end = pos + length
        if length < 6 or rec_end > end:
            return None
        pos += 1  # attributes
        start = pos
        if _varint(p, &pos, end, 10, &ts_delta) < 0 or pos - start >= 10:
            return None
        if _varint(p, &pos, end, 5, &od) < 0 or _varint(p, &pos, end, 5, &klen) < 0:
            return None
        if klen >= 0:
            if pos + klen > rec_end:
                return None
            key = PyBytes_FromStringAndSize(<char*>(p + pos), klen)
            pos += klen
        elif klen == -1:
            key = None
        else:
            return None
        if _varint(p, &pos, end, 5, &vlen) < 0:
            return None
        if vlen >= 0:
            if pos + vlen > rec_end:
                return None
            value = PyBytes_FromStringAndSize(<char*>(p + pos), vlen)
            pos += vlen
        elif vlen == -1:
            value = None
        else:
            return None
        if pos >= end or p[pos] != 0:
            return None  # headers (or a truncated record): the reference decodes them
        pos += 1
        if pos != rec_end:
            return None
        if _add_overflows(base_offset, od):
            return None
        off = base_offset + od
        if append_time:
            ts = lat
        else:
            if _add_overflows(base_timestamp, ts_delta):
                return None
            ts = base_timestamp + ts_delta
        if base_sequence < 0:
            seq = -1
        elif base_sequence > i32max - od:
            seq = od - (i32max - base_sequence) - 1
        else:
            seq = base_sequence + od
        out.append((off, ts, key, value, (), seq))
    if pos != end:
        return None
    return out


# ---- encoding a producer's records ------------------------------------------------------------

from cpython.bytes cimport PyBytes_Check, PyBytes_GET_SIZE
from cpython.list cimport PyList_GET_ITEM, PyList_GET_SIZE
from cpython.long cimport PyLong_AsLongLong


cdef inline Py_ssize_t _varlong_size(int64_t v) noexcept nogil:
    cdef uint64_t z = (<uint64_t>v << 1) ^ <uint64_t>(v >> 63)
    cdef Py_ssize_t n = 1
    while z >= 0x80:
        z >>= 7
        n += 1
    return n


def encode_records(list keys, list values, list timestamps, int64_t base_timestamp):
    """The records section RecordBatchBuilder.append writes for records at offset deltas
    0..n-1 with no headers: ``keys[i]`` / ``values[i]`` bytes or None, ``timestamps[i]`` ints.

    Returns ``(records_bytes, max_timestamp)``, or ``None`` for anything it leaves to the
    builder (a key or value that is not exactly bytes, a timestamp below -1 or a delta beyond
    int64, lists of unequal length); the builder then appends the records one by one.
    """
    cdef Py_ssize_t n = PyList_GET_SIZE(keys), i, total = 0, klen, vlen, body, w = 0
    cdef int64_t ts, delta, max_ts = -1
    cdef object k, v
    if PyList_GET_SIZE(values) != n or PyList_GET_SIZE(timestamps) != n or n == 0 or n > 2147483647:
        return None
    for i in range(n):
        k = <object>PyList_GET_ITEM(keys, i)
        v = <object>PyList_GET_ITEM(values, i)
        t = <object>PyList_GET_ITEM(timestamps, i)
        if type(t) is not int or not (-1 <= t <= 0x7FFFFFFFFFFFFFFF):
            return None
        ts = PyLong_AsLongLong(t)
        if _add_overflows(ts, -base_timestamp) or base_timestamp == _I64_MIN:
            return None
        delta = ts - base_timestamp
        if ts > max_ts:
            max_ts = ts
        if k is None:
            klen = -1
        elif PyBytes_Check(k):
            klen = PyBytes_GET_SIZE(k)
        else:
            return None
        if v is None:
            vlen = -1
        elif PyBytes_Check(v):
            vlen = PyBytes_GET_SIZE(v)
        else:
            return None
        body = (1 + _varlong_size(delta) + _varlong_size(i) + _varlong_size(klen) + (klen if klen > 0 else 0)
                + _varlong_size(vlen) + (vlen if vlen > 0 else 0) + 1)
        total += _varlong_size(body) + body
    out = PyBytes_FromStringAndSize(NULL, total)
    cdef uint8_t* o = <uint8_t*>PyBytes_AS_STRING(out)
    for i in range(n):
        k = <object>PyList_GET_ITEM(keys, i)
        v = <object>PyList_GET_ITEM(values, i)
        delta = PyLong_AsLongLong(<object>PyList_GET_ITEM(timestamps, i)) - base_timestamp
        klen = -1 if k is None else PyBytes_GET_SIZE(k)
        vlen = -1 if v is None else PyBytes_GET_SIZE(v)
        body = (1 + _varlong_size(delta) + _varlong_size(i) + _varlong_size(klen) + (klen if klen > 0 else 0)
                + _varlong_size(vlen) + (vlen if vlen > 0 else 0) + 1)
        w += _put_varlong(o + w, body)
        o[w] = 0
        w += 1
        w += _put_varlong(o + w, delta)
        w += _put_varlong(o + w, i)
        w += _put_varlong(o + w, klen)
        if klen > 0:
            memcpy(o + w, PyBytes_AS_STRING(k), klen)
            w += klen
        w += _put_varlong(o + w, vlen)
        if vlen > 0:
            memcpy(o + w, PyBytes_AS_STRING(v), vlen)
            w += vlen
        o[w] = 0
        w += 1
    return out, max_ts


# ---- one pass: decide and write a data batch's retained records -------------------------------

cdef struct Span:
    int64_t offset
    int64_t od
    int64_t ts_delta
    Py_ssize_t rec_start
    Py_ssize_t od_pos
    Py_ssize_t rec_end
    Py_ssize_t key_len   # -1: null key
    uint8_t attr
    bint has_value
    bint hashed
    uint8_t digest[12]


cdef inline int _strict_record(const uint8_t* p, Py_ssize_t* pos, Py_ssize_t end, int64_t base_offset,
                               Span* s, Py_ssize_t* key_pos) noexcept nogil:
    """One record parsed as ``rebuild_records`` parses it (canonical varints, no headers); -1 if
    it would decline. A record this accepts, ``_next_key_offset`` accepts with the same offset,
    key span and has_value (a canonical -1 length is the single byte 0x01)."""
    cdef int64_t length, klen, vlen, hcount
    s.rec_start = pos[0]
    if _canon_varint(p, pos, end, 5, &length) < 0:
        return -1
    s.rec_end = pos[0] + length
    if length < 6 or s.rec_end > end:
        return -1
    s.attr = p[pos[0]]
    pos[0] += 1
    if _canon_varint(p, pos, s.rec_end, 10, &s.ts_delta) < 0:
        return -1
    s.od_pos = pos[0]
    if _canon_varint(p, pos, s.rec_end, 5, &s.od) < 0:
        return -1
    if _canon_varint(p, pos, s.rec_end, 5, &klen) < 0 or klen < -1:
        return -1
    key_pos[0] = pos[0]
    if klen > 0:
        if klen > s.rec_end - pos[0]:
            return -1
        pos[0] += klen
    if _canon_varint(p, pos, s.rec_end, 5, &vlen) < 0 or vlen < -1:
        return -1
    if vlen > 0:
        if vlen > s.rec_end - pos[0]:
            return -1
        pos[0] += vlen
    if _canon_varint(p, pos, s.rec_end, 5, &hcount) < 0 or hcount != 0:
        return -1
    if pos[0] != s.rec_end:
        return -1
    s.key_len = klen
    s.has_value = vlen != -1
    s.offset = base_offset + s.od
    return 0


def retain_and_rebuild(KeyTable table, const uint8_t[::1] data, Py_ssize_t count, int64_t base_offset,
                       int64_t latest, bint retain_deletes, bytearray keep, int64_t base_timestamp,
                       bint has_delete_horizon, int64_t delete_horizon, int64_t new_delete_horizon,
                       bint log_append_time, int64_t log_append_ts, int64_t last_offset_delta):
    """:func:`retain_records` and, when the batch must be rebuilt, :func:`rebuild_records`, in
    one scan: each record is decoded once (its spans kept), then decided, then the retained
    ones written from their own bytes.

    Returns ``retain_records``' five values plus ``rebuilt``: ``None`` when the batch is not
    rebuilt here (nothing retained, all retained and no delete horizon needed, or a batch
    ``rebuild_records`` would decline: the caller then takes its usual path), else
    ``rebuild_records``' ``(records_bytes, retained, base_timestamp, max_timestamp)`` for the
    horizon the cleaner would pick (a new one if a tombstone stays and the batch has none).
    """
    cdef const uint8_t* p = &data[0] if data.shape[0] else NULL
    cdef Py_ssize_t end = data.shape[0], pos = 0, lpos, i, retained = 0, invalid = 0, superseded = 0
    cdef Py_ssize_t key_pos, w = 0, body, tn
    cdef KeySpan r
    cdef bint k, tomb = False, strict = True, need_horizon, have_base
    cdef int64_t found, ts, new_base, new_delta, last_kept = -1, max_ts = -1, horizon
    cdef uint8_t dummy = 0
    cdef uint8_t tmp[10]
    cdef uint8_t* o
    cdef Span* sc
    if len(keep) != count:
        keep[:] = bytes(count)
    cdef uint8_t* out = <uint8_t*>(<char*>keep) if count else &dummy
    if count <= 0:
        return CORRUPT if count < 0 else OK, 0, False, 0, 0, None
    sc = <Span*>malloc(count * sizeof(Span))
    if sc == NULL:
        raise MemoryError()
    try:
        for i in range(count):
            if p == NULL:
                return CORRUPT, 0, False, 0, 0, None
            lpos = pos
            if strict and _strict_record(p, &pos, end, base_offset, &sc[i], &key_pos) == 0:
                pass
            else:
                # not rebuildable here: read it (and the rest) as retain_records does
                strict = False
                pos = lpos
                if _next_key_offset(p, &pos, end, base_offset, &r) < 0:
                    return CORRUPT, 0, False, 0, 0, None
                sc[i].offset = r.offset
                sc[i].key_len = r.key_len
                sc[i].has_value = r.has_value
                key_pos = r.key_pos
            sc[i].hashed = sc[i].offset <= latest and sc[i].key_len >= 0 and table.size > 0
            if sc[i].hashed:
                _digest(p + key_pos if sc[i].key_len else &dummy, sc[i].key_len, table.k0, table.k1, sc[i].digest)
                table._prefetch(sc[i].digest)
        if pos != end:
            return CORRUPT, 0, False, 0, 0, None
        for i in range(count):
            if sc[i].offset > latest:
                k = True
            elif sc[i].key_len < 0:
                invalid += 1
                k = True
            else:
                found = table._get_d(sc[i].digest) if sc[i].hashed else -1
                if sc[i].offset < found:
                    k = False
                    superseded += 1
                else:
                    k = sc[i].has_value or retain_deletes
            if k:
                retained += 1
                if not sc[i].has_value and sc[i].key_len >= 0:
                    tomb = True
            out[i] = k
        need_horizon = tomb and not has_delete_horizon
        if retained == 0 or (retained == count and not need_horizon) or not strict:
            return OK, retained, tomb, invalid, superseded, None
        # rebuild_records' writing, from the spans (no record decoded again)
        if need_horizon:
            horizon = new_delete_horizon
            have_base = True
        else:
            horizon = delete_horizon
            have_base = has_delete_horizon
        new_base = horizon
        records = PyBytes_FromStringAndSize(NULL, end + 16 * count)
        o = <uint8_t*>PyBytes_AS_STRING(records)
        for i in range(count):
            if not out[i]:
                continue
            ts = log_append_ts if log_append_time else base_timestamp + sc[i].ts_delta
            if ts < -1 or sc[i].od < 0 or sc[i].offset <= last_kept:
                return OK, retained, tomb, invalid, superseded, None
            last_kept = sc[i].offset
            if not have_base:
                new_base = ts
                have_base = True
            if ts > max_ts:
                max_ts = ts
            new_delta = ts - new_base
            if new_delta == sc[i].ts_delta and sc[i].attr == 0:
                memcpy(o + w, p + sc[i].rec_start, sc[i].rec_end - sc[i].rec_start)
                w += sc[i].rec_end - sc[i].rec_start
            else:
                tn = _put_varlong(tmp, new_delta)
                body = 1 + tn + (sc[i].rec_end - sc[i].od_pos)
                w += _put_varlong(o + w, body)
                o[w] = 0
                w += 1
                memcpy(o + w, tmp, tn)
                w += tn
                memcpy(o + w, p + sc[i].od_pos, sc[i].rec_end - sc[i].od_pos)
                w += sc[i].rec_end - sc[i].od_pos
        if last_kept - base_offset > last_offset_delta:
            return OK, retained, tomb, invalid, superseded, None
        return OK, retained, tomb, invalid, superseded, (records[:w], retained, new_base, max_ts)
    finally:
        free(sc)
