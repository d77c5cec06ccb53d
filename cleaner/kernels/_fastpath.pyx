# cython: language_level=3, boundscheck=False, wraparound=False, cdivision=True, initializedcheck=False
"""Compiled kernels of the cleaner (the pure-Python reference is ``_fastpath_py.py``).

What is compiled, and why: the cleaner's cost is per record (decode the key, hash it, probe the
offset map, decide, copy), so one C loop per batch replaces millions of Python-level steps, and
for runs of plain batches one C loop per chunk of a segment replaces the per-batch Python
(header parse, checks, decisions, output). The decisions are :mod:`cleaner.retention`'s, which
the pure-Python kernels run as they are; these loops repeat them in C (the differential tests
hold both to the same bytes). The records are read with ``log/record/_scan.pxi``, the format
layer's C reading of the v2 layout; the key table is the offset map's storage, kept here so the
loops can inline the probe (``cleaner/offset_map.py`` wraps it as an :class:`OffsetMap`). The
source is split into include files, one module: ``_fastpath_table.pxi`` (SipHash, the key
table), ``_fastpath_records.pxi`` (map/retain per batch), ``_fastpath_rebuild.pxi`` (the
one-scan decide and write), ``_fastpath_batches.pxi`` (chunks of batches).

Contract shared with ``_fastpath_py.py`` (see ``cleaner/kernels/fastpath.py``'s Protocol):

* ``KeyTable(capacity)``: open addressing over 16-byte slots: a 12-byte key digest (96 bits
  compared) then the little-endian uint32 ``offset - base`` (base = the first offset put since
  :meth:`KeyTable.reset`). A digest of 12 zero bytes marks an empty slot (a computed all-zero
  digest gets its first byte set to 1). Probing is linear from the home slot
  ``(big-endian uint32 of digest bytes [0, 4)) * slots >> 32``, so a collision usually costs no
  second cache miss and the kernels' prefetch of the home slot covers it. The table starts
  small and doubles (rehashing) when a put would fill it past half, while it is under its
  logical capacity, so memory follows the keys (table memory of 64 KiB and more is kept for
  the next round's table: ``_fastpath_table.pxi``). (Kafka's ``positionOf`` jumps to an unrelated slot per attempt: a cache miss each.)
* Digest: SipHash-2-4 with 128-bit output, keyed by a secret chosen per round (``reset``'s
  16-byte seed), truncated to 96 bits. A producer who knows the algorithm but not the round's
  key cannot aim a second preimage at another key's record.
* ``map_records`` / ``retain_records`` mirror ``decode.iter_key_offsets``' checks exactly and
  return a negative status for anything it would reject, so the caller re-runs the pure code to
  raise the same error. ``rebuild_records`` re-encodes retained records as
  :class:`~log.record.builder.RecordBatchBuilder` would and returns ``None`` for whatever it does
  not handle (headers, non-canonical varints, anything the builder would refuse): the caller
  then uses the builder. So compiled output is byte-identical or not produced at all.
* ``frame_batches`` / ``map_batches`` / ``clean_batches`` work on a buffer of whole batches and
  stop at anything they do not handle, leaving that batch to the caller's per-batch code (the
  pure-Python twins frame for real and leave every batch to the caller).
"""

cimport cython
from libc.stdint cimport INT64_MAX, INT64_MIN, int32_t, int64_t, uint8_t, uint32_t, uint64_t
from libc.stdlib cimport calloc, free, malloc, realloc
from libc.string cimport memcpy, memset
from cpython.buffer cimport PyBUF_READ
from cpython.bytearray cimport PyByteArray_AS_STRING, PyByteArray_GET_SIZE, PyByteArray_Resize
from cpython.bytes cimport PyBytes_AS_STRING, PyBytes_FromStringAndSize
from cpython.memoryview cimport PyMemoryView_FromMemory

cdef extern from *:
    """
    #if defined(__GNUC__) || defined(__clang__)
    #define TC_PREFETCH(p) __builtin_prefetch((const void*)(p))
    #else
    #define TC_PREFETCH(p) ((void)0)
    #endif
    """
    void TC_PREFETCH(const void* p) noexcept nogil

