# Included by the compiled kernels of both layers (log/record/_codec.pyx for readers, producers
# and key indexes; cleaner/kernels/_fastpath.pyx for the cleaner): reading the v2 record layout
# (decode.py's table) in C: _read_record with decode.iter_record_fields' checks (readers and the
# produce path), _next_key_offset with decode.iter_key_offsets' (the cleaner). The includer cimports
# the C integer types and defines nothing these names clash with.

# status codes every kernel shares (C constants inside, the same values as Python names)
cdef enum:
    ST_OK = 0
    ST_CORRUPT = -1

OK = ST_OK
CORRUPT = ST_CORRUPT


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


cdef struct RecordSpan:
    int64_t ts_delta
    int64_t offset_delta
    Py_ssize_t key_pos
    Py_ssize_t key_len     # -1: null key
    Py_ssize_t value_pos
    Py_ssize_t value_len   # -1: null value
    Py_ssize_t rec_end     # the record's end; the headers start where the reader stopped


cdef inline int _read_record(const uint8_t* p, Py_ssize_t* pos, Py_ssize_t end, RecordSpan* r) noexcept nogil:
    """One record's length, timestamp delta, offset delta, key and value the way
    ``decode.iter_record_fields`` reads them (the same checks, but a 10-byte varlong timestamp
    delta is refused: callers then run the reference); leaves ``pos`` at the headers count.
    -1 if it would raise (or is refused)."""
    cdef int64_t length, klen, vlen
    cdef Py_ssize_t start
    if _varint(p, pos, end, 5, &length) < 0:
        return -1
    r.rec_end = pos[0] + length
    if length < 6 or r.rec_end > end:
        return -1
    pos[0] += 1  # attributes
    start = pos[0]
    if _varint(p, pos, end, 10, &r.ts_delta) < 0 or pos[0] - start >= 10:
        return -1
    if _varint(p, pos, end, 5, &r.offset_delta) < 0 or _varint(p, pos, end, 5, &klen) < 0:
        return -1
    r.key_pos = pos[0]
    r.key_len = klen
    if klen >= 0:
        if pos[0] + klen > r.rec_end:
            return -1
        pos[0] += klen
    elif klen != -1:
        return -1
    if _varint(p, pos, end, 5, &vlen) < 0:
        return -1
    r.value_pos = pos[0]
    r.value_len = vlen
    if vlen >= 0:
        if pos[0] + vlen > r.rec_end:
            return -1
        pos[0] += vlen
    elif vlen != -1:
        return -1
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


cdef inline Py_ssize_t _put_varlong(uint8_t* out, int64_t v) noexcept nogil:
    cdef uint64_t z = (<uint64_t>v << 1) ^ <uint64_t>(v >> 63)
    cdef Py_ssize_t n = 0
    while z >= 0x80:
        out[n] = (z & 0x7F) | 0x80
        z >>= 7
        n += 1
    out[n] = <uint8_t>z
    return n + 1
