"""Record batch v2 (magic 2, Kafka's ``DefaultRecordBatch``): a read-only view over one batch.

All integers big-endian.

| offset | size | field                | notes                                                    |
|--------|------|----------------------|----------------------------------------------------------|
| 0      | 8    | baseOffset           | kept by compaction                                       |
| 8      | 4    | batchLength          | bytes after this field = total size - 12                 |
| 12     | 4    | partitionLeaderEpoch | -1 = none; not covered by the CRC                        |
| 16     | 1    | magic                | 2                                                        |
| 17     | 4    | crc (uint32)         | CRC-32C over bytes [21, end of batch)                    |
| 21     | 2    | attributes           | bits 0-2 codec, 3 timestamp type, 4 transactional,       |
|        |      |                      | 5 control, 6 has delete horizon                          |
| 23     | 4    | lastOffsetDelta      | lastOffset = baseOffset + lastOffsetDelta                |
| 27     | 8    | baseTimestamp        | first record's timestamp, or deleteHorizonMs (bit 6)     |
| 35     | 8    | maxTimestamp         | max record timestamp, or the LOG_APPEND_TIME             |
| 43     | 8    | producerId           | -1 = none                                                |
| 51     | 2    | producerEpoch        | -1 = none                                                |
| 53     | 4    | baseSequence         | -1 = none                                                |
| 57     | 4    | recordsCount         | 0 for an empty header                                    |
| 61     | ...  | records              | record bytes, or one compressed stream of them           |

Record (``DefaultRecord``): length varint, attributes int8, timestampDelta varlong, offsetDelta
varint, keyLength varint (-1 null), key, valueLength varint (-1 null = tombstone), value,
headersCount varint, then per header: keyLength varint, UTF-8 key, valueLength varint (-1 null), value.

The per-record decoding loops live in ``log/record/decode.py``.
"""

from __future__ import annotations

import struct
from collections.abc import Iterator
from dataclasses import dataclass

from log.errors import CorruptRecordError
from log.record.compression import CompressionType, decompress
from log.record.control import ControlRecordType
from log.record.crc32c import crc32c
from log.record.decode import iter_key_offsets as _iter_key_offsets
from log.record.decode import iter_record_fields as _iter_record_fields
from log.record.kernels import kernels
from log.types import TimestampType

BASE_OFFSET_OFFSET = 0
LENGTH_OFFSET = 8
PARTITION_LEADER_EPOCH_OFFSET = 12
MAGIC_OFFSET = 16
CRC_OFFSET = 17
ATTRIBUTES_OFFSET = 21
LAST_OFFSET_DELTA_OFFSET = 23
BASE_TIMESTAMP_OFFSET = 27
MAX_TIMESTAMP_OFFSET = 35
PRODUCER_ID_OFFSET = 43
PRODUCER_EPOCH_OFFSET = 51
BASE_SEQUENCE_OFFSET = 53
RECORDS_COUNT_OFFSET = 57
RECORDS_OFFSET = 61

LOG_OVERHEAD = 12  # baseOffset + batchLength
RECORD_BATCH_OVERHEAD = RECORDS_OFFSET
HEADER_SIZE_UP_TO_MAGIC = MAGIC_OFFSET + 1
MIN_BATCH_LENGTH = RECORD_BATCH_OVERHEAD - LOG_OVERHEAD  # 49

MAGIC_VALUE_V2 = 2
NO_PRODUCER_ID = -1
NO_PRODUCER_EPOCH = -1
NO_SEQUENCE = -1
NO_PARTITION_LEADER_EPOCH = -1
NO_TIMESTAMP = -1

COMPRESSION_CODEC_MASK = 0x07
TIMESTAMP_TYPE_MASK = 0x08
TRANSACTIONAL_FLAG_MASK = 0x10
CONTROL_FLAG_MASK = 0x20
DELETE_HORIZON_FLAG_MASK = 0x40

#: smallest possible record: length, attributes, timestampDelta, offsetDelta, keyLength,
#: valueLength, headersCount, one byte each
MIN_RECORD_SIZE = 7
INT32_MAX = (1 << 31) - 1

HEADER = struct.Struct(">qiibIhiqqqhii")
assert HEADER.size == RECORD_BATCH_OVERHEAD
_INT64 = struct.Struct(">q")
_INT32 = struct.Struct(">i")
_UINT32 = struct.Struct(">I")
LENGTH_MAGIC_STRUCT = struct.Struct(">i4xb")  # batchLength, skip leader epoch, magic


