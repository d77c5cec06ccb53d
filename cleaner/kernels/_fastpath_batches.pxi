# Included by _fastpath.pyx: the cleaner's loops over runs of whole batches (one call per chunk
# of a segment instead of Python work per batch). The layout is log/record/batch.py's table.

from crc32c import crc32c as _crc32c   # the same CRC-32C code RecordBatch.ensure_valid runs

cdef enum:
    HDR = 61                  # RECORDS_OFFSET
    PLAIN_MASK = 0x37         # codec bits | transactional | control: none set = a plain batch
    KEPT_ATTRS = 0x38         # timestamp type | transactional | control, as _rebuild_fast keeps them
    HORIZON_FLAG = 0x40
    LOG_APPEND_FLAG = 0x08

# clean_batches' counters (the indexes of ``counts``), in CleanerStats' names
cdef enum:
    C_MESSAGES_READ = 0
    C_INVALID = 1
    C_SUPERSEDED = 2
    C_TOMBSTONE = 3
    C_DELETED = 4
    C_COPIED = 5
    C_REBUILT = 6
    C_MESSAGES_WRITTEN = 7
    C_BYTES_WRITTEN = 8
    C_N_COUNTS = 9

N_COUNTS = C_N_COUNTS


cdef inline int64_t _be64(const uint8_t* p) noexcept nogil:
    return <int64_t>((<uint64_t>p[0] << 56) | (<uint64_t>p[1] << 48) | (<uint64_t>p[2] << 40)
                     | (<uint64_t>p[3] << 32) | (<uint64_t>p[4] << 24) | (<uint64_t>p[5] << 16)
                     | (<uint64_t>p[6] << 8) | <uint64_t>p[7])


cdef inline int32_t _be32(const uint8_t* p) noexcept nogil:
    return <int32_t>tc_be32(p)


cdef inline void _put_be64(uint8_t* p, int64_t v) noexcept nogil:
    cdef int i
    for i in range(8):
        p[i] = (<uint64_t>v >> (56 - 8 * i)) & 0xFF


cdef inline void _put_be32(uint8_t* p, uint32_t v) noexcept nogil:
    p[0] = (v >> 24) & 0xFF
    p[1] = (v >> 16) & 0xFF
    p[2] = (v >> 8) & 0xFF
    p[3] = v & 0xFF


cdef inline uint32_t _crc(const uint8_t* p, Py_ssize_t n) except? 0xFFFFFFFF:
    return _crc32c(PyMemoryView_FromMemory(<char*>p, n, PyBUF_READ))


cdef bint _batch_ok(const uint8_t* b, Py_ssize_t size, bint crc) except? False:
    """RecordBatch.ensure_valid's checks on a batch whose length and magic were read (the CRC
    unless ``crc`` is false, and the header's counts); False where it would raise."""
    cdef int32_t count = _be32(b + 57), lod = _be32(b + 23)
    cdef Py_ssize_t body = size - HDR
    if crc and <uint32_t>_be32(b + 17) != _crc(b + 21, size - 21):
        return False
    if count < 0:
        return False
    if b[22] & 0x07 == 0:
        if <int64_t>count * 7 > body or (count == 0 and body != 0):
            return False
    elif count == 0 and body != 0:
        return False
    if count and lod < count - 1:
        return False
    return True


