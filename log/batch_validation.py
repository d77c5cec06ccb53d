"""Validation of a batch a Kafka producer sent, before it is appended (Kafka's LogValidator).

A produce request (v3+) carries exactly one record batch v2 per partition. It is checked as
Kafka's ``ProduceRequest.validateRecords`` and ``LogValidator`` check it, and handed back as a
``bytearray`` the log stamps in place (base offset, partition leader epoch: both outside the
CRC) and writes as it came, never re-encoded:

* framing, magic 2, CRC-32C (a mismatch is CorruptRecordError, Kafka's CORRUPT_MESSAGE),
  the records count against the bytes and ``lastOffsetDelta``, a known codec;
* no control batch from a client; a batch with a producer id carries a sequence (a batch
  without one may carry any: some clients write 0 there);
* ``max.message.bytes`` (RecordTooLargeError, MESSAGE_TOO_LARGE);
* per record, collected as Kafka's per-record errors (``(batch_index, message)``): offset
  deltas 0..n-1, a key on a compacted topic (InvalidRecordError, INVALID_RECORD), a CreateTime
  within ``message.timestamp.difference.max.ms`` of the broker clock (InvalidTimestampError,
  INVALID_TIMESTAMP);
* a CreateTime batch whose ``maxTimestamp`` is not its records' maximum gets the right one
  (the CRC is recomputed), as Kafka's LogValidator sets it.
"""

from __future__ import annotations

import struct

from log.config import LONG_MAX, LogConfig
from log.errors import CorruptRecordError, InvalidRecordError, InvalidTimestampError, RecordTooLargeError
from log.record import (
    ATTRIBUTES_OFFSET,
    COMPRESSION_CODEC_MASK,
    CRC_OFFSET,
    LOG_OVERHEAD,
    MAGIC_OFFSET,
    MAGIC_VALUE_V2,
    MAX_TIMESTAMP_OFFSET,
    RECORD_BATCH_OVERHEAD,
    RECORDS_OFFSET,
    RecordBatch,
    crc32c,
)
from log.record.compression import decompress_scratch
from log.record.decode import iter_record_fields
from log.record.kernels import kernels
from log.types import TimestampType

#: codec ids of record batch v2: none, gzip, snappy, lz4, zstd
KNOWN_CODECS = frozenset(range(5))
_INT32 = struct.Struct(">i")
_INT64 = struct.Struct(">q")
_UINT32 = struct.Struct(">I")


def validate_produce_batch(data: bytes | bytearray | memoryview, config: LogConfig, now_ms: int, *,
                           partition: str = "") -> bytearray:
    """The one batch of a partition's produce data, validated, as a ``bytearray`` to append.

    Raises CorruptRecordError (bad framing or CRC), RecordTooLargeError, InvalidTimestampError
    or InvalidRecordError (with ``record_errors`` where single records are at fault).
    """
    size = len(data)
    if size < RECORD_BATCH_OVERHEAD:
        if size > MAGIC_OFFSET and data[MAGIC_OFFSET] != MAGIC_VALUE_V2:
            raise InvalidRecordError(_magic_message(data[MAGIC_OFFSET]))
        raise CorruptRecordError(f"produce data of {size} bytes is shorter than a record batch header")
    magic = data[MAGIC_OFFSET]
    if magic != MAGIC_VALUE_V2:
        raise InvalidRecordError(_magic_message(magic))
    (length,) = _INT32.unpack_from(data, LOG_OVERHEAD - 4)
    if length + LOG_OVERHEAD < size:
        raise InvalidRecordError("produce requests (v3+) may carry exactly one record batch per partition")
    if length + LOG_OVERHEAD != size:
        raise CorruptRecordError(f"record batch length {length} does not match the {size} bytes sent")
    buf = data if type(data) is bytearray else bytearray(data)
    batch = RecordBatch(buf)
    batch.ensure_valid(source="produce request")
    max_bytes = config.max_message_bytes
    if size > max_bytes:
        raise RecordTooLargeError(f"the record batch of {size} bytes is larger than the topic's "
                                  f"max.message.bytes={max_bytes}")
    if batch.attributes & COMPRESSION_CODEC_MASK not in KNOWN_CODECS:
        raise CorruptRecordError(f"record batch has unknown compression codec {batch.attributes & 7}")
    if batch.is_control:
        raise InvalidRecordError("clients are not allowed to write control records")
    if batch.records_count != batch.last_offset_delta + 1:
        raise InvalidRecordError(f"record count {batch.records_count} does not match lastOffsetDelta "
                                 f"{batch.last_offset_delta} + 1")
    if batch.producer_id >= 0 and batch.base_sequence < 0:
        raise InvalidRecordError(f"invalid sequence number {batch.base_sequence} for producer {batch.producer_id}")
    _check_records(buf, batch, config, now_ms, partition)
    return buf


