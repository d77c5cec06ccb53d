# Included by _fastpath.pyx: SipHash-2-4-128 and the offset map's key table.

# ---- SipHash-2-4, 128-bit output (Aumasson & Bernstein, reference siphash.c) -----------------

cdef inline uint64_t _rotl(uint64_t x, int b) noexcept nogil:
    return (x << b) | (x >> (64 - b))


cdef inline uint64_t _le64(const uint8_t* p) noexcept nogil:
    return tc_le64(p)


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
    """The key's 12-byte digest: SipHash-2-4-128's output bytes 0-11 (little-endian halves)."""
    cdef uint64_t a, b
    _siphash128(key, n, k0, k1, &a, &b)
    tc_put_le64(out, a)
    tc_put_le32(out + 8, <uint32_t>b)
    if a == 0 and <uint32_t>b == 0:
        out[0] = 1


cdef inline uint64_t _ld64(const uint8_t* p) noexcept nogil:
    cdef uint64_t v
    memcpy(&v, p, 8)
    return v


cdef inline uint32_t _ld32(const uint8_t* p) noexcept nogil:
    cdef uint32_t v
    memcpy(&v, p, 4)
    return v


cdef inline bint _is_empty(const uint8_t* s) noexcept nogil:
    return _ld64(s) == 0 and _ld32(s + 8) == 0


cdef inline bint _same(const uint8_t* s, const uint8_t* d) noexcept nogil:
    return _ld64(s) == _ld64(d) and _ld32(s + 8) == _ld32(d + 8)


cdef inline Py_ssize_t _home(const uint8_t* d, Py_ssize_t slots) noexcept nogil:
    """The first slot a digest probes: its first 32 bits (big-endian) scaled to ``[0, slots)``
    (multiply-shift, no division)."""
    return <Py_ssize_t>((<uint64_t>tc_be32(d) * <uint64_t>slots) >> 32)


cdef inline uint32_t _slot_delta(const uint8_t* s) noexcept nogil:
    return (<uint32_t>s[12] | (<uint32_t>s[13] << 8) | (<uint32_t>s[14] << 16) | (<uint32_t>s[15] << 24))


# ---- table memory kept between rounds --------------------------------------------------------
#
# A table buffer of 2 MiB or more that a table lets go of (it grew past it, or the round reset or
# freed the table) is kept and handed to the next table that grows to exactly that size, zeroed
# with memset: a cleaner thread runs round after round, and fresh memory costs a page fault and
# the kernel's zeroing on first touch (on this VM ~1.7 ms of CPU per MB: ~10 ms of a ~130 ms
# round for the 2 + 4 MiB a table of 100k keys grows through), where kept memory costs a memset.
# At most SPARE_BLOCKS blocks are kept, the largest, and together no more than the dedupe budget
# (capacity x 16 bytes) of the table that let the last one go: after a round whose table grew to
# its whole budget only that block stays, which is what Kafka holds for the life of a cleaner
# thread (its dedupe buffer). Module state, touched only with the GIL held (the table methods
# run with it).

cdef enum:
    SPARE_MIN_BYTES = 64 << 10
    SPARE_BLOCKS = 12

cdef void* _spare_ptr[SPARE_BLOCKS]      # static storage: NULL / 0 until a block is kept
cdef Py_ssize_t _spare_size[SPARE_BLOCKS]


cdef void* _table_alloc(Py_ssize_t n) noexcept:
    """Zeroed table memory: a kept block of exactly ``n`` bytes if there is one, else new."""
    cdef int i
    cdef void* p
    if n >= SPARE_MIN_BYTES:
        for i in range(SPARE_BLOCKS):
            if _spare_ptr[i] != NULL and _spare_size[i] == n:
                p = _spare_ptr[i]
                _spare_ptr[i] = NULL
                _spare_size[i] = 0
                memset(p, 0, n)
                return p
    return tc_table_alloc(n)