def frame_batches(const uint8_t[::1] buf, Py_ssize_t pos, Py_ssize_t end, Py_ssize_t chunk_bytes,
                  Py_ssize_t have, Py_ssize_t checked_lo=0, Py_ssize_t checked_hi=0):
    """Walk the batches of ``buf[pos:end]`` as the cleaner's ``_chunks`` groups them, checking
    each as the file reader and ``RecordBatch.ensure_valid`` do (length, magic, CRC-32C, counts).

    ``have``: bytes of the chunk before ``pos``. Returns ``(status, pos, have)``: FRAME_CHUNK
    when the chunk reached ``chunk_bytes`` (pos after its last batch), FRAME_MORE when the batch
    at ``pos`` does not fit in ``buf[:end]`` (read more, or the file ends there), FRAME_BAD when
    the batch at ``pos`` fails a check (the caller runs the reference checks, which raise).
    A batch wholly inside ``buf[checked_lo:checked_hi]`` is not CRC-checked again: the caller
    vouches that these very bytes passed the same check before (see ``ChunkReader``).
    """
    cdef const uint8_t* p = &buf[0] if buf.shape[0] else NULL
    cdef int32_t length
    cdef Py_ssize_t size
    while True:
        if end - pos < 17:
            return ST_FRAME_MORE, pos, have
        length = _be32(p + pos + 8)
        if length < 49 or p[pos + 16] != 2:
            return ST_FRAME_BAD, pos, have
        size = <Py_ssize_t>length + 12
        if size > end - pos:
            return ST_FRAME_MORE, pos, have
        if not _batch_ok(p + pos, size, not (checked_lo <= pos and pos + size <= checked_hi)):
            return ST_FRAME_BAD, pos, have
        pos += size
        have += size
        if have >= chunk_bytes:
            return ST_FRAME_CHUNK, pos, have


cdef enum:
    NOTE_WORDS = 5             # a batch note: file position, size, base offset, last offset, count * 2 + has pid


cdef int _add_note(bytearray notes, int64_t file_pos, int64_t size, int64_t base, int64_t last, int64_t count,
                   bint has_pid) except -1:
    cdef Py_ssize_t n = PyByteArray_GET_SIZE(notes)
    if PyByteArray_Resize(notes, n + NOTE_WORDS * 8) < 0:
        raise MemoryError()
    cdef uint8_t* q = <uint8_t*>PyByteArray_AS_STRING(notes) + n
    cdef int64_t v[NOTE_WORDS]
    v[0] = file_pos
    v[1] = size
    v[2] = base
    v[3] = last
    v[4] = count * 2 + (1 if has_pid else 0)
    memcpy(q, v, sizeof(v))
    return 0


def map_batches(KeyTable table, const uint8_t[::1] buf, Py_ssize_t pos, Py_ssize_t end, int64_t start,
                Py_ssize_t max_entries, int64_t latest, bytearray notes=None, int64_t file_base=0,
                Py_ssize_t note_min=0):
    """The map pass over the framed (checked) batches of ``buf[pos:end]``: what
    ``build_for_segment_fast`` does per batch, for runs of plain batches (uncompressed, neither
    transactional nor control: their transaction state is "not aborted" and nothing else).

    Returns ``(status, pos, messages, latest, index, plain_last)``: OK at ``end``; STOP at a
    batch left to the caller (not plain); FULL / DELTA_OVERFLOW inside the batch at ``pos``, at
    its record ``index``; CORRUPT for a batch whose records the reference decoder refuses (the
    records before the bad one were put, as ``map_records`` does: the caller raises).
    ``messages`` counts the records read as the map pass counts them, ``latest`` is the map's
    latest offset, ``plain_last`` the highest last offset of the plain batches passed (the
    transaction state consumes aborted transactions up to it), or the int64 minimum.

    ``notes``: each plain batch of at least ``note_min`` bytes whose records were all mapped gets a
    note appended (``file_base + pos``, size, base offset, last offset, records count and
    whether it has a producer id, as NOTE_WORDS native int64): after the map pass,
    :func:`superseded_runs` finds from them the batches the rewriting pass need not read.
    """
    cdef const uint8_t* p = &buf[0] if buf.shape[0] else NULL
    cdef const uint8_t* b
    cdef Py_ssize_t size, index = 0
    cdef int64_t base, last, last_put, messages = 0, plain_last = _NO_BATCH
    cdef int32_t count
    cdef int st
    while pos < end:
        b = p + pos
        size = <Py_ssize_t>_be32(b + 8) + 12
        if b[22] & PLAIN_MASK:
            return ST_STOP, pos, messages, latest, 0, plain_last
        base = _be64(b)
        last = base + _be32(b + 23)
        count = _be32(b + 57)
        if last >= start:
            st = _map_core(table, b + HDR if size > HDR else NULL, size - HDR, count, base, last, start,
                           max_entries, &index, &last_put)
            if st == ST_CORRUPT:
                # what map_records answers too (the records before the bad one are put): the
                # caller's per-batch code raises the reference decoder's error
                return ST_CORRUPT, pos, messages, latest, index, plain_last
            if last_put > latest:
                latest = last_put
            if st != ST_OK:
                table._note_batch(base, last)
                if last > plain_last:
                    plain_last = last
                return st, pos, messages, latest, index, plain_last
        table._note_batch(base, last)
        if last > plain_last:
            plain_last = last
        messages += count
        if last >= start and last > latest:
            latest = last
        if notes is not None and last >= start and count > 0 and size >= note_min:
            _add_note(notes, file_base + pos, size, base, last, count, _be64(b + 43) >= 0)
        pos += size
    return ST_OK, pos, messages, latest, 0, plain_last


