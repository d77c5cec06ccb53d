"""Writing v2 record batches: the builder, control (transaction marker) batches, the empty
header the cleaner keeps for emptied batches, and in-place stamping on the append path.

The layout is the table in ``log/record/batch.py`` (Kafka's ``DefaultRecordBatch``). Two rules
the writers here follow from it:

* the CRC covers bytes [21, end), so baseOffset and partitionLeaderEpoch (bytes 0-16) can be
  rewritten in place without recomputing it, while attributes and maxTimestamp cannot;
* with the delete-horizon bit (6) set, baseTimestamp holds the horizon and every record's
  timestampDelta is relative to it (KIP-534).
"""

from __future__ import annotations

import struct
from collections.abc import Iterable

from log.errors import InvalidRequestError
from log.record.batch import (
    ATTRIBUTES_OFFSET,
    BASE_OFFSET_OFFSET,
    CONTROL_FLAG_MASK,
    CRC_OFFSET,
    DELETE_HORIZON_FLAG_MASK,
    HEADER,
    LENGTH_OFFSET,
    LOG_OVERHEAD,
    MAGIC_VALUE_V2,
    MAX_TIMESTAMP_OFFSET,
    NO_TIMESTAMP,
    PARTITION_LEADER_EPOCH_OFFSET,
    RECORD_BATCH_OVERHEAD,
    TIMESTAMP_TYPE_MASK,
    TRANSACTIONAL_FLAG_MASK,
    RecordBatch,
)
from log.record.compression import CompressionType, compress
from log.record.control import ControlRecordType, encode_end_txn_marker_value
from log.record.crc32c import crc32c
from log.record.kernels import kernels
from log.record.varint import encode_varint
from log.types import TimestampType

_INT64 = struct.Struct(">q")
_INT32 = struct.Struct(">i")
_UINT32 = struct.Struct(">I")
_INT16 = struct.Struct(">h")
_MAX_OFFSET_DELTA = (1 << 31) - 1

# Encoded varints of -8192..8191 (the one- and two-byte ones), indexed by value + 8192: nearly
# every delta and length in a record, looked up instead of encoded.
_TABLE_BIAS = 8192
_VARINT_TABLE = tuple(encode_varint(v) for v in range(-_TABLE_BIAS, _TABLE_BIAS))
_NULL_LENGTH = encode_varint(-1)


def _encode_headers(headers: Iterable[tuple[str, bytes | None]]) -> bytes:
    headers = tuple(headers)
    parts = [encode_varint(len(headers))]
    for hkey, hval in headers:
        hk = hkey.encode("utf-8")
        parts.append(encode_varint(len(hk)))
        parts.append(hk)
        if hval is None:
            parts.append(_NULL_LENGTH)
        else:
            parts.append(encode_varint(len(hval)))
            parts.append(bytes(hval))
    return b"".join(parts)


def _write_header_and_crc(
    out: bytearray,
    *,
    base_offset: int,
    partition_leader_epoch: int,
    attributes: int,
    last_offset_delta: int,
    base_timestamp: int,
    max_timestamp: int,
    producer_id: int,
    producer_epoch: int,
    base_sequence: int,
    records_count: int,
) -> bytes:
    HEADER.pack_into(
        out,
        0,
        base_offset,
        len(out) - LOG_OVERHEAD,
        partition_leader_epoch,
        MAGIC_VALUE_V2,
        0,
        attributes,
        last_offset_delta,
        base_timestamp,
        max_timestamp,
        producer_id,
        producer_epoch,
        base_sequence,
        records_count,
    )
    _UINT32.pack_into(out, CRC_OFFSET, crc32c(memoryview(out)[ATTRIBUTES_OFFSET:]))
    return bytes(out)