@dataclass(frozen=True, slots=True)
class Record:
    """One record of a batch, with its absolute offset and effective timestamp.

    No ``__post_init__`` checks: Records are made by the parser, a million at a time, from bytes
    it has already validated, and by tests.
    """

    offset: int
    timestamp: int
    key: bytes | None
    value: bytes | None
    headers: tuple[tuple[str, bytes | None], ...] = ()
    sequence: int = -1

    @property
    def has_key(self) -> bool:
        return self.key is not None

    @property
    def has_value(self) -> bool:
        return self.value is not None


_new_object = object.__new__
(_set_offset, _set_timestamp, _set_key, _set_value, _set_headers, _set_sequence) = (
    Record.__dict__[name].__set__ for name in ("offset", "timestamp", "key", "value", "headers", "sequence")
)


def _make_record(
    offset: int,
    timestamp: int,
    key: bytes | None,
    value: bytes | None,
    headers: tuple[tuple[str, bytes | None], ...],
    sequence: int,
) -> Record:
    """Record(...) at half the cost: the frozen dataclass __init__ goes through object.__setattr__
    per field, this writes the slots directly. Only for the parser, whose fields are final."""
    r = _new_object(Record)
    _set_offset(r, offset)
    _set_timestamp(r, timestamp)
    _set_key(r, key)
    _set_value(r, value)
    _set_headers(r, headers)
    _set_sequence(r, sequence)
    return r


#: for readers that decode fields first and make Records of only some (log/fetch.py)
make_record = _make_record


def _corrupt(message: str, source: str | None, position: int | None) -> CorruptRecordError:
    return CorruptRecordError(message, source=source, position=position)