cdef inline uint64_t _bits_in(const uint64_t* bits, int word, int64_t lo, int64_t hi) noexcept nogil:
    """The number of bits of one kind (``word`` 0: put, 1: latest) set for deltas ``[lo, hi]``."""
    cdef int64_t w, w_lo = lo >> 6, w_hi = hi >> 6
    cdef uint64_t m, total = 0
    for w in range(w_lo, w_hi + 1):
        m = bits[2 * w + word]
        if w == w_lo:
            m &= ~(<uint64_t>0) << (lo & 63)
        if w == w_hi and (hi & 63) != 63:
            m &= ((<uint64_t>1) << ((hi & 63) + 1)) - 1
        total += <uint64_t>TC_POPCOUNT64(m)
    return total


def superseded_runs(KeyTable table, const uint8_t[::1] notes, int64_t latest, int64_t upper,
                    const int64_t[::1] specials, Py_ssize_t min_bytes):
    """The runs of consecutive noted batches (see :func:`map_batches`) that the rewriting pass
    would delete whole because every record is superseded, so it need not read them.

    A noted batch qualifies where :func:`clean_batches` would decide it from its header and the
    bitmap alone with nothing retained: it is plain (only those are noted), not the batch ending
    at ``upper`` nor, with a producer id, one whose last offset is in ``specials``, its last
    offset is at most ``latest``, and the supersession bitmap (on, and covering the batch)
    holds a put bit for ``count`` offsets of ``[base, last]`` (so every record was put: the map
    pass checked that a batch's record offsets are distinct and inside it, and batches'
    ranges increase) and no latest bit there (so a later record of each key exists). Runs of at
    least ``min_bytes`` are returned, in file order, as tuples ``(start, end, first_note,
    n_notes, records, last)``: file bytes ``[start, end)``, the notes it is made of, its records
    and its highest last offset.
    """
    cdef Py_ssize_t n = notes.shape[0] // (NOTE_WORDS * 8), i, first = -1
    cdef int64_t v[NOTE_WORDS]
    cdef int64_t run_start = 0, run_end = -1, records = 0, run_last = 0, d0, d1, count
    cdef bint ok
    out = []
    if n == 0 or not table.bits_ok or table.base < 0 or table.size == 0:
        return out
    if not table.latest_ok:
        table._mark_latest()
    for i in range(n + 1):
        ok = False
        if i < n:
            memcpy(v, &notes[i * NOTE_WORDS * 8], sizeof(v))
            count = v[4] >> 1
            d0 = v[2] - table.base
            d1 = v[3] - table.base
            ok = (count > 0 and v[3] <= latest and v[3] + 1 != upper
                  and not ((v[4] & 1) and _is_special(specials, v[3]))
                  and d0 >= 0 and d1 >= d0 and (d1 >> 6) < table.bit_pairs
                  and <int64_t>_bits_in(table.bits, 0, d0, d1) == count
                  and _bits_in(table.bits, 1, d0, d1) == 0)
        if ok and first >= 0 and v[0] == run_end:
            run_end = v[0] + v[1]
            records += count
            if v[3] > run_last:
                run_last = v[3]
            continue
        if first >= 0 and run_end - run_start >= min_bytes:
            out.append((run_start, run_end, first, i - first, records, run_last))
        first = -1
        if ok:
            first = i
            run_start = v[0]
            run_end = v[0] + v[1]
            records = count
            run_last = v[3]
    return out