class RecordBatchBuilder:
    """Accumulate records and write one v2 batch.

    Offsets are absolute and strictly increasing (gaps are allowed: the cleaner keeps the
    offsets of retained records). Not thread-safe.
    """

    __slots__ = (
        "base_offset",
        "compression",
        "compression_level",
        "timestamp_type",
        "producer_id",
        "producer_epoch",
        "base_sequence",
        "is_transactional",
        "is_control",
        "partition_leader_epoch",
        "delete_horizon_ms",
        "log_append_time_ms",
        "_parts",
        "_body_size",
        "_num_records",
        "_last_offset",
        "_base_timestamp",
        "_max_timestamp",
    )

    def __init__(
        self,
        base_offset: int,
        *,
        compression: CompressionType = CompressionType.NONE,
        timestamp_type: TimestampType = TimestampType.CREATE_TIME,
        producer_id: int = -1,
        producer_epoch: int = -1,
        base_sequence: int = -1,
        is_transactional: bool = False,
        is_control: bool = False,
        partition_leader_epoch: int = -1,
        delete_horizon_ms: int | None = None,
        log_append_time_ms: int | None = None,
        compression_level: int | None = None,
    ) -> None:
        if base_offset < 0:
            raise InvalidRequestError(f"invalid base offset {base_offset}")
        if timestamp_type == TimestampType.LOG_APPEND_TIME and log_append_time_ms is None:
            raise InvalidRequestError("a LOG_APPEND_TIME batch needs log_append_time_ms")
        if is_transactional and producer_id < 0:
            raise InvalidRequestError("a transactional batch needs a producer id")
        self.base_offset = base_offset
        self.compression = CompressionType(compression)
        self.compression_level = compression_level
        self.timestamp_type = TimestampType(timestamp_type)
        self.producer_id = producer_id
        self.producer_epoch = producer_epoch
        self.base_sequence = base_sequence
        self.is_transactional = is_transactional
        self.is_control = is_control
        self.partition_leader_epoch = partition_leader_epoch
        self.delete_horizon_ms = delete_horizon_ms
        self.log_append_time_ms = log_append_time_ms
        self._parts: list[bytes] = []
        self._body_size = 0
        self._num_records = 0
        self._last_offset = -1
        self._base_timestamp: int | None = delete_horizon_ms
        self._max_timestamp = NO_TIMESTAMP

    @property
    def num_records(self) -> int:
        return self._num_records

    @property
    def estimated_size(self) -> int:
        """Uncompressed size of the batch so far (an upper bound for compressed batches, mostly)."""
        return RECORD_BATCH_OVERHEAD + self._body_size

    def append(
        self,
        offset: int,
        timestamp: int,
        key: bytes | bytearray | memoryview | None,
        value: bytes | bytearray | memoryview | None,
        headers: Iterable[tuple[str, bytes | None]] = (),
    ) -> None:
        if offset <= self._last_offset:
            raise InvalidRequestError(
                f"offset {offset} is not above the last appended offset {self._last_offset}"
            )
        delta = offset - self.base_offset
        if not 0 <= delta <= _MAX_OFFSET_DELTA:
            raise InvalidRequestError(f"offset {offset} is out of range for base offset {self.base_offset}")
        if timestamp < NO_TIMESTAMP:
            # Kafka's MemoryRecordsBuilder rule; it also keeps maxTimestamp's -1 start value right
            raise InvalidRequestError(f"invalid negative timestamp {timestamp}")
        base_ts = self._base_timestamp
        if base_ts is None:
            base_ts = self._base_timestamp = timestamp
        tab = _VARINT_TABLE
        enc = encode_varint
        ts_delta = timestamp - base_ts
        tsb = tab[ts_delta + _TABLE_BIAS] if -_TABLE_BIAS <= ts_delta < _TABLE_BIAS else enc(ts_delta)
        odb = tab[delta + _TABLE_BIAS] if delta < _TABLE_BIAS else enc(delta)
        if key is None:
            klb = _NULL_LENGTH
            key = b""
        else:
            n = len(key)
            klb = tab[n + _TABLE_BIAS] if n < _TABLE_BIAS else enc(n)
        if value is None:
            vlb = _NULL_LENGTH
            value = b""
        else:
            n = len(value)
            vlb = tab[n + _TABLE_BIAS] if n < _TABLE_BIAS else enc(n)
        hb = _encode_headers(headers) if headers else b"\x00"
        body = b"".join((b"\x00", tsb, odb, klb, key, vlb, value, hb))
        n = len(body)
        prefix = tab[n + _TABLE_BIAS] if n < _TABLE_BIAS else enc(n)
        self._parts += (prefix, body)
        self._body_size += len(prefix) + n
        self._num_records += 1
        self._last_offset = offset
        if timestamp > self._max_timestamp:
            self._max_timestamp = timestamp

    def append_new_records(self, keys: list[bytes | None], values: list[bytes | None],
                           timestamps: list[int]) -> bool:
        """Append records at offsets ``base_offset + 0..n-1`` with no headers to an empty
        builder, as n calls of :meth:`append` would, with the compiled kernels encoding them
        in one C loop (a producer's request). Returns False, changing nothing, where the
        kernels leave it to :meth:`append` (pure-Python kernels, anything unusual)."""
        if self._num_records or not keys:
            return False
        base_ts = timestamps[0] if self._base_timestamp is None else self._base_timestamp
        out = kernels().encode_records(keys, values, timestamps, base_ts)
        if out is None:
            return False
        records, max_ts = out
        self._base_timestamp = base_ts
        self._parts.append(records)
        self._body_size += len(records)
        self._num_records = len(keys)
        self._last_offset = self.base_offset + len(keys) - 1
        if max_ts > self._max_timestamp:
            self._max_timestamp = max_ts
        return True

    def build(self, *, last_offset_delta: int | None = None) -> bytes:
        """Write the batch. ``last_offset_delta`` keeps an original batch's lastOffset when the
        cleaner dropped its last record; it defaults to the last appended record's delta."""
        if self._num_records == 0:
            raise InvalidRequestError("cannot build a batch with no records (use build_empty_header)")
        own_last = self._last_offset - self.base_offset
        if last_offset_delta is None:
            last_offset_delta = own_last
        elif not own_last <= last_offset_delta <= _MAX_OFFSET_DELTA:
            raise InvalidRequestError(
                f"lastOffsetDelta {last_offset_delta} is below the last record's delta {own_last}"
            )
        records = b"".join(self._parts)
        if self.compression != CompressionType.NONE:
            records = compress(self.compression, records, self.compression_level)
        out = bytearray(RECORD_BATCH_OVERHEAD)
        out += records
        attributes = int(self.compression)
        if self.timestamp_type == TimestampType.LOG_APPEND_TIME:
            attributes |= TIMESTAMP_TYPE_MASK
            assert self.log_append_time_ms is not None
            max_timestamp = self.log_append_time_ms
        else:
            max_timestamp = self._max_timestamp
        if self.is_transactional:
            attributes |= TRANSACTIONAL_FLAG_MASK
        if self.is_control:
            attributes |= CONTROL_FLAG_MASK
        if self.delete_horizon_ms is not None:
            attributes |= DELETE_HORIZON_FLAG_MASK
        assert self._base_timestamp is not None
        return _write_header_and_crc(
            out,
            base_offset=self.base_offset,
            partition_leader_epoch=self.partition_leader_epoch,
            attributes=attributes,
            last_offset_delta=last_offset_delta,
            base_timestamp=self._base_timestamp,
            max_timestamp=max_timestamp,
            producer_id=self.producer_id,
            producer_epoch=self.producer_epoch,
            base_sequence=self.base_sequence,
            records_count=self._num_records,
        )