def _magic_message(magic: int) -> str:
    return f"produce requests (v3+) may only carry record batches of magic {MAGIC_VALUE_V2}, not {magic}"


def _check_records(buf: bytearray, batch: RecordBatch, config: LogConfig, now_ms: int, partition: str) -> None:
    """The per-record rules; fixes a CreateTime batch's maxTimestamp in place.

    The compiled kernel walks the records section without making a record (it answers the
    maximum timestamp when every record passes); where it cannot vouch for the batch (a broken
    rule, a malformed record, or no compiled kernels) the reference decoder walks it again and
    names what is wrong."""
    compacted = config.compact
    create_time = batch.timestamp_type is TimestampType.CREATE_TIME and \
        config.timestamp_type is TimestampType.CREATE_TIME
    before, after = config.timestamp_bounds if create_time else (LONG_MAX, LONG_MAX)
    # the kernel checks one window both ways: the narrower side's. A batch it passes is within both bounds; one it
    # does not is walked again below, which checks each side as it is.
    max_diff = min(before, after)
    codec = batch.attributes & COMPRESSION_CODEC_MASK
    try:
        section: bytes | memoryview = memoryview(buf)[RECORDS_OFFSET:] if codec == 0 else \
            decompress_scratch(codec, memoryview(buf)[RECORDS_OFFSET:])
    except CorruptRecordError as e:
        raise CorruptRecordError(f"the records of the batch are corrupt: {e}") from None
    max_ts = kernels().check_produced_records(section, batch.records_count, batch.base_timestamp, compacted,
                                              max_diff != LONG_MAX, now_ms, max_diff)
    if max_ts is None:
        max_ts = _check_each_record(bytes(section), batch, compacted, now_ms, (before, after), partition)
    del section  # the view on buf goes before buf is written below
    if create_time and batch.records_count and batch.max_timestamp != max_ts:
        _INT64.pack_into(buf, MAX_TIMESTAMP_OFFSET, max_ts)
        with memoryview(buf) as mv:
            _UINT32.pack_into(buf, CRC_OFFSET, crc32c(mv[ATTRIBUTES_OFFSET:]))


def _check_each_record(section: bytes, batch: RecordBatch, compacted: bool, now_ms: int, bounds: tuple[int, int],
                       partition: str) -> int:
    """The reference walk of :func:`_check_records`: the maximum timestamp, or the errors raised
    as Kafka's per-record errors (CorruptRecordError for a malformed record)."""
    errors: list[tuple[int, str]] = []
    bad_time = False
    before, after = bounds
    earliest, latest = now_ms - before, now_ms + after
    base = batch.base_offset
    max_ts = -1
    append_time = batch.max_timestamp if batch.timestamp_type is TimestampType.LOG_APPEND_TIME else None
    records = iter_record_fields(section, batch.records_count, base, batch.base_timestamp, batch.base_sequence,
                                 append_time)
    try:
        for i, (offset, ts, key, _value, _headers, _seq) in enumerate(records):
            if offset - base != i:
                errors.append((i, f"record {i} has offset delta {offset - base}; expected {i}"))
            if key is None and compacted:
                errors.append((i, f"compacted topic {partition} cannot accept a record without a key"))
            if not earliest <= ts <= latest:
                bad_time = True
                errors.append((i, f"timestamp {ts} of record {i} is out of range: it must be within "
                                  f"[{earliest}, {latest}] (message.timestamp.before.max.ms / after.max.ms, else "
                                  f"message.timestamp.difference.max.ms)"))
            if ts > max_ts:
                max_ts = ts
    except CorruptRecordError as e:
        raise CorruptRecordError(f"the records of the batch are corrupt: {e}") from None
    if errors:
        what = "timestamp" if bad_time else "record"
        summary = f"{len(errors)} {what} error(s) in the batch for {partition or 'the partition'}: {errors[0][1]}"
        raise (InvalidTimestampError if bad_time else InvalidRecordError)(summary, errors)
    return max_ts


def check_keys_for_compaction(keys: list[bytes | None], config: LogConfig, partition: str = "") -> None:
    """Refuse records without a key on a compacted topic (the HTTP produce path's form of the rule:
    Kafka's LogValidator refuses them with INVALID_RECORD; the HTTP API answers 422)."""
    if not config.compact or None not in keys:
        return
    errors = [(i, f"compacted topic {partition} cannot accept a record without a key")
              for i, k in enumerate(keys) if k is None]
    raise InvalidRecordError(f"{len(errors)} record(s) without a key (the first is records[{errors[0][0]}]): "
                             f"compacted topic {partition or ''} needs a key on every record; use a topic with "
                             f"cleanup.policy=delete for keyless records", errors)
