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
    int sup              # superseded as the bitmap told (0/1), -1: decided by the digest
    uint8_t digest[12]


cdef struct Decided:
    Py_ssize_t retained
    Py_ssize_t invalid
    Py_ssize_t superseded
    bint tomb            # a tombstone is kept
    bint strict          # every record parsed as the writer needs (canonical, no headers)


cdef inline int _strict_record(const uint8_t* p, Py_ssize_t* pos, Py_ssize_t end, int64_t base_offset,
                               Span* s, Py_ssize_t* key_pos) noexcept nogil:
    """One record parsed as the writer (``_write_kept``) needs it: canonical varints, no headers;
    -1 if it would decline. A record this accepts, ``_next_key_offset`` accepts with the same offset,
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


cdef int _decide(KeyTable table, const uint8_t* p, Py_ssize_t end, Py_ssize_t count, int64_t base_offset,
                 int64_t latest, bint retain_deletes, bint known, Span* sc, uint8_t* keep, Decided* r) noexcept:
    """The keep rule (:func:`cleaner.retention.decide_records`, in C: the one copy the compiled
    kernels have) for one data batch into ``keep``, each record decoded once into ``sc`` (spans
    the writer reuses); 0 or CORRUPT. ``known``: the batch is one the map pass read
    (same segment and bytes), so the table's supersession bitmap may answer for its records."""
    cdef Py_ssize_t pos = 0, lpos, i, key_pos
    cdef KeySpan ks
    cdef int sb
    cdef bint k, sup
    cdef uint8_t dummy = 0
    r.retained = 0
    r.invalid = 0
    r.superseded = 0
    r.tomb = False
    r.strict = True
    for i in range(count):
        if p == NULL:
            return ST_CORRUPT
        lpos = pos
        if r.strict and _strict_record(p, &pos, end, base_offset, &sc[i], &key_pos) == 0:
            pass
        else:
            # not rebuildable here: read it (and the rest) as retain_records does
            r.strict = False
            pos = lpos
            if _next_key_offset(p, &pos, end, base_offset, &ks) < 0:
                return ST_CORRUPT
            sc[i].offset = ks.offset
            sc[i].key_len = ks.key_len
            sc[i].has_value = ks.has_value
            key_pos = ks.key_pos
        sc[i].hashed = False
        sc[i].sup = -1
        if sc[i].offset <= latest and sc[i].key_len >= 0 and table.size > 0:
            sb = table._known(sc[i].offset) if known else -1
            if sb >= 0:
                sc[i].sup = sb
            else:
                sc[i].hashed = True
                _digest(p + key_pos if sc[i].key_len else &dummy, sc[i].key_len, table.k0, table.k1,
                        sc[i].digest)
                table._prefetch(sc[i].digest)
    if pos != end:
        return ST_CORRUPT
    for i in range(count):
        if sc[i].offset > latest:
            k = True
        elif sc[i].key_len < 0:
            r.invalid += 1
            k = True
        else:
            if sc[i].hashed:
                sup = sc[i].offset < table._get_d(sc[i].digest)
            elif sc[i].sup >= 0:
                sup = sc[i].sup == 1
            else:
                sup = sc[i].offset < -1  # an empty map answers -1
            if sup:
                k = False
                r.superseded += 1
            else:
                k = sc[i].has_value or retain_deletes
        if k:
            r.retained += 1
            if not sc[i].has_value and sc[i].key_len >= 0:
                r.tomb = True
        keep[i] = k
    return 0


def retain_records(KeyTable table, const uint8_t[::1] data, Py_ssize_t count, int64_t base_offset,
                   int64_t latest, bint retain_deletes, bytearray keep):
    """The cleaner's record-level decisions for one data batch (``shouldRetainRecord``, keyless
    records kept). Writes 1/0 per record into ``keep`` (resized to ``count``).

    Returns ``(status, retained, tombstone_kept, keyless_in_range, superseded)``; status CORRUPT
    if the records would not decode. ``superseded`` counts the records dropped because the map
    holds a later offset of their key; the other dropped ones are tombstones past the delete
    horizon (the round report's reasons, from this one scan). It is :func:`_decide`, the rule
    :func:`cleaner.retention.decide_records` writes in Python, without the bitmap.
    """
    cdef Decided d
    cdef Span* sc
    if len(keep) != count:
        keep[:] = bytes(count)
    if count <= 0:  # no record to read: the reference accepts only an empty section
        return (ST_OK if data.shape[0] == 0 else ST_CORRUPT), 0, False, 0, 0
    sc = <Span*>table._scratch(count * sizeof(Span))
    if _decide(table, &data[0] if data.shape[0] else NULL, data.shape[0], count, base_offset, latest,
               retain_deletes, False, sc, <uint8_t*>(<char*>keep), &d) != 0:
        return ST_CORRUPT, 0, False, 0, 0
    return ST_OK, d.retained, d.tomb, d.invalid, d.superseded


