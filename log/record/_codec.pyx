# cython: language_level=3, boundscheck=False, wraparound=False, cdivision=True, initializedcheck=False
"""Compiled record codec kernels of the format layer (the pure-Python twin is ``_codec_py.py``).

One C loop per batch where the Python reference (``decode.py``, ``builder.py``) takes a Python
step per record: ``_codec_records.pxi`` decodes a records section for readers, checks one a
producer sent and encodes one for producers, ``_codec_md5.pxi`` hashes every key of a section
for the persisted key indexes and bloom filters (with OpenSSL's libcrypto when setup.py found
it); both read the v2 layout
with ``_scan.pxi``, which the cleaner's kernels (``cleaner/kernels/_fastpath.pyx``) share.

Contract shared with ``_codec_py.py`` (see ``log/record/kernels.py``'s Protocol):

* ``decode_records`` / ``encode_records`` answer exactly what the reference would, or ``None``
  (the caller then runs the reference); the pure twins always answer ``None``.
  ``check_produced_records`` answers a produced batch's maximum timestamp when the reference
  would find every record well-formed and within the produce rules, else ``None`` likewise.
* ``md5_keys`` walks one records section as ``iter_key_offsets`` does (CORRUPT where it would
  raise) and returns the MD5 digests of the keys in an offset range; ``MD5_KEYS`` False (built
  without libcrypto) makes it answer UNSUPPORTED, and callers use the pure-Python twin.
"""

cimport cython
from libc.stdint cimport INT64_MAX, INT64_MIN, int32_t, int64_t, uint8_t, uint32_t, uint64_t
from libc.stdlib cimport free, malloc
from libc.string cimport memcpy, memset
from cpython.bytes cimport PyBytes_AS_STRING, PyBytes_FromStringAndSize

include "_scan.pxi"
include "_codec_records.pxi"
include "_codec_md5.pxi"