cdef extern from *:
    """
    #include <string.h>
    #include <stdint.h>
    /* little-endian 64-bit and big-endian 32-bit loads as single loads where the compiler knows
       the byte order (byte by byte otherwise) */
    #if defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
    static inline uint64_t tc_le64(const uint8_t* p) { uint64_t v; memcpy(&v, p, 8); return v; }
    static inline uint32_t tc_be32(const uint8_t* p) { uint32_t v; memcpy(&v, p, 4); return __builtin_bswap32(v); }
    static inline void tc_put_le64(uint8_t* p, uint64_t v) { memcpy(p, &v, 8); }
    static inline void tc_put_le32(uint8_t* p, uint32_t v) { memcpy(p, &v, 4); }
    #else
    static inline uint64_t tc_le64(const uint8_t* p) {
        return (uint64_t)p[0] | ((uint64_t)p[1] << 8) | ((uint64_t)p[2] << 16) | ((uint64_t)p[3] << 24)
             | ((uint64_t)p[4] << 32) | ((uint64_t)p[5] << 40) | ((uint64_t)p[6] << 48) | ((uint64_t)p[7] << 56); }
    static inline uint32_t tc_be32(const uint8_t* p) {
        return ((uint32_t)p[0] << 24) | ((uint32_t)p[1] << 16) | ((uint32_t)p[2] << 8) | (uint32_t)p[3]; }
    static inline void tc_put_le64(uint8_t* p, uint64_t v) { for (int i = 0; i < 8; i++) p[i] = (uint8_t)(v >> (8 * i)); }
    static inline void tc_put_le32(uint8_t* p, uint32_t v) { for (int i = 0; i < 4; i++) p[i] = (uint8_t)(v >> (8 * i)); }
    #endif
    #if defined(__GNUC__) || defined(__clang__)
    #define TC_POPCOUNT64(x) ((int)__builtin_popcountll(x))
    #else
    static inline int TC_POPCOUNT64(uint64_t x) { int n = 0; while (x) { x &= x - 1; n++; } return n; }
    #endif
    """
    uint64_t tc_le64(const uint8_t* p) noexcept nogil
    uint32_t tc_be32(const uint8_t* p) noexcept nogil
    void tc_put_le64(uint8_t* p, uint64_t v) noexcept nogil
    void tc_put_le32(uint8_t* p, uint32_t v) noexcept nogil
    int TC_POPCOUNT64(uint64_t x) noexcept nogil

cdef extern from *:
    """
    #include <stdlib.h>
    #include <string.h>
    #if defined(__linux__)
    #include <sys/mman.h>
    #endif
    /* Zeroed memory for the key table. From 2 MiB on it is 2 MiB-aligned and, on Linux, asked
       to be backed by transparent huge pages: the table is probed at random, and with 4 KiB
       pages a probe can also miss the TLB (a page walk, slow under virtualization). */
    static void* tc_table_alloc(size_t n) {
        void* p = NULL;
        if (n < ((size_t)2 << 20)) return calloc(n, 1);
        if (posix_memalign(&p, (size_t)2 << 20, n) != 0) return NULL;
    #if defined(__linux__) && defined(MADV_HUGEPAGE)
        madvise(p, n, MADV_HUGEPAGE);
    #endif
        memset(p, 0, n);
        return p;
    }
    """
    void* tc_table_alloc(size_t n) noexcept nogil

cdef enum:
    SLOT = 16
    DIGEST = 12
    MIN_SLOTS = 1024

cdef int64_t MAX_DELTA = (<int64_t>1 << 32) - 1

include "log/record/_scan.pxi"

# the cleaner's status codes besides _scan.pxi's ST_OK and ST_CORRUPT (C constants inside, the
# same values as Python names)
cdef enum:
    ST_FULL = 1            # size reached max_entries before a put (Kafka refuses even an overwrite)
    ST_DELTA_OVERFLOW = 2  # offset - base does not fit 32 bits: the caller ends the round there
    ST_STOP = 3            # map_batches / clean_batches: the batch at pos is left to the caller
    ST_FLUSH = 4           # clean_batches: the pending output passed flush_at
    ST_FRAME_CHUNK = 0     # frame_batches: the chunk is complete (its batches reach chunk_bytes)
    ST_FRAME_MORE = 1      # frame_batches: the batch at pos is not all in the buffer
    ST_FRAME_BAD = 2       # frame_batches: the batch at pos fails a check (the reference raises)

FULL = ST_FULL
DELTA_OVERFLOW = ST_DELTA_OVERFLOW
STOP = ST_STOP
FLUSH = ST_FLUSH
FRAME_CHUNK = ST_FRAME_CHUNK
FRAME_MORE = ST_FRAME_MORE
FRAME_BAD = ST_FRAME_BAD

include "_fastpath_table.pxi"
include "_fastpath_records.pxi"
include "_fastpath_rebuild.pxi"
include "_fastpath_batches.pxi"