cdef Py_ssize_t _write_kept(const uint8_t* p, const Span* sc, const uint8_t* keep, Py_ssize_t count,
                            int64_t base_offset, int64_t base_timestamp, bint have_base, int64_t horizon,
                            bint log_append_time, int64_t log_append_ts, int64_t last_offset_delta,
                            uint8_t* o, int64_t* base_out, int64_t* max_out) noexcept nogil:
    """``rebuild_records``' writing from the spans of a strict scan (no record decoded again):
    the kept records into ``o`` (room for the section + 16 bytes per record). Returns the bytes
    written, or -1 where rebuild_records would decline."""
    cdef Py_ssize_t i, w = 0, body, tn
    cdef int64_t ts, new_base = horizon, new_delta, last_kept = -1, max_ts = -1
    cdef uint8_t tmp[10]
    for i in range(count):
        if not keep[i]:
            continue
        ts = log_append_ts if log_append_time else base_timestamp + sc[i].ts_delta
        if ts < -1 or sc[i].od < 0 or sc[i].offset <= last_kept:
            return -1
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
        return -1
    base_out[0] = new_base
    max_out[0] = max_ts
    return w


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
    cdef Py_ssize_t end = data.shape[0], pos = 0, key_pos, i, retained = 0, w = -1
    cdef int64_t new_base, max_ts
    cdef Span* sc
    if p == NULL or keep.shape[0] != count:
        return None
    sc = <Span*>malloc(max(count, 1) * sizeof(Span))
    if sc == NULL:
        raise MemoryError()
    try:
        for i in range(count):
            if _strict_record(p, &pos, end, base_offset, &sc[i], &key_pos) < 0:
                return None  # headers (the builder re-encodes them and checks their UTF-8 keys), or non-canonical
            retained += keep[i] != 0
        if pos != end or retained == 0:
            return None
        out = PyBytes_FromStringAndSize(NULL, end + 16 * count)  # each rewrite grows a record <= 10 bytes
        w = _write_kept(p, sc, &keep[0], count, base_offset, base_timestamp, has_horizon, horizon, log_append_time,
                        log_append_ts, last_offset_delta, <uint8_t*>PyBytes_AS_STRING(out), &new_base, &max_ts)
    finally:
        free(sc)
    if w < 0:
        return None
    return out[:w], retained, new_base, max_ts


def retain_and_rebuild(KeyTable table, const uint8_t[::1] data, Py_ssize_t count, int64_t base_offset,
                       int64_t latest, bint retain_deletes, bytearray keep, int64_t base_timestamp,
                       bint has_delete_horizon, int64_t delete_horizon, int64_t new_delete_horizon,
                       bint log_append_time, int64_t log_append_ts, int64_t last_offset_delta,
                       bint known=False):
    """:func:`retain_records` and, when the batch must be rebuilt, :func:`rebuild_records`, in
    one scan: each record is decoded once (its spans kept), then decided, then the retained
    ones written from their own bytes.

    Returns ``retain_records``' five values plus ``rebuilt``: ``None`` when the batch is not
    rebuilt here (nothing retained, all retained and no delete horizon needed, or a batch
    ``rebuild_records`` would decline: the caller then takes its usual path), else
    ``rebuild_records``' ``(records_bytes, retained, base_timestamp, max_timestamp)`` for the
    horizon the cleaner would pick (a new one if a tombstone stays and the batch has none).
    ``known``: the map pass read this very batch, so the table's supersession bitmap may
    decide its records (see ``KeyTable._known``); the answer is the same either way.
    """
    cdef const uint8_t* p = &data[0] if data.shape[0] else NULL
    cdef Py_ssize_t end = data.shape[0], w
    cdef Decided d
    cdef bint need_horizon
    cdef int64_t new_base, max_ts
    cdef uint8_t dummy = 0
    cdef Span* sc
    if len(keep) != count:
        keep[:] = bytes(count)
    cdef uint8_t* out = <uint8_t*>(<char*>keep) if count else &dummy
    if count <= 0:
        return ST_CORRUPT if count < 0 else ST_OK, 0, False, 0, 0, None
    sc = <Span*>table._scratch(count * sizeof(Span))
    if _decide(table, p, end, count, base_offset, latest, retain_deletes, known, sc, out, &d) != 0:
        return ST_CORRUPT, 0, False, 0, 0, None
    need_horizon = d.tomb and not has_delete_horizon
    if d.retained == 0 or (d.retained == count and not need_horizon) or not d.strict:
        return ST_OK, d.retained, d.tomb, d.invalid, d.superseded, None
    records = PyBytes_FromStringAndSize(NULL, end + 16 * count)
    w = _write_kept(p, sc, out, count, base_offset, base_timestamp, need_horizon or has_delete_horizon,
                    new_delete_horizon if need_horizon else delete_horizon, log_append_time, log_append_ts,
                    last_offset_delta, <uint8_t*>PyBytes_AS_STRING(records), &new_base, &max_ts)
    if w < 0:
        return ST_OK, d.retained, d.tomb, d.invalid, d.superseded, None
    return ST_OK, d.retained, d.tomb, d.invalid, d.superseded, (records[:w], d.retained, new_base, max_ts)