class RecordBatch:
    """A read-only view over exactly one v2 batch (``len(buf) == 12 + batchLength``).

    The header is unpacked once; records are decoded lazily by :meth:`records` and
    :meth:`iter_key_offsets`. The view keeps a reference to ``buf``: do not mutate it while the
    batch is in use.
    """

    __slots__ = (
        "_buf",
        "base_offset",
        "batch_length",
        "partition_leader_epoch",
        "magic",
        "crc",
        "attributes",
        "last_offset_delta",
        "base_timestamp",
        "max_timestamp",
        "producer_id",
        "producer_epoch",
        "base_sequence",
        "records_count",
    )

    def __init__(self, buf: bytes | bytearray | memoryview) -> None:
        mv = buf if type(buf) is memoryview else memoryview(buf)
        if len(mv) < RECORD_BATCH_OVERHEAD:
            raise CorruptRecordError(
                f"record batch of {len(mv)} bytes is smaller than the {RECORD_BATCH_OVERHEAD}-byte header"
            )
        self._buf = mv
        (
            self.base_offset,
            self.batch_length,
            self.partition_leader_epoch,
            self.magic,
            self.crc,
            self.attributes,
            self.last_offset_delta,
            self.base_timestamp,
            self.max_timestamp,
            self.producer_id,
            self.producer_epoch,
            self.base_sequence,
            self.records_count,
        ) = HEADER.unpack_from(mv, 0)

    # ---- header-derived properties -------------------------------------------------------

    @property
    def last_offset(self) -> int:
        return self.base_offset + self.last_offset_delta

    @property
    def next_offset(self) -> int:
        return self.base_offset + self.last_offset_delta + 1

    @property
    def size_in_bytes(self) -> int:
        return len(self._buf)

    @property
    def raw(self) -> memoryview:
        return self._buf

    @property
    def compression(self) -> CompressionType:
        return CompressionType.from_id(self.attributes & COMPRESSION_CODEC_MASK)

    @property
    def timestamp_type(self) -> TimestampType:
        if self.attributes & TIMESTAMP_TYPE_MASK:
            return TimestampType.LOG_APPEND_TIME
        return TimestampType.CREATE_TIME

    @property
    def is_transactional(self) -> bool:
        return bool(self.attributes & TRANSACTIONAL_FLAG_MASK)

    @property
    def is_control(self) -> bool:
        return bool(self.attributes & CONTROL_FLAG_MASK)

    @property
    def has_delete_horizon(self) -> bool:
        return bool(self.attributes & DELETE_HORIZON_FLAG_MASK)

    @property
    def delete_horizon_ms(self) -> int | None:
        return self.base_timestamp if self.attributes & DELETE_HORIZON_FLAG_MASK else None

    @property
    def has_producer_id(self) -> bool:
        return self.producer_id >= 0

    @property
    def last_sequence(self) -> int:
        """baseSequence + lastOffsetDelta, wrapping past 2^31-1 to 0 (DefaultRecordBatch.incrementSequence)."""
        base = self.base_sequence
        if base == NO_SEQUENCE:
            return NO_SEQUENCE
        inc = self.last_offset_delta
        if base > INT32_MAX - inc:
            return inc - (INT32_MAX - base) - 1
        return base + inc

    @property
    def first_timestamp(self) -> int:
        """Timestamp of the first record.

        Without a delete horizon this is baseTimestamp, as the producer wrote it. With one,
        baseTimestamp holds the horizon, so the first record is decoded (Kafka 3.x dropped
        ``firstTimestamp()`` for this reason and readers use each record's timestamp).
        ``-1`` for a batch with no records.
        """
        if not self.attributes & DELETE_HORIZON_FLAG_MASK:
            return self.base_timestamp
        for record in self.records():
            return record.timestamp
        return NO_TIMESTAMP

    # ---- validation -----------------------------------------------------------------------

    def compute_checksum(self) -> int:
        return crc32c(self._buf[ATTRIBUTES_OFFSET:])

    def is_valid(self) -> bool:
        try:
            self.ensure_valid()
        except CorruptRecordError:
            return False
        return True

    def ensure_valid(self, source: str | None = None, position: int | None = None) -> None:
        """Raise CorruptRecordError (naming ``source`` and ``position``) unless the header is sound
        and the CRC matches. Records themselves are checked when they are decoded."""
        if self.magic != MAGIC_VALUE_V2:
            raise _corrupt(
                f"record batch has magic {self.magic}, expected {MAGIC_VALUE_V2}", source, position
            )
        if self.batch_length < MIN_BATCH_LENGTH:
            raise _corrupt(
                f"record batch length {self.batch_length} is smaller than the minimum {MIN_BATCH_LENGTH}",
                source,
                position,
            )
        if self.batch_length + LOG_OVERHEAD != len(self._buf):
            raise _corrupt(
                f"record batch length {self.batch_length} does not match its {len(self._buf)} bytes",
                source,
                position,
            )
        computed = self.compute_checksum()
        if computed != self.crc:
            raise _corrupt(
                f"record batch is corrupt (stored crc = {self.crc}, computed crc = {computed})",
                source,
                position,
            )
        count = self.records_count
        body = len(self._buf) - RECORDS_OFFSET
        if count < 0:
            raise _corrupt(f"record batch has a negative records count {count}", source, position)
        if self.attributes & COMPRESSION_CODEC_MASK == 0:
            if count * MIN_RECORD_SIZE > body or (count == 0 and body != 0):
                raise _corrupt(
                    f"record batch declares {count} records in {body} bytes of records", source, position
                )
        elif count == 0 and body != 0:
            raise _corrupt(
                f"record batch declares 0 records but has {body} compressed bytes", source, position
            )
        if count and self.last_offset_delta < count - 1:
            raise _corrupt(
                f"record batch declares {count} records but lastOffsetDelta {self.last_offset_delta}",
                source,
                position,
            )

    # ---- records --------------------------------------------------------------------------

    def _records_section(self) -> bytes:
        codec = self.attributes & COMPRESSION_CODEC_MASK
        if codec == 0:
            return self._buf[RECORDS_OFFSET:].tobytes()
        return decompress(CompressionType.from_id(codec), self._buf[RECORDS_OFFSET:])

    def iter_record_fields(
        self,
    ) -> Iterator[tuple[int, int, bytes | None, bytes | None, tuple[tuple[str, bytes | None], ...], int]]:
        """Like :meth:`records` but yields plain ``(offset, timestamp, key, value, headers, sequence)``
        tuples: for loops that copy records onward (the cleaner) and need no Record objects."""
        return _iter_record_fields(
            self._records_section(),
            self.records_count,
            self.base_offset,
            self.base_timestamp,
            self.base_sequence,
            self.max_timestamp if self.attributes & TIMESTAMP_TYPE_MASK else None,
        )

    def records(self) -> Iterator[Record]:
        """Decode every record (decompressing first); for LOG_APPEND_TIME each record's
        timestamp is maxTimestamp. Bad record bytes raise CorruptRecordError.

        Readers' path: the compiled kernels decode the whole section in one C loop when they
        can (records without headers); otherwise, and for anything malformed, the reference
        decoder runs and raises its own error."""
        make = _make_record
        for fields in self.reader_fields():
            yield make(*fields)

    def reader_fields(
        self,
    ) -> Iterator[tuple[int, int, bytes | None, bytes | None, tuple[tuple[str, bytes | None], ...], int]]:
        """:meth:`records` as the ``(offset, timestamp, key, value, headers, sequence)`` tuples
        a Record is made of (``_make_record(*fields)``), for a reader that makes Records of only
        some of them (a page starting inside the batch). The same decoding: the compiled
        kernels' list, else the reference decoder, lazily (it raises where the bytes are bad)."""
        codec = self.attributes & COMPRESSION_CODEC_MASK
        # uncompressed: the kernels read the batch's own bytes, no copy of the section
        section: bytes | memoryview = self._buf[RECORDS_OFFSET:] if codec == 0 else self._records_section()
        append_time = self.max_timestamp if self.attributes & TIMESTAMP_TYPE_MASK else None
        fast = kernels().decode_records(section, self.records_count, self.base_offset, self.base_timestamp,
                                        self.base_sequence, append_time)
        if fast is not None:
            return iter(fast)
        data = section if isinstance(section, bytes) else section.tobytes()
        return _iter_record_fields(data, self.records_count,
                                   self.base_offset, self.base_timestamp, self.base_sequence, append_time)

    def iter_key_offsets(self) -> Iterator[tuple[int, bytes | None, bool]]:
        """Yield ``(offset, key, has_value)`` per record: the cleaner's offset-map fast path.

        Skips timestamps, values and headers without decoding them.
        """
        return _iter_key_offsets(self._records_section(), self.records_count, self.base_offset)

    def control_type(self) -> ControlRecordType:
        """Type of a control batch, from its first record's key."""
        if not self.attributes & CONTROL_FLAG_MASK:
            raise CorruptRecordError(f"batch at base offset {self.base_offset} is not a control batch")
        for record in self.records():
            return ControlRecordType.parse(record.key)
        raise CorruptRecordError(f"control batch at base offset {self.base_offset} has no records")

    def __repr__(self) -> str:
        flags = []
        if self.is_transactional:
            flags.append("transactional")
        if self.is_control:
            flags.append("control")
        if self.has_delete_horizon:
            flags.append(f"deleteHorizonMs={self.base_timestamp}")
        codec = self.attributes & COMPRESSION_CODEC_MASK
        codec_name = CompressionType(codec).name_lower if codec <= 4 else str(codec)
        return (
            f"RecordBatch(baseOffset={self.base_offset}, lastOffset={self.last_offset},"
            f" count={self.records_count}, size={len(self._buf)}, magic={self.magic},"
            f" compression={codec_name}, timestampType={self.timestamp_type.name},"
            f" baseTimestamp={self.base_timestamp}, maxTimestamp={self.max_timestamp},"
            f" producerId={self.producer_id}, producerEpoch={self.producer_epoch},"
            f" baseSequence={self.base_sequence}, partitionLeaderEpoch={self.partition_leader_epoch},"
            f" crc={self.crc}{', ' if flags else ''}{', '.join(flags)})"
        )