def chunk_walk(const uint8_t[::1] notes, Py_ssize_t first, Py_ssize_t n, Py_ssize_t have, Py_ssize_t chunk_bytes):
    """How the reference's chunking (batches grouped until they reach ``chunk_bytes``) passes the
    noted batches ``first .. first + n - 1``, entered with ``have`` bytes in the chunk: returns
    ``(chunks ended among them, bytes of them in the chunk open after them)``."""
    cdef Py_ssize_t i, closed = 0
    cdef int64_t size
    for i in range(first, first + n):
        memcpy(&size, &notes[(i * NOTE_WORDS + 1) * 8], 8)
        have += size
        if have >= chunk_bytes:
            closed += 1
            have = 0
    return closed, have


cdef bint _is_special(const int64_t[::1] specials, int64_t v) noexcept:
    """``v`` in the sorted ``specials`` (binary search)."""
    cdef Py_ssize_t lo = 0, hi = specials.shape[0], mid
    while lo < hi:
        mid = (lo + hi) >> 1
        if specials[mid] < v:
            lo = mid + 1
        else:
            hi = mid
    return lo < specials.shape[0] and specials[lo] == v


cdef uint8_t* _room(bytearray out, Py_ssize_t used, Py_ssize_t need) except NULL:
    """``out``'s buffer with at least ``need`` bytes free after ``used`` (grown geometrically)."""
    cdef Py_ssize_t n = PyByteArray_GET_SIZE(out)
    if used + need > n:
        n = 2 * n if 2 * n > used + need else used + need
        if PyByteArray_Resize(out, n) < 0:
            raise MemoryError()
    return <uint8_t*>PyByteArray_AS_STRING(out) + used


