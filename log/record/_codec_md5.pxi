# Included by _codec.pyx: the MD5 of every key of a records section, for the persisted key
# indexes and bloom filters (log/index/key_index.py scan_keys).
#
# Their stable hash is MD5 (key index hash id 1 is MD5[:8], bloom members are the 16-byte
# digest), so it cannot be the round's SipHash. The MD5 is OpenSSL's libcrypto, not ours:
# setup.py links it when a compile-and-link probe finds <openssl/md5.h> and -lcrypto, and then
# defines TC_HAVE_LIBCRYPTO; without it md5_keys answers UNSUPPORTED and scan_keys uses the
# pure-Python twin (hashlib), which gives the same digests.
#
# The low-level MD5_Init/Update/Final (one 64-byte block for a short key) rather than EVP:
# measured here (OpenSSL 3.0, 16-byte keys) 114 ns per key against 156 ns for EVP with a reused
# context and a fetched EVP_MD, and 220 ns for EVP_Digest. OpenSSL 3 marks the low-level API
# deprecated; OPENSSL_SUPPRESS_DEPRECATED (defined before the header, as OpenSSL documents it)
# silences that for this translation unit only. MD5 here is a bucketing hash, not a security one.

cdef extern from *:
    """
    #ifdef TC_HAVE_LIBCRYPTO
    #ifndef OPENSSL_SUPPRESS_DEPRECATED
    #define OPENSSL_SUPPRESS_DEPRECATED 1
    #endif
    #include <openssl/md5.h>
    #define TC_MD5_AVAILABLE 1
    static inline void tc_md5(const uint8_t* p, size_t n, uint8_t* out) {
        MD5_CTX c;
        MD5_Init(&c);
        MD5_Update(&c, p, n);
        MD5_Final(out, &c);
    }
    #else
    #define TC_MD5_AVAILABLE 0
    static inline void tc_md5(const uint8_t* p, size_t n, uint8_t* out) { (void)p; (void)n; memset(out, 0, 16); }
    #endif
    """
    int TC_MD5_AVAILABLE
    void tc_md5(const uint8_t* p, size_t n, uint8_t* out) noexcept nogil

#: md5_keys computes digests (libcrypto was linked); False: it answers UNSUPPORTED
MD5_KEYS = bool(TC_MD5_AVAILABLE)

cdef enum:
    ST_UNSUPPORTED = 5     # md5_keys: built without libcrypto
    MD5_NOGIL_RECORDS = 32  # sections of at least this many records are hashed without the GIL

UNSUPPORTED = ST_UNSUPPORTED

# record offset deltas are int32; range bounds beyond this are clipped to it (same answer)
cdef object _DELTA_CLIP = 1 << 33


cdef int _md5_core(const uint8_t* p, Py_ssize_t end, Py_ssize_t count, int64_t lo, int64_t hi,
                   uint8_t* out, int32_t* dead, Py_ssize_t* n_out, Py_ssize_t* n_dead) noexcept nogil:
    """Walk ``count`` records (``_next_key_offset``: iter_key_offsets' checks), writing the MD5
    of each keyed record whose offset delta is in ``[lo, hi)`` to ``out`` and the indexes (in
    ``out``) of those without a value to ``dead``. ST_OK or ST_CORRUPT."""
    cdef Py_ssize_t pos = 0, i, n = 0, t = 0
    cdef KeySpan r
    cdef uint8_t dummy = 0
    for i in range(count):
        if _next_key_offset(p, &pos, end, 0, &r) < 0:
            return ST_CORRUPT
        if r.key_len >= 0 and lo <= r.offset < hi:
            tc_md5(p + r.key_pos if r.key_len else &dummy, <size_t>r.key_len, out + 16 * n)
            if not r.has_value:
                dead[t] = <int32_t>n
                t += 1
            n += 1
    if pos != end:
        return ST_CORRUPT
    n_out[0] = n
    n_dead[0] = t
    return ST_OK


def md5_keys(const uint8_t[::1] data, Py_ssize_t count, base_offset, start, stop):
    """The MD5 digest of every keyed record's key with an offset in ``[start, stop)``, in record
    order, over one batch's (decompressed) records section.

    Returns ``(status, digests, tombstones)``: ``digests`` the 16-byte digests concatenated,
    ``tombstones`` those of the records among them without a value. Every record of the section
    is checked as ``decode.iter_key_offsets`` checks it, in range or not; status CORRUPT (and
    nothing else) where it would raise, so the caller runs the reference to raise its error.
    UNSUPPORTED when the module was built without libcrypto. ``base_offset``, ``start`` and
    ``stop`` are Python ints of any size (the comparison is made on offset deltas).
    """
    cdef Py_ssize_t end = data.shape[0], n = 0, t = 0, i
    cdef int st
    cdef int64_t lo, hi
    if not TC_MD5_AVAILABLE:
        return ST_UNSUPPORTED, b"", b""
    if count <= 0:  # no record to read: the reference accepts only an empty section
        return (ST_OK if end == 0 else ST_CORRUPT), b"", b""
    if count > end // 7:  # every record takes >= 7 bytes: the reference runs past the end
        return ST_CORRUPT, b"", b""
    lo = max(min(start - base_offset, _DELTA_CLIP), -_DELTA_CLIP)
    hi = max(min(stop - base_offset, _DELTA_CLIP), -_DELTA_CLIP)
    cdef const uint8_t* p = &data[0]
    cdef uint8_t* to
    out = PyBytes_FromStringAndSize(NULL, 16 * count)
    cdef uint8_t* o = <uint8_t*>PyBytes_AS_STRING(out)
    cdef int32_t* dead = <int32_t*>malloc(count * sizeof(int32_t))
    if dead == NULL:
        raise MemoryError()
    try:
        if count >= MD5_NOGIL_RECORDS:
            with nogil:
                st = _md5_core(p, end, count, lo, hi, o, dead, &n, &t)
        else:
            st = _md5_core(p, end, count, lo, hi, o, dead, &n, &t)
        if st != ST_OK:
            return st, b"", b""
        tombs = PyBytes_FromStringAndSize(NULL, 16 * t)
        to = <uint8_t*>PyBytes_AS_STRING(tombs)
        for i in range(t):
            memcpy(to + 16 * i, o + 16 * dead[i], 16)
    finally:
        free(dead)
    return ST_OK, (out if n == count else out[:16 * n]), tombs
