"""Zigzag varints, as Kafka's ``ByteUtils`` writes them inside v2 records.

Encoding: zigzag (``(n << 1) ^ (n >> 31)`` for int32, ``>> 63`` for int64), then unsigned
LEB128: 7 bits per byte, least-significant group first, high bit = "more bytes follow".

    0 -> 00   -1 -> 01   1 -> 02   63 -> 7e   64 -> 80 01   300 -> d8 04   -282609 -> e1 bf 22

For values inside the int32 range the int32 and int64 encodings are the same bytes, so one
encoder serves both; the decoders differ only in how many bytes they accept (5 for a varint,
10 for a varlong), exactly like Kafka's readVarint/readVarlong.

The hot loops in ``batch.py`` and ``builder.py`` inline the one-byte case and fall back to these
functions for the rest.
"""

from __future__ import annotations

from log.errors import CorruptRecordError, InvalidRequestError

INT32_MIN = -(1 << 31)
INT32_MAX = (1 << 31) - 1
INT64_MIN = -(1 << 63)
INT64_MAX = (1 << 63) - 1

# One-byte encodings of -64..63, indexed by the zigzag value; the common case in records.
_ONE_BYTE = tuple(bytes((z,)) for z in range(128))


def encode_uvarint(z: int) -> bytes:
    """Unsigned LEB128 of ``z >= 0`` (Kafka's writeUnsignedVarint; the zigzag encoders' last step)."""
    if z < 0x80:
        return _ONE_BYTE[z]
    out = bytearray()
    while z >= 0x80:
        out.append((z & 0x7F) | 0x80)
        z >>= 7
    out.append(z)
    return bytes(out)


def encode_varint(n: int) -> bytes:
    """Zigzag-encode a signed integer of up to 64 bits (int32 values encode as Kafka's varint)."""
    if not INT64_MIN <= n <= INT64_MAX:
        raise InvalidRequestError(f"{n} does not fit a varlong (signed 64-bit)")
    return encode_uvarint(((n << 1) ^ (n >> 63)) & 0xFFFFFFFFFFFFFFFF)


def encode_varlong(n: int) -> bytes:
    """Same as :func:`encode_varint`; kept as a name for the int64 (timestamp delta) fields."""
    return encode_varint(n)


def size_of_varint(n: int) -> int:
    """Bytes :func:`encode_varint` would produce for ``n``."""
    z = ((n << 1) ^ (n >> 63)) & 0xFFFFFFFFFFFFFFFF
    size = 1
    while z >= 0x80:
        z >>= 7
        size += 1
    return size


def _decode(
    buf: bytes | bytearray | memoryview, pos: int, max_bytes: int, what: str, lo: int, hi: int
) -> tuple[int, int]:
    """The multi-byte case: at most ``max_bytes`` bytes, the value within ``lo..hi``."""
    start = pos
    z = 0
    shift = 0
    try:
        while True:
            b = buf[pos]
            pos += 1
            z |= (b & 0x7F) << shift
            if b < 0x80:
                break
            shift += 7
            if pos - start >= max_bytes:
                raise CorruptRecordError(f"{what} longer than {max_bytes} bytes", position=start)
    except IndexError:
        raise CorruptRecordError(f"truncated {what}", position=start) from None
    value = (z >> 1) ^ -(z & 1)
    if not lo <= value <= hi:
        raise CorruptRecordError(f"{what} out of int{hi.bit_length() + 1} range", position=start)
    return value, pos


def decode_varint(buf: bytes | bytearray | memoryview, pos: int = 0) -> tuple[int, int]:
    """Decode a zigzag varint (int32, at most 5 bytes) at ``pos``; return ``(value, new_pos)``."""
    b = buf[pos] if pos < len(buf) else 0x80
    if b < 0x80:
        return (b >> 1) ^ -(b & 1), pos + 1
    return _decode(buf, pos, 5, "varint", INT32_MIN, INT32_MAX)


def decode_varlong(buf: bytes | bytearray | memoryview, pos: int = 0) -> tuple[int, int]:
    """Decode a zigzag varlong (int64, at most 10 bytes) at ``pos``; return ``(value, new_pos)``."""
    b = buf[pos] if pos < len(buf) else 0x80
    if b < 0x80:
        return (b >> 1) ^ -(b & 1), pos + 1
    return _decode(buf, pos, 10, "varlong", INT64_MIN, INT64_MAX)
