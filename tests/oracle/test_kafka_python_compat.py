"""Byte compatibility with kafka-python's record code (``kafka.record``), in both directions.

kafka-python is an independent implementation of the v2 format; agreeing with it field by field,
for every codec, is the check that our bytes are Kafka's bytes beyond the fixed vectors.
"""

from __future__ import annotations

import pytest
from kafka.record import MemoryRecords, MemoryRecordsBuilder
from kafka.record.default_records import ControlRecord, DefaultRecordBatch

from log.record import (
    CompressionType,
    ControlRecordType,
    Record,
    RecordBatch,
    RecordBatchBuilder,
    build_control_batch,
    iter_batches,
    stamp_batch,
)
from log.types import TimestampType

CODECS = list(CompressionType)
IDS = [c.name_lower for c in CODECS]

# Compressible values: kafka-python silently writes a batch uncompressed when compression does
# not shrink it, which would make the codec checks vacuous.
RECORDS = [
    Record(1000, 1_700_000_000_000, b"user-1", b"A" * 300, (("trace", b"abc"), ("empty", None))),
    Record(1001, 1_699_999_000_000, None, b"B" * 300),
    Record(1004, 1_700_000_000_007, b"user-1", None),
    Record(1005, 1_700_000_000_003, b"", b"C" * 300, (("\u00fcber", b""),)),
]


def _kp_batches(data: bytes) -> list[DefaultRecordBatch]:
    records = MemoryRecords(data)
    out = []
    while records.has_next():
        out.append(records.next_batch())
    return out


@pytest.mark.parametrize("codec", CODECS, ids=IDS)
def test_our_batches_parse_with_kafka_python(codec: CompressionType) -> None:
    builder = RecordBatchBuilder(
        1000,
        compression=codec,
        producer_id=77,
        producer_epoch=2,
        base_sequence=40,
        is_transactional=True,
        partition_leader_epoch=5,
    )
    for r in RECORDS:
        builder.append(r.offset, r.timestamp, r.key, r.value, r.headers)
    data = builder.build()
    (kb,) = _kp_batches(data)
    assert kb.validate_crc()
    assert (kb.base_offset, kb.leader_epoch, kb.magic, kb.crc) == (1000, 5, 2, RecordBatch(data).crc)
    assert kb.compression_type == int(codec) and kb.timestamp_type == 0
    assert (kb.last_offset_delta, kb.first_timestamp, kb.max_timestamp) == (
        5,
        1_700_000_000_000,
        1_700_000_000_007,
    )
    assert (kb.producer_id, kb.producer_epoch, kb.base_sequence, kb.records_count) == (77, 2, 40, 4)
    assert kb.is_transactional and not kb.is_control_batch and kb.last_sequence == 45
    assert kb.size_in_bytes == len(data)
    got = [(r.offset, r.timestamp, r.key, r.value, [tuple(h) for h in r.headers]) for r in kb]
    assert got == [(r.offset, r.timestamp, r.key, r.value, list(r.headers)) for r in RECORDS]


@pytest.mark.parametrize("codec", CODECS, ids=IDS)
def test_log_append_time_and_delete_horizon_parse_with_kafka_python(codec: CompressionType) -> None:
    builder = RecordBatchBuilder(
        0, compression=codec, timestamp_type=TimestampType.LOG_APPEND_TIME, log_append_time_ms=123456
    )
    builder.append(0, 5, b"k", b"v" * 200)
    builder.append(3, 9, b"k2", b"w" * 200)
    (kb,) = _kp_batches(builder.build())
    assert kb.validate_crc() and kb.timestamp_type == 1
    assert [(r.offset, r.timestamp) for r in kb] == [(0, 123456), (3, 123456)]

    builder = RecordBatchBuilder(10, compression=codec, delete_horizon_ms=1_000_000)
    builder.append(10, 5, b"k", b"v" * 200)
    builder.append(12, 15, b"k2", None)
    (kb,) = _kp_batches(builder.build())
    # kafka-python knows nothing of KIP-534, but the deltas are relative to the stored base
    # timestamp, so it still reads the true record timestamps
    assert kb.validate_crc() and kb.attributes & 0x40 and kb.first_timestamp == 1_000_000
    assert [(r.offset, r.timestamp, r.value) for r in kb] == [(10, 5, b"v" * 200), (12, 15, None)]


