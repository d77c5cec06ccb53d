# ---- per batch: map (the record scanning itself is log/record/_scan.pxi) ----------------------

cdef struct Scanned:
    int64_t offset
    Py_ssize_t key_len   # -1: null key
    bint has_value
    bint hashed
    uint8_t digest[12]


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


# ---- writing retained records -------------------------------------------------------------------

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


