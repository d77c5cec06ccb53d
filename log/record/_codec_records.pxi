# ---- record decoding for readers (included by _codec.pyx) ----------------------------------

cdef inline bint _add_overflows(int64_t a, int64_t b) noexcept nogil:
    return (b > 0 and a > INT64_MAX - b) or (b < 0 and a < INT64_MIN - b)


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
    cdef Py_ssize_t end = data.shape[0], pos = 0, i
    cdef int64_t ts, off, seq, od
    cdef RecordSpan r
    cdef bint append_time = log_append_time is not None
    cdef int64_t lat = log_append_time if append_time else 0
    cdef int32_t i32max = 2147483647
    out = []
    if count and p == NULL:
        return None
    for i in range(count):
        if _read_record(p, &pos, end, &r) < 0:
            return None
        if pos >= end or p[pos] != 0:
            return None  # headers (or a truncated record): the reference decodes them
        pos += 1
        if pos != r.rec_end:
            return None
        key = None if r.key_len < 0 else PyBytes_FromStringAndSize(<char*>(p + r.key_pos), r.key_len)
        value = None if r.value_len < 0 else PyBytes_FromStringAndSize(<char*>(p + r.value_pos), r.value_len)
        od = r.offset_delta
        if _add_overflows(base_offset, od):
            return None
        off = base_offset + od
        if append_time:
            ts = lat
        else:
            if _add_overflows(base_timestamp, r.ts_delta):
                return None
            ts = base_timestamp + r.ts_delta
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
        if _add_overflows(ts, -base_timestamp) or base_timestamp == INT64_MIN:
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




# ---- checking a producer's records (Kafka's LogValidator, per record) ---------------------------

from cpython.unicode cimport PyUnicode_DecodeUTF8


cdef inline int _utf8_ok(const uint8_t* p, Py_ssize_t n):
    """1 if ``p[:n]`` decodes as strict UTF-8 (``bytes.decode('utf-8')``), else 0."""
    cdef Py_ssize_t i
    for i in range(n):
        if p[i] >= 0x80:
            try:
                PyUnicode_DecodeUTF8(<char*>p, n, "strict")
            except UnicodeDecodeError:
                return 0
            return 1
    return 1


def check_produced_records(const uint8_t[::1] data, Py_ssize_t count, int64_t base_timestamp, bint need_key,
                           bint check_time, int64_t now_ms, int64_t max_diff):
    """The produce path's per-record rules over one batch's (decompressed) records section,
    without making a single record object: every record well-formed exactly as
    ``decode.iter_record_fields`` reads it (headers included), offset deltas 0..count-1, a key
    on every record when ``need_key``, and with ``check_time`` every CreateTime timestamp
    ``base_timestamp + delta`` within ``max_diff`` of ``now_ms``.

    Returns the records' maximum timestamp (-1 if none is larger) when all of that holds, else
    ``None``: a malformed record, a broken rule, or anything it does not judge exactly as the
    reference (a 10-byte varlong, int64 overflow, ``max_diff`` beyond 2**61). The caller then
    runs the reference and reports what it finds.
    """
    cdef const uint8_t* p = &data[0] if data.shape[0] else NULL
    cdef Py_ssize_t end = data.shape[0], pos = 0, i, h
    cdef int64_t ts, nh, hklen, hvlen
    cdef int64_t max_ts = -1, lo = 0, hi = 0
    cdef RecordSpan r
    if check_time:
        if max_diff < 0 or max_diff > (<int64_t>1 << 61) or now_ms < -(<int64_t>1 << 61) \
                or now_ms > (<int64_t>1 << 61):
            return None
        lo = now_ms - max_diff
        hi = now_ms + max_diff
    if count and p == NULL:
        return None
    for i in range(count):
        if _read_record(p, &pos, end, &r) < 0 or r.offset_delta != i or (r.key_len < 0 and need_key):
            return None
        if pos >= end:
            return None
        if p[pos] == 0:
            pos += 1
        else:
            if _varint(p, &pos, end, 5, &nh) < 0 or nh < 0 or nh > r.rec_end - pos:
                return None
            for h in range(nh):
                if _varint(p, &pos, end, 5, &hklen) < 0 or hklen < 0 or pos + hklen > r.rec_end:
                    return None
                if not _utf8_ok(p + pos, hklen):
                    return None
                pos += hklen
                if _varint(p, &pos, end, 5, &hvlen) < 0:
                    return None
                if hvlen >= 0:
                    if pos + hvlen > r.rec_end:
                        return None
                    pos += hvlen
                elif hvlen != -1:
                    return None
        if pos != r.rec_end:
            return None
        if _add_overflows(base_timestamp, r.ts_delta):
            return None
        ts = base_timestamp + r.ts_delta
        if check_time and (ts < lo or ts > hi):
            return None
        if ts > max_ts:
            max_ts = ts
    if pos != end:
        return None
    return max_ts