def iter_batches(
    buf: bytes | bytearray | memoryview,
    start: int = 0,
    end: int | None = None,
    *,
    source: str | None = None,
    allow_truncated_tail: bool = False,
) -> Iterator[tuple[int, RecordBatch]]:
    """Walk consecutive batches in ``buf[start:end]``, yielding ``(position, batch)``.

    Checks each batch's length and magic, not its CRC (call ``ensure_valid`` for that). A batch
    running past ``end`` ends the walk silently when ``allow_truncated_tail`` (a torn tail the
    caller truncates), and raises CorruptRecordError otherwise.
    """
    mv = buf if type(buf) is memoryview else memoryview(buf)
    if end is None:
        end = len(mv)
    elif end > len(mv):
        raise ValueError(f"end {end} is past the buffer's {len(mv)} bytes")
    pos = start
    unpack = LENGTH_MAGIC_STRUCT.unpack_from
    while pos < end:
        if end - pos < HEADER_SIZE_UP_TO_MAGIC:
            if allow_truncated_tail:
                return
            raise _corrupt(f"truncated record batch header: {end - pos} bytes left", source, pos)
        length, magic = unpack(mv, pos + LENGTH_OFFSET)
        if length < MIN_BATCH_LENGTH:
            raise _corrupt(
                f"record batch length {length} is smaller than the minimum {MIN_BATCH_LENGTH}", source, pos
            )
        if magic != MAGIC_VALUE_V2:
            raise _corrupt(f"record batch has magic {magic}, expected {MAGIC_VALUE_V2}", source, pos)
        size = length + LOG_OVERHEAD
        if pos + size > end:
            if allow_truncated_tail:
                return
            raise _corrupt(
                f"truncated record batch: {size} bytes declared, {end - pos} available", source, pos
            )
        yield pos, RecordBatch(mv[pos : pos + size])
        pos += size
