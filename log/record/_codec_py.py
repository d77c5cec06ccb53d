"""Pure-Python twin of the compiled codec kernels (``_codec.pyx``): the fallback where no C
compiler was available when tiercompact was installed.

Same contract (see ``log/record/kernels.py``): :func:`decode_records`, :func:`check_produced_records` and
:func:`encode_records` always answer ``None``, so callers run the reference decoder and builder themselves;
:func:`md5_keys` hashes with hashlib's MD5 (the same digests as OpenSSL's).
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable

from log.errors import CorruptRecordError
from log.record.decode import iter_key_offsets

#: the fastest MD5 here: CPython's own (HACL*) beats OpenSSL's via hashlib per short key
MD5 = hashlib.md5
try:
    from _md5 import md5 as MD5  # type: ignore[import-not-found, no-redef]
except ImportError:  # pragma: no cover - other interpreters
    pass

OK = 0
CORRUPT = -1
UNSUPPORTED = 5
#: md5_keys computes digests (hashlib here; the compiled module's needs libcrypto)
MD5_KEYS = True


def md5_keys(data: bytes | memoryview, count: int, base_offset: int, start: int,
             stop: int) -> tuple[int, bytes, bytes]:
    """The MD5 digests of the keys of the records with offsets in ``[start, stop)``, and those
    of the ones without a value among them (the persisted stable hash of key indexes and bloom
    filters: hashlib's MD5, the same digests as OpenSSL's). CORRUPT where the reference raises."""
    try:
        digests, dead = md5_digests(
            iter_key_offsets(data if type(data) is bytes else bytes(data), count, base_offset), start, stop)
    except CorruptRecordError:
        return CORRUPT, b"", b""
    return OK, digests, dead


def md5_digests(key_offsets: Iterable[tuple[int, bytes | None, bool]], start: int, stop: int) -> tuple[bytes, bytes]:
    """The MD5 digests of the keys of ``(offset, key, has value)`` with offsets in ``[start, stop)``,
    and those of the ones without a value among them; what the walker raises propagates."""
    md5 = MD5
    out: list[bytes] = []
    dead: list[bytes] = []
    for off, key, has_value in key_offsets:
        if key is not None and start <= off < stop:
            d = md5(key).digest()
            out.append(d)
            if not has_value:
                dead.append(d)
    return b"".join(out), b"".join(dead)


def decode_records(data: bytes | memoryview, count: int, base_offset: int, base_timestamp: int, base_sequence: int,
                   log_append_time: int | None) -> list[tuple[int, int, bytes | None, bytes | None,
                                                           tuple[tuple[str, bytes | None], ...], int]] | None:
    """Always ``None``: the reference for decoding records is ``decode.iter_record_fields``
    itself, which the caller then runs."""
    return None


def check_produced_records(data: bytes | memoryview, count: int, base_timestamp: int, need_key: bool,
                           check_time: bool, now_ms: int, max_diff: int) -> int | None:
    """Always ``None``: the produce path then checks each record the reference decoder yields."""
    return None


def encode_records(keys: list[bytes | None], values: list[bytes | None], timestamps: list[int],
                   base_timestamp: int) -> tuple[bytes, int] | None:
    """Always ``None``: the reference encoder is RecordBatchBuilder.append itself."""
    return None