def clean_batches(KeyTable table, const uint8_t[::1] buf, Py_ssize_t pos, Py_ssize_t end,
                  Py_ssize_t known_lo, Py_ssize_t known_hi, int64_t latest, int64_t now, int64_t new_horizon,
                  int64_t upper, const int64_t[::1] specials, bytearray out, int64_t[::1] pend,
                  int64_t[::1] counts, Py_ssize_t flush_at):
    """The rewriting pass over the framed (checked) batches of ``buf[pos:end]``: what
    ``clean_into_fast`` does per batch, for runs of plain batches whose batch-level decision
    needs nothing but their header (DELETE_EMPTY: not their producer's last batch, which
    ``specials`` lists by last offset, nor the batch ending at the round's ``upper`` bound).

    Output goes to ``out`` after its first ``pend[0]`` bytes, ``pend`` being the pending chunk
    (bytes in ``out``, largest offset, max timestamp, offset of the max timestamp, where the
    pending chunk starts in ``out``: the bytes before it are chunks ended earlier) as
    ``_Pending`` keeps it; ``counts`` adds up CleanerStats' counters (C_* indexes). Batches in
    ``[known_lo, known_hi)`` are ones the map pass read, whose records the table's bitmap may
    decide. Returns ``(status, pos, plain_last)``: OK at ``end``; FLUSH when the pending chunk
    passed ``flush_at`` after the batch ending at ``pos`` (the caller ends it); STOP at a
    batch left to the caller (not plain, its decision needs the producer state, records the
    reference must read, or a rebuild the builder must do: nothing of it was counted or written).
    """
    cdef const uint8_t* p = &buf[0] if buf.shape[0] else NULL
    cdef const uint8_t* b
    cdef uint8_t* o
    cdef uint8_t* keep
    cdef Span* sc
    cdef Decided d
    cdef Py_ssize_t size, w, n_out
    cdef int64_t base, last, base_ts, max_ts, new_base, mx, horizon, plain_last = _NO_BATCH
    cdef int32_t count
    cdef uint8_t attrs
    cdef bint has_horizon, log_append, need_horizon, known, copied = False
    while pos < end:
        b = p + pos
        size = <Py_ssize_t>_be32(b + 8) + 12
        attrs = b[22]
        if attrs & PLAIN_MASK:
            return ST_STOP, pos, plain_last
        base = _be64(b)
        last = base + _be32(b + 23)
        if last + 1 == upper or (_be64(b + 43) >= 0 and _is_special(specials, last)):
            return ST_STOP, pos, plain_last  # RETAIN_EMPTY possibly: decide_batch decides
        count = _be32(b + 57)
        has_horizon = attrs & HORIZON_FLAG
        log_append = attrs & LOG_APPEND_FLAG
        base_ts = _be64(b + 27)
        max_ts = _be64(b + 35)
        known = known_lo <= pos and pos + size <= known_hi
        sc = <Span*>table._scratch((count if count > 0 else 1) * (sizeof(Span) + 1))
        keep = <uint8_t*>(sc + (count if count > 0 else 1))
        if count <= 0 or _decide(table, b + HDR if size > HDR else NULL, size - HDR, count, base, latest,
                                 not has_horizon or now < base_ts, known, sc, keep, &d) != 0:
            return ST_STOP, pos, plain_last  # no records (the reference's path) or corrupt ones
        copied = False
        if d.retained == 0:
            n_out = 0
        else:
            need_horizon = d.tomb and not has_horizon
            if d.retained == count and not need_horizon:
                o = _room(out, pend[0], size)
                memcpy(o, b, size)
                n_out = size
                copied = True
            elif not d.strict:
                return ST_STOP, pos, plain_last
            else:
                o = _room(out, pend[0], size + 16 * count)
                horizon = new_horizon if need_horizon else base_ts
                w = _write_kept(b + HDR, sc, keep, count, base, base_ts, need_horizon or has_horizon, horizon,
                                log_append, max_ts, _be32(b + 23), o + HDR, &new_base, &mx)
                if w < 0:
                    return ST_STOP, pos, plain_last
                if not log_append:
                    max_ts = mx
                # _write_header_and_crc's header: codec none, flags kept, horizon bit if any horizon
                memcpy(o, b, 17)  # baseOffset, (length), partitionLeaderEpoch, magic
                _put_be32(o + 8, <uint32_t>(HDR + w - 12))
                o[21] = 0
                o[22] = (attrs & KEPT_ATTRS) | (HORIZON_FLAG if need_horizon or has_horizon else 0)
                memcpy(o + 23, b + 23, 4)  # lastOffsetDelta
                _put_be64(o + 27, new_base)
                _put_be64(o + 35, max_ts)
                memcpy(o + 43, b + 43, 14)  # producerId, producerEpoch, baseSequence
                _put_be32(o + 57, <uint32_t>d.retained)
                _put_be32(o + 17, _crc(o + 21, HDR + w - 21))
                n_out = HDR + w
        counts[C_MESSAGES_READ] += count
        counts[C_INVALID] += d.invalid
        counts[C_SUPERSEDED] += d.superseded
        counts[C_TOMBSTONE] += count - d.retained - d.superseded
        if last > plain_last:
            plain_last = last
        pos += size
        if n_out == 0:
            counts[C_DELETED] += 1
            continue
        if copied:
            counts[C_COPIED] += 1
        else:
            counts[C_REBUILT] += 1
        counts[C_MESSAGES_WRITTEN] += d.retained
        counts[C_BYTES_WRITTEN] += n_out
        pend[0] += n_out
        pend[1] = last
        if max_ts > pend[2] or pend[3] < 0:
            pend[2] = max_ts
            pend[3] = last
        if pend[0] - pend[4] > flush_at:
            return ST_FLUSH, pos, plain_last
    return ST_OK, pos, plain_last