cdef void _table_free(void* p, Py_ssize_t n, Py_ssize_t budget) noexcept:
    """Let go of table memory: kept for a later table (see above) or freed."""
    cdef int i, j
    cdef void* ptrs[SPARE_BLOCKS + 1]
    cdef Py_ssize_t sizes[SPARE_BLOCKS + 1]
    cdef Py_ssize_t total = 0, t
    cdef void* q
    if p == NULL:
        return
    if n < SPARE_MIN_BYTES:
        free(p)
        return
    for i in range(SPARE_BLOCKS):
        ptrs[i] = _spare_ptr[i]
        sizes[i] = _spare_size[i]
        _spare_ptr[i] = NULL
        _spare_size[i] = 0
    ptrs[SPARE_BLOCKS] = p
    sizes[SPARE_BLOCKS] = n
    for i in range(1, SPARE_BLOCKS + 1):  # largest first (insertion sort)
        j = i
        while j > 0 and sizes[j] > sizes[j - 1]:
            t = sizes[j]; sizes[j] = sizes[j - 1]; sizes[j - 1] = t
            q = ptrs[j]; ptrs[j] = ptrs[j - 1]; ptrs[j - 1] = q
            j -= 1
    j = 0
    for i in range(SPARE_BLOCKS + 1):
        if ptrs[i] == NULL:
            continue
        if j < SPARE_BLOCKS and total + sizes[i] <= budget:
            _spare_ptr[j] = ptrs[i]
            _spare_size[j] = sizes[i]
            total += sizes[i]
            j += 1
        else:
            free(ptrs[i])


def spare_table_bytes():
    """Bytes of table memory kept for later tables (tests and diagnostics)."""
    cdef int i
    cdef Py_ssize_t total = 0
    for i in range(SPARE_BLOCKS):
        total += _spare_size[i]
    return total


cdef enum:
    MIN_BIT_PAIRS = 1024   # 64 Ki offsets: the first allocation of the supersession bitmap

cdef int64_t _NO_BATCH = INT64_MIN


