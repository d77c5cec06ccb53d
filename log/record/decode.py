"""Decoding the records section of a v2 batch (Kafka's ``DefaultRecord``), the hot loops.

    length          varint   size of everything below
    attributes      int8     unused (0)
    timestampDelta  varlong  timestamp - batch baseTimestamp
    offsetDelta     varint   offset - batch baseOffset
    keyLength       varint   -1 = null key
    key             bytes
    valueLength     varint   -1 = null value (tombstone)
    value           bytes
    headersCount    varint
    headers         (keyLength varint, UTF-8 key, valueLength varint (-1 null), value) each

These loops run once per record of every segment the cleaner reads, so varint decoding is
inlined for one- and two-byte values (lengths up to 8191, the common case) and falls back to
:mod:`log.record.varint` beyond that. ``data`` is always ``bytes`` so key/value slices are
``bytes`` without a further copy. Truncated input shows up as IndexError inside the loop and
is turned into CorruptRecordError once, outside it.
"""

from __future__ import annotations

from collections.abc import Iterator

from log.errors import CorruptRecordError
from log.record.varint import decode_varint, decode_varlong

INT32_MAX = (1 << 31) - 1
#: the smallest record body after its length varint: attributes, timestampDelta, offsetDelta,
#: keyLength, valueLength, headersCount
MIN_RECORD_BODY = 6

RecordFields = tuple[int, int, bytes | None, bytes | None, tuple[tuple[str, bytes | None], ...], int]


def iter_record_fields(
    data: bytes,
    count: int,
    base_offset: int,
    base_timestamp: int,
    base_sequence: int,
    log_append_time: int | None,
) -> Iterator[RecordFields]:
    """Yield ``(offset, timestamp, key, value, headers, sequence)`` for ``count`` records."""
    end = len(data)
    pos = 0
    rec_index = 0
    try:
        for rec_index in range(count):  # noqa: B007 - rec_index is read in the except clauses
            z = data[pos]
            if z < 0x80:
                length = (z >> 1) ^ -(z & 1)
                pos += 1
            elif data[pos + 1] < 0x80:
                z = (z & 0x7F) | (data[pos + 1] << 7)
                length = (z >> 1) ^ -(z & 1)
                pos += 2
            else:
                length, pos = decode_varint(data, pos)
            rec_end = pos + length
            if length < MIN_RECORD_BODY or rec_end > end:
                raise CorruptRecordError(f"invalid record size {length}")
            pos += 1  # attributes: unused by magic 2
            z = data[pos]
            if z < 0x80:
                ts_delta = (z >> 1) ^ -(z & 1)
                pos += 1
            elif data[pos + 1] < 0x80:
                z = (z & 0x7F) | (data[pos + 1] << 7)
                ts_delta = (z >> 1) ^ -(z & 1)
                pos += 2
            else:
                ts_delta, pos = decode_varlong(data, pos)
            z = data[pos]
            if z < 0x80:
                offset_delta = (z >> 1) ^ -(z & 1)
                pos += 1
            elif data[pos + 1] < 0x80:
                z = (z & 0x7F) | (data[pos + 1] << 7)
                offset_delta = (z >> 1) ^ -(z & 1)
                pos += 2
            else:
                offset_delta, pos = decode_varint(data, pos)
            z = data[pos]
            if z < 0x80:
                klen = (z >> 1) ^ -(z & 1)
                pos += 1
            elif data[pos + 1] < 0x80:
                z = (z & 0x7F) | (data[pos + 1] << 7)
                klen = (z >> 1) ^ -(z & 1)
                pos += 2
            else:
                klen, pos = decode_varint(data, pos)
            if klen >= 0:
                if pos + klen > rec_end:
                    raise CorruptRecordError("record key runs past the record")
                key = data[pos : pos + klen]
                pos += klen
            elif klen == -1:
                key = None
            else:
                raise CorruptRecordError(f"invalid key size {klen}")
            z = data[pos]
            if z < 0x80:
                vlen = (z >> 1) ^ -(z & 1)
                pos += 1
            elif data[pos + 1] < 0x80:
                z = (z & 0x7F) | (data[pos + 1] << 7)
                vlen = (z >> 1) ^ -(z & 1)
                pos += 2
            else:
                vlen, pos = decode_varint(data, pos)
            if vlen >= 0:
                if pos + vlen > rec_end:
                    raise CorruptRecordError("record value runs past the record")
                value = data[pos : pos + vlen]
                pos += vlen
            elif vlen == -1:
                value = None
            else:
                raise CorruptRecordError(f"invalid value size {vlen}")
            if data[pos] == 0:
                headers: tuple[tuple[str, bytes | None], ...] = ()
                pos += 1
            else:
                headers, pos = _read_headers(data, pos, rec_end)
            if pos != rec_end:
                raise CorruptRecordError(
                    f"invalid record size: expected {length} bytes in the record payload,"
                    f" read {length + pos - rec_end}"
                )
            if base_sequence < 0:
                seq = -1
            elif base_sequence > INT32_MAX - offset_delta:
                seq = offset_delta - (INT32_MAX - base_sequence) - 1
            else:
                seq = base_sequence + offset_delta
            yield (
                base_offset + offset_delta,
                base_timestamp + ts_delta if log_append_time is None else log_append_time,
                key,
                value,
                headers,
                seq,
            )
    except IndexError:
        raise CorruptRecordError(
            f"record {rec_index} of batch at base offset {base_offset} is truncated"
        ) from None
    except CorruptRecordError as e:
        # positions inside the (decompressed) records section mean nothing to callers
        raise CorruptRecordError(
            f"{e.args[0]} (record {rec_index} of batch at base offset {base_offset})"
        ) from e
    if pos != end:
        raise CorruptRecordError(
            f"batch at base offset {base_offset} has {end - pos} bytes after its {count} records"
        )


