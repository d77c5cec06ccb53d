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


cdef enum:
    MAP_AHEAD = 16   # records hashed (their slots prefetched) ahead of the one being put


cdef int _map_core(KeyTable table, const uint8_t* p, Py_ssize_t end, Py_ssize_t count, int64_t base_offset,
                   int64_t batch_last, int64_t start, Py_ssize_t max_entries, Py_ssize_t* index,
                   int64_t* last_put) except -3:
    """:func:`map_records` over one records section at ``p``: OK, FULL / DELTA_OVERFLOW at record
    ``index[0]``, or CORRUPT at record ``index[0]`` (the records before it were put, as they
    would be one by one, unless the map filled first: then FULL).

    Software-pipelined: record ``i + MAP_AHEAD`` is scanned and hashed, its slot prefetched,
    while record ``i`` is put, so each slot has had that long to arrive; the puts happen in
    record order, so the result is that of putting record by record.

    It also checks that the batch's record offsets are strictly increasing and within
    ``[base_offset, batch_last]``; if not, an offset could name two records and the table's
    supersession bitmap is turned off for the round."""
    cdef Py_ssize_t pos = 0, scanned = 0, put = 0
    cdef KeySpan r
    cdef int st
    cdef bint corrupt = False
    cdef int64_t prev = base_offset
    cdef uint8_t dummy = 0
    cdef Scanned ring[MAP_AHEAD]
    cdef Scanned* s
    index[0] = 0
    last_put[0] = -1
    while True:
        while scanned < count and scanned - put < MAP_AHEAD and not corrupt:
            if p == NULL or _next_key_offset(p, &pos, end, base_offset, &r) < 0:
                corrupt = True
                break
            if table.bits_ok and (r.offset < prev or (scanned > 0 and r.offset == prev) or r.offset > batch_last):
                table._drop_bits()
            prev = r.offset
            s = &ring[scanned % MAP_AHEAD]
            s.offset = r.offset
            s.hashed = r.key_len >= 0 and r.offset >= start
            if s.hashed:
                _digest(p + r.key_pos if r.key_len else &dummy, r.key_len, table.k0, table.k1, s.digest)
                table._prefetch(s.digest)
            scanned += 1
        if put == scanned:
            break
        s = &ring[put % MAP_AHEAD]
        if s.hashed:
            st = table._put_d(s.digest, s.offset, max_entries)
            if st != ST_OK:
                index[0] = put
                return st
            last_put[0] = s.offset
        put += 1
    index[0] = put
    if corrupt or pos != end:
        return ST_CORRUPT
    return ST_OK


def map_records(KeyTable table, const uint8_t[::1] data, Py_ssize_t count, int64_t base_offset,
                int64_t start, Py_ssize_t max_entries):
    """Put every keyed record at or after ``start`` (one batch's records section).

    Returns ``(status, index, last_put)``: status OK, or FULL / DELTA_OVERFLOW at record
    ``index`` (nothing from it on was put), or CORRUPT; ``last_put`` is the last offset put, -1
    if none. The batch is scanned and hashed first, prefetching each key's slot, then put in
    order: the same result as putting record by record, with the table's cache misses overlapped.
    The cleaner calls ``table.note_batch`` for the batch first (its last offset bounds the
    records' offsets for the supersession bitmap; without it the bitmap is turned off).
    """
    cdef Py_ssize_t index
    cdef int64_t last_put
    st = _map_core(table, &data[0] if data.shape[0] else NULL, data.shape[0], count, base_offset,
                   table.walk_last, start, max_entries, &index, &last_put)
    return st, index, last_put


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
                return ST_CORRUPT, 0, False, 0, 0
            sc[i].offset = r.offset
            sc[i].key_len = r.key_len
            sc[i].has_value = r.has_value
            sc[i].hashed = r.offset <= latest and r.key_len >= 0 and table.size > 0
            if sc[i].hashed:
                _digest(p + r.key_pos if r.key_len else &dummy, r.key_len, table.k0, table.k1, sc[i].digest)
                table._prefetch(sc[i].digest)
        if pos != end:
            return ST_CORRUPT, 0, False, 0, 0
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
        return ST_OK, retained, tomb, invalid, superseded
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
    cdef uint32_t z
    # one and two bytes (lengths up to 8191), most fields: decoded inline; a two-byte encoding is
    # minimal iff its second byte is not 0
    if start < end and p[start] < 0x80:
        z = p[start]
        pos[0] = start + 1
        out[0] = <int64_t>(z >> 1) ^ -(<int64_t>(z & 1))
        return 0
    if start + 2 <= end and p[start + 1] < 0x80 and p[start] >= 0x80 and max_bytes >= 2:
        if p[start + 1] == 0:
            return -1
        z = (p[start] & 0x7F) | (<uint32_t>p[start + 1] << 7)
        pos[0] = start + 2
        out[0] = <int64_t>(z >> 1) ^ -(<int64_t>(z & 1))
        return 0
    if _varint(p, pos, end, max_bytes, out) < 0:
        return -1
    if pos[0] - start > 1 and p[pos[0] - 1] == 0:
        return -1
    return 0


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
            return ST_CORRUPT, n, acc
        if r.key_len >= 0:
            _siphash128(p + r.key_pos if r.key_len else &dummy, r.key_len, k0, k1, &a, &b)
            acc ^= a
            n += 1
    return ST_OK, n, acc