@cython.final
cdef class KeyTable:
    """Digest -> offset table with 16-byte slots (see the module docstring). Not thread-safe.

    Besides the slots it keeps, for the offsets put in the round, a bitmap of two bits per
    offset (``put``, and ``latest``: the offset a slot holds now, set from the slots when the
    rewriting pass first asks), so the rewriting pass can decide a record the map pass put
    without hashing its key again: ``_known`` below. The bitmap grows with the offsets, up to a
    quarter of a byte per offset and at most capacity x 2 bytes (an eighth of the slots'
    memory); past that, or whenever the map pass saw offsets that are not strictly increasing
    (so an offset might name two records), it is not used and every record is looked up by its
    digest, as before.
    """

    cdef uint8_t* buf
    cdef readonly Py_ssize_t capacity   # logical slots: what the dedupe buffer pays for
    cdef readonly Py_ssize_t slots      # physical slots allocated now (<= capacity)
    cdef readonly Py_ssize_t size
    cdef readonly int64_t base          # offset of delta 0; -1 before the first put
    cdef uint64_t k0, k1
    cdef readonly Py_ssize_t collisions
    # the supersession bitmap: word 2w holds the put bits of deltas [64w, 64w + 64), word 2w + 1
    # their latest bits (valid while latest_ok)
    cdef uint64_t* bits
    cdef Py_ssize_t bit_pairs
    cdef Py_ssize_t max_bit_pairs
    cdef int64_t last_put_delta
    cdef int64_t walk_last             # last offset of the batch the map pass read before
    cdef readonly bint bits_ok
    cdef bint latest_ok
    # scratch memory of the kernels (per-record spans of one batch), reused across batches
    cdef void* scratch
    cdef Py_ssize_t scratch_bytes

    def __cinit__(self, Py_ssize_t capacity):
        if capacity < 1:
            raise ValueError(f"a key table needs at least one slot, got {capacity}")
        if capacity > (<Py_ssize_t>1 << 32):
            raise ValueError(f"a key table holds at most 2^32 slots, got {capacity}")
        self.capacity = capacity
        self.buf = NULL
        self.slots = 0
        self.size = 0
        self.base = -1
        self.bits = NULL
        self.bit_pairs = 0
        self.max_bit_pairs = capacity // 8 if capacity >= 8 else 1
        self.last_put_delta = -1
        self.walk_last = _NO_BATCH
        self.bits_ok = True
        self.latest_ok = False
        self.scratch = NULL
        self.scratch_bytes = 0

    def __dealloc__(self):
        _table_free(self.buf, self.slots * SLOT, self.capacity * SLOT)
        free(self.bits)
        free(self.scratch)

    @property
    def memory_bytes(self):
        """Bytes of slots allocated now (the bitmap is :attr:`bitmap_bytes`)."""
        return self.slots * SLOT

    @property
    def bitmap_bytes(self):
        return self.bit_pairs * 16

    def reset(self, bytes seed):
        """Empty the table, give memory back, and key the digest with the 16-byte ``seed``."""
        if len(seed) != 16:
            raise ValueError("the round's seed must be 16 bytes")
        cdef const uint8_t* k = <const uint8_t*>PyBytes_AS_STRING(seed)
        self.k0 = _le64(k)
        self.k1 = _le64(k + 8)
        _table_free(self.buf, self.slots * SLOT, self.capacity * SLOT)
        self.buf = NULL
        self.slots = 0
        self.size = 0
        self.base = -1
        self.collisions = 0
        self._drop_bits()
        self.bits_ok = True
        self.latest_ok = False
        self.last_put_delta = -1
        self.walk_last = _NO_BATCH

    cdef void* _scratch(self, Py_ssize_t nbytes) except NULL:
        cdef void* p
        if nbytes > self.scratch_bytes:
            p = malloc(nbytes if nbytes > 4096 else 4096)
            if p == NULL:
                raise MemoryError()
            free(self.scratch)
            self.scratch = p
            self.scratch_bytes = nbytes if nbytes > 4096 else 4096
        return self.scratch

    cdef int _grow(self) except -1:
        cdef Py_ssize_t new_slots = MIN_SLOTS if self.slots == 0 else self.slots * 2
        if new_slots > self.capacity:
            new_slots = self.capacity
        cdef uint8_t* nb = <uint8_t*>_table_alloc(new_slots * SLOT)
        if nb == NULL:
            raise MemoryError()
        cdef Py_ssize_t i, pos
        cdef uint8_t* s
        for i in range(self.slots):
            s = self.buf + i * SLOT
            if _is_empty(s):
                continue
            pos = _home(s, new_slots)
            while not _is_empty(nb + pos * SLOT):
                pos += 1
                if pos == new_slots:
                    pos = 0
            memcpy(nb + pos * SLOT, s, SLOT)
        _table_free(self.buf, self.slots * SLOT, self.capacity * SLOT)
        self.buf = nb
        self.slots = new_slots
        return 0

    cdef inline Py_ssize_t _find(self, const uint8_t* d) noexcept nogil:
        """Slot holding ``d``, or the first empty slot probed; -1 if the table is full of others.
        Linear probing from the digest's home slot: a collision costs the next slot, most
        often in the same cache line."""
        cdef Py_ssize_t pos, n
        cdef uint8_t* s
        if self.slots == 0:
            return -1
        pos = _home(d, self.slots)
        for n in range(self.slots):
            s = self.buf + pos * SLOT
            if _same(s, d) or _is_empty(s):
                return pos
            pos += 1
            if pos == self.slots:
                pos = 0
            self.collisions += 1
        return -1

    cdef inline void _prefetch(self, const uint8_t* d) noexcept nogil:
        """Start loading the slot ``d`` probes first (the kernels digest a whole batch first)."""
        if self.slots:
            TC_PREFETCH(self.buf + _home(d, self.slots) * SLOT)

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
        return self.base + _slot_delta(s)

    # ---- the supersession bitmap ------------------------------------------------------------

    cdef void _drop_bits(self) noexcept nogil:
        free(self.bits)
        self.bits = NULL
        self.bit_pairs = 0
        self.bits_ok = False

    cdef void _mark_latest(self) noexcept nogil:
        """Set the latest bits from the slots: each key's offset now (one pass over the table,
        where marking at every put would cost a random bitmap access per put)."""
        cdef Py_ssize_t i, w
        cdef uint32_t d
        for i in range(self.bit_pairs):
            self.bits[2 * i + 1] = 0
        for i in range(self.slots):
            if not _is_empty(self.buf + i * SLOT):
                d = _slot_delta(self.buf + i * SLOT)
                w = <Py_ssize_t>(d >> 6)
                if w < self.bit_pairs:
                    self.bits[2 * w + 1] |= (<uint64_t>1) << (d & 63)
        self.latest_ok = True

    cdef inline void _mark_put(self, int64_t delta) noexcept nogil:
        cdef Py_ssize_t w = <Py_ssize_t>(delta >> 6)
        if w < self.bit_pairs:  # the common case, inlined into the puts
            self.bits[2 * w] |= (<uint64_t>1) << (delta & 63)
        else:
            self._mark_put_grow(delta)

    cdef void _mark_put_grow(self, int64_t delta) noexcept nogil:
        cdef Py_ssize_t w = <Py_ssize_t>(delta >> 6), n
        cdef uint64_t* nb
        if w >= self.bit_pairs:
            if w >= self.max_bit_pairs:
                return  # past the bitmap's budget: this offset is looked up by digest
            n = MIN_BIT_PAIRS if self.bit_pairs == 0 else self.bit_pairs * 2
            while n <= w:
                n *= 2
            if n > self.max_bit_pairs:
                n = self.max_bit_pairs
            nb = <uint64_t*>realloc(self.bits, n * 16)
            if nb == NULL:
                self._drop_bits()
                return
            memset(nb + 2 * self.bit_pairs, 0, (n - self.bit_pairs) * 16)
            self.bits = nb
            self.bit_pairs = n
        self.bits[2 * w] |= (<uint64_t>1) << (delta & 63)

    cdef inline int _known(self, int64_t offset) noexcept nogil:
        """For a record at ``offset`` that the map pass put: 1 if a later put of its digest
        superseded it, 0 if not (``offset < get(key)`` without hashing the key); -1 when the
        bitmap cannot tell (not put this round, past the bitmap, or the bitmap is off).

        A put record's digest maps to its last put, at or after it, so the record is superseded
        iff its offset is not the one its digest's slot holds; and with every offset put at
        most once, no other slot holds it. Exact only for the very record the map pass put at
        ``offset``: the caller asks only for batches the map pass read (same segment, same
        bytes), whose offsets it checked to be unique (``note_batch`` and the kernels' checks
        turn the bitmap off otherwise)."""
        cdef int64_t d
        cdef Py_ssize_t w
        cdef uint64_t m
        if not self.bits_ok or self.base < 0:
            return -1
        if not self.latest_ok:
            self._mark_latest()
        d = offset - self.base
        if d < 0:
            return -1
        w = <Py_ssize_t>(d >> 6)
        if w >= self.bit_pairs:
            return -1
        m = (<uint64_t>1) << (d & 63)
        if not self.bits[2 * w] & m:
            return -1
        return 0 if self.bits[2 * w + 1] & m else 1

    cdef inline void _note_batch(self, int64_t base_offset, int64_t last_offset) noexcept nogil:
        if base_offset <= self.walk_last or last_offset < base_offset:
            self._drop_bits()
        self.walk_last = last_offset

    def note_batch(self, int64_t base_offset, int64_t last_offset):
        """The map pass read the batch ``[base_offset, last_offset]`` (mapped or not): batches
        must come in strictly increasing offset ranges, or the bitmap is turned off."""
        self._note_batch(base_offset, last_offset)

    # ---- puts -----------------------------------------------------------------------------

    cdef int _put(self, const uint8_t* key, Py_ssize_t n, int64_t offset, Py_ssize_t max_entries) except -2:
        """OK, FULL (size >= max_entries or every slot taken) or DELTA_OVERFLOW."""
        cdef uint8_t d[DIGEST]
        _digest(key, n, self.k0, self.k1, d)
        return self._put_d(d, offset, max_entries)

    cdef inline int _put_d(self, const uint8_t* d, int64_t offset, Py_ssize_t max_entries) except -2:
        cdef Py_ssize_t pos
        cdef uint8_t* s
        cdef int64_t delta
        if self.size >= max_entries or self.size >= self.capacity:
            return ST_FULL
        if self.base < 0:
            self.base = offset
        delta = offset - self.base
        if delta < 0 or delta > MAX_DELTA:
            return ST_DELTA_OVERFLOW
        # grow before the physical table passes half full (linear probing's probes grow fast past
        # that: ~3 ms of the 100 B round's 1M puts at 3/4); at capacity Kafka's load factor applies
        if self.slots < self.capacity and (self.size + 1) * 2 > self.slots:
            self._grow()
        pos = self._find(d)
        if pos < 0:
            return ST_FULL
        s = self.buf + pos * SLOT
        if _is_empty(s):
            memcpy(s, d, DIGEST)
            self.size += 1
        tc_put_le32(s + 12, <uint32_t>delta)
        if self.bits_ok:
            self.latest_ok = False
            if delta <= self.last_put_delta:
                self._drop_bits()  # an offset put twice: it may name two records
            else:
                self.last_put_delta = delta
                self._mark_put(delta)
        return ST_OK

    def put(self, const uint8_t[::1] key, int64_t offset, Py_ssize_t max_entries):
        """Map ``key`` to ``offset``; returns OK, FULL or DELTA_OVERFLOW (nothing changed then).
        A put from Python turns the supersession bitmap off (its offsets come from no batch)."""
        cdef uint8_t dummy = 0
        self._drop_bits()
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