def iter_key_offsets(data: bytes, count: int, base_offset: int) -> Iterator[tuple[int, bytes | None, bool]]:
    """Yield ``(offset, key, has_value)`` for ``count`` records; timestamps, values and headers
    are skipped without being decoded."""
    end = len(data)
    pos = 0
    rec_index = 0
    try:
        for rec_index in range(count):  # noqa: B007 - rec_index is read in the except clauses
            z = data[pos]
            if z < 0x80:
                length = (z >> 1) ^ -(z & 1)
                pos += 1
            elif data[pos + 1] < 0x80:
                z = (z & 0x7F) | (data[pos + 1] << 7)
                length = (z >> 1) ^ -(z & 1)
                pos += 2
            else:
                length, pos = decode_varint(data, pos)
            rec_end = pos + length
            if length < MIN_RECORD_BODY or rec_end > end:
                raise CorruptRecordError(f"invalid record size {length}")
            # skip attributes, then the timestampDelta varlong's bytes
            pos += 1
            while data[pos] >= 0x80:
                pos += 1
            pos += 1
            z = data[pos]
            if z < 0x80:
                offset_delta = (z >> 1) ^ -(z & 1)
                pos += 1
            elif data[pos + 1] < 0x80:
                z = (z & 0x7F) | (data[pos + 1] << 7)
                offset_delta = (z >> 1) ^ -(z & 1)
                pos += 2
            else:
                offset_delta, pos = decode_varint(data, pos)
            z = data[pos]
            if z < 0x80:
                klen = (z >> 1) ^ -(z & 1)
                pos += 1
            elif data[pos + 1] < 0x80:
                z = (z & 0x7F) | (data[pos + 1] << 7)
                klen = (z >> 1) ^ -(z & 1)
                pos += 2
            else:
                klen, pos = decode_varint(data, pos)
            if klen >= 0:
                key = data[pos : pos + klen]
                pos += klen
            elif klen == -1:
                key = None
            else:
                raise CorruptRecordError(f"invalid key size {klen}")
            if pos >= rec_end:
                raise CorruptRecordError("record key runs past the record")
            # valueLength: only null-or-not matters, and -1 zigzag-encodes as the single byte 0x01
            yield base_offset + offset_delta, key, data[pos] != 1
            pos = rec_end
    except IndexError:
        raise CorruptRecordError(
            f"record {rec_index} of batch at base offset {base_offset} is truncated"
        ) from None
    except CorruptRecordError as e:
        raise CorruptRecordError(
            f"{e.args[0]} (record {rec_index} of batch at base offset {base_offset})"
        ) from e
    if pos != end:
        raise CorruptRecordError(
            f"batch at base offset {base_offset} has {end - pos} bytes after its {count} records"
        )


def _read_headers(data: bytes, pos: int, rec_end: int) -> tuple[tuple[tuple[str, bytes | None], ...], int]:
    n, pos = decode_varint(data, pos)
    if n < 0:
        raise CorruptRecordError(f"invalid negative header count {n}")
    if n > rec_end - pos:
        raise CorruptRecordError(f"header count {n} exceeds the record's remaining bytes")
    headers = []
    for _ in range(n):
        hklen, pos = decode_varint(data, pos)
        if hklen < 0:
            raise CorruptRecordError(f"invalid negative header key size {hklen}")
        if pos + hklen > rec_end:
            raise CorruptRecordError("header key runs past the record")
        try:
            hkey = data[pos : pos + hklen].decode("utf-8")
        except UnicodeDecodeError as e:
            raise CorruptRecordError(f"header key is not UTF-8: {e}") from None
        pos += hklen
        hvlen, pos = decode_varint(data, pos)
        if hvlen == -1:
            hval = None
        elif hvlen < 0:
            raise CorruptRecordError(f"invalid header value size {hvlen}")
        else:
            if pos + hvlen > rec_end:
                raise CorruptRecordError("header value runs past the record")
            hval = data[pos : pos + hvlen]
            pos += hvlen
        headers.append((hkey, hval))
    return tuple(headers), pos