def test_our_control_batches_parse_with_kafka_python() -> None:
    data = b"".join(
        build_control_batch(
            base_offset=50 + i,
            timestamp=99,
            producer_id=8,
            producer_epoch=1,
            control_type=t,
            coordinator_epoch=3,
        )
        for i, t in enumerate([ControlRecordType.COMMIT, ControlRecordType.ABORT])
    )
    commit, abort = _kp_batches(data)
    for kb, is_commit in [(commit, True), (abort, False)]:
        assert kb.validate_crc() and kb.is_control_batch and kb.is_transactional
        assert (kb.producer_id, kb.producer_epoch, kb.base_sequence) == (8, 1, -1)
        (rec,) = list(kb)
        assert isinstance(rec, ControlRecord)
        assert rec.commit is is_commit and rec.abort is not is_commit and rec.version == 0


def _kafka_python_build(codec: CompressionType, *, transactional: bool, offset: int = 0) -> bytes:
    pid, epoch, seq = (31, 4, 17) if transactional else (-1, -1, -1)
    builder = MemoryRecordsBuilder(
        magic=2,
        compression_type=int(codec),
        batch_size=1 << 20,
        offset=offset,
        transactional=transactional,
        producer_id=pid,
        producer_epoch=epoch,
        base_sequence=seq,
    )
    for i in range(25):
        key = None if i % 7 == 3 else f"key-{i % 5}".encode()
        value = None if i % 6 == 5 else (f"value-{i}-" * 20).encode()
        headers = [("h", f"{i}".encode()), ("n", None)] if i % 4 == 0 else []
        builder.append(1_600_000_000_000 + (i * 37 % 11) * 1000 - 5000, key, value, headers)
    builder.close()
    return bytes(builder.buffer())


@pytest.mark.parametrize("codec", CODECS, ids=IDS)
@pytest.mark.parametrize("transactional", [False, True])
def test_kafka_python_batches_read_here_field_by_field(codec: CompressionType, transactional: bool) -> None:
    data = _kafka_python_build(codec, transactional=transactional)
    (kb,) = _kp_batches(data)
    expected = [(r.offset, r.timestamp, r.key, r.value, tuple((k, v) for k, v in r.headers)) for r in kb]
    ((pos, batch),) = list(iter_batches(data, source="kafka-python"))
    batch.ensure_valid(source="kafka-python", position=pos)
    assert batch.compression is codec
    assert (batch.base_offset, batch.partition_leader_epoch, batch.magic) == (
        kb.base_offset,
        kb.leader_epoch,
        2,
    )
    assert (batch.crc, batch.attributes, batch.last_offset_delta) == (
        kb.crc,
        kb.attributes,
        kb.last_offset_delta,
    )
    assert (batch.base_timestamp, batch.max_timestamp) == (kb.first_timestamp, kb.max_timestamp)
    assert (batch.producer_id, batch.producer_epoch, batch.base_sequence) == (
        kb.producer_id,
        kb.producer_epoch,
        kb.base_sequence,
    )
    assert batch.is_transactional is transactional and batch.last_sequence == kb.last_sequence
    assert batch.records_count == kb.records_count == 25
    got = list(batch.records())
    assert [(r.offset, r.timestamp, r.key, r.value, r.headers) for r in got] == expected
    assert list(batch.iter_key_offsets()) == [(o, k, v is not None) for o, _, k, v, _ in expected]
    if transactional:
        assert [r.sequence for r in got] == [17 + i for i in range(25)]


@pytest.mark.parametrize("codec", CODECS, ids=IDS)
def test_kafka_python_batches_are_copied_unchanged(codec: CompressionType) -> None:
    data = b"".join(
        _kafka_python_build(codec, transactional=t, offset=o)
        for t, o in [(False, 0), (True, 25), (False, 50)]
    )
    copied = b"".join(bytes(batch.raw) for _, batch in iter_batches(data))
    assert copied == data
    for pos, batch in iter_batches(copied):
        batch.ensure_valid(position=pos)
    # stamping offsets and leader epoch in place leaves the CRC kafka-python computed intact
    buf = bytearray(data)
    for pos, batch in list(iter_batches(bytes(buf))):
        stamp_batch(buf, pos, base_offset=batch.base_offset + 9000, partition_leader_epoch=12)
    stamped = _kp_batches(bytes(buf))
    assert [kb.base_offset for kb in stamped] == [9000, 9000, 9000]
    assert all(kb.validate_crc() and kb.leader_epoch == 12 for kb in stamped)