def build_control_batch(
    *,
    base_offset: int,
    timestamp: int,
    producer_id: int,
    producer_epoch: int,
    control_type: ControlRecordType,
    coordinator_epoch: int = 0,
    partition_leader_epoch: int = -1,
) -> bytes:
    """A one-record control batch; for ABORT/COMMIT the 78-byte transaction marker (attributes 0x30)."""
    control_type = ControlRecordType(control_type)
    value = encode_end_txn_marker_value(coordinator_epoch) if control_type.is_transaction_marker else None
    builder = RecordBatchBuilder(
        base_offset,
        producer_id=producer_id,
        producer_epoch=producer_epoch,
        is_transactional=control_type.is_transaction_marker,
        is_control=True,
        partition_leader_epoch=partition_leader_epoch,
    )
    builder.append(base_offset, timestamp, control_type.key_bytes(), value)
    return builder.build()


def build_empty_header(batch: RecordBatch) -> bytes:
    """Kafka's ``writeEmptyHeader``: the 61-byte batch RETAIN_EMPTY keeps when every record of
    ``batch`` is gone. Keeps offsets, producer fields, leader epoch, transactional/control flags,
    timestamp type and maxTimestamp; clears compression and the delete horizon; baseTimestamp -1."""
    attributes = batch.attributes & (TIMESTAMP_TYPE_MASK | TRANSACTIONAL_FLAG_MASK | CONTROL_FLAG_MASK)
    return _write_header_and_crc(
        bytearray(RECORD_BATCH_OVERHEAD),
        base_offset=batch.base_offset,
        partition_leader_epoch=batch.partition_leader_epoch,
        attributes=attributes,
        last_offset_delta=batch.last_offset_delta,
        base_timestamp=NO_TIMESTAMP,
        max_timestamp=batch.max_timestamp,
        producer_id=batch.producer_id,
        producer_epoch=batch.producer_epoch,
        base_sequence=batch.base_sequence,
        records_count=0,
    )


def stamp_batch(
    buf: bytearray,
    position: int,
    *,
    base_offset: int,
    partition_leader_epoch: int,
    log_append_time_ms: int | None = None,
) -> None:
    """Assign a batch's base offset and leader epoch in place (the append path).

    Neither field is covered by the CRC. With ``log_append_time_ms`` the batch becomes
    LOG_APPEND_TIME with that maxTimestamp, and the CRC is recomputed.
    """
    _INT64.pack_into(buf, position + BASE_OFFSET_OFFSET, base_offset)
    _INT32.pack_into(buf, position + PARTITION_LEADER_EPOCH_OFFSET, partition_leader_epoch)
    if log_append_time_ms is None:
        return
    (length,) = _INT32.unpack_from(buf, position + LENGTH_OFFSET)
    end = position + LOG_OVERHEAD + length
    if end > len(buf):
        raise InvalidRequestError(f"batch at {position} runs past the buffer's {len(buf)} bytes")
    (attributes,) = _INT16.unpack_from(buf, position + ATTRIBUTES_OFFSET)
    _INT16.pack_into(buf, position + ATTRIBUTES_OFFSET, attributes | TIMESTAMP_TYPE_MASK)
    _INT64.pack_into(buf, position + MAX_TIMESTAMP_OFFSET, log_append_time_ms)
    with memoryview(buf) as mv:
        crc = crc32c(mv[position + ATTRIBUTES_OFFSET : end])
    _UINT32.pack_into(buf, position + CRC_OFFSET, crc)
