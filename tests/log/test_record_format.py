"""Byte-exact vectors from the reference (C.2, C.5, C.6) and the varint/CRC/control primitives."""

from __future__ import annotations

import pytest

from log.errors import CorruptRecordError
from log.record import (
    CONTROL_FLAG_MASK,
    RECORD_BATCH_OVERHEAD,
    TRANSACTIONAL_FLAG_MASK,
    CompressionType,
    ControlRecordType,
    Record,
    RecordBatch,
    RecordBatchBuilder,
    build_control_batch,
    build_empty_header,
    crc32c,
    decode_end_txn_marker_value,
    decode_varint,
    decode_varlong,
    encode_varint,
    size_of_varint,
)
from log.types import TimestampType

GOLDEN = (
    "000000000000000000000055ffffffff02e58cf1ff00000000000100000000000454c300000000000454c3ffff"
    "ffffffffffffffffffffffff0000000220000000086b6579310c76616c756531002400e1bf2202086b6579320c"
    "76616c75653200"
)
COMMIT_MARKER = (
    "00000000000003d7000000420000001d02172b6dc800300000000000000000000003e800000000000003e80000"
    "000000000049000dffffffff000000012000000008000000010c00000000015b00"
)
EMPTY_HEADER = (
    "000000000000000300000031000001250255581148000000000001ffffffffffffffff000000000000000c0000"
    "00000000001700050000000a00000000"
)
DELETE_HORIZON = (
    "000000000000000000000057000003e60277b88261004000000002000000003fffffff000000000000000fffff"
    "ffffffffffffffffffffffff000000031800f3ffffff070002300230001600e9ffffff0702023101001800dfff"
    "ffff07040232023200"
)

VARINTS = [(0, "00"), (-1, "01"), (1, "02"), (63, "7e"), (64, "8001"), (300, "d804"), (-282609, "e1bf22")]


@pytest.mark.parametrize(("value", "hexed"), VARINTS)
def test_varint_vectors(value: int, hexed: str) -> None:
    assert encode_varint(value).hex() == hexed
    assert decode_varint(bytes.fromhex(hexed), 0) == (value, len(hexed) // 2)
    assert decode_varlong(b"\xff" + bytes.fromhex(hexed), 1) == (value, 1 + len(hexed) // 2)
    assert size_of_varint(value) == len(hexed) // 2


@pytest.mark.parametrize("value", [-(1 << 63), (1 << 63) - 1, -(1 << 31), (1 << 31) - 1, 1 << 40, -(10**15)])
def test_varlong_extremes_round_trip(value: int) -> None:
    encoded = encode_varint(value)
    assert decode_varlong(encoded, 0) == (value, len(encoded))


def test_varint_rejects_overlong_and_truncated() -> None:
    with pytest.raises(CorruptRecordError, match="longer than 5"):
        decode_varint(b"\x80\x80\x80\x80\x80\x01", 0)
    with pytest.raises(CorruptRecordError, match="longer than 10"):
        decode_varlong(b"\x80" * 10 + b"\x01", 0)
    with pytest.raises(CorruptRecordError, match="truncated") as info:
        decode_varint(b"\x00\x80\x80", 1)
    assert info.value.position == 1
    with pytest.raises(CorruptRecordError, match="truncated"):
        decode_varint(b"", 0)
    # a 5-byte varint above int32 range is not a varint
    with pytest.raises(CorruptRecordError, match="int32"):
        decode_varint(b"\xfe\xff\xff\xff\x1f", 0)


def test_crc32c_check_value() -> None:
    assert crc32c(b"123456789") == 0xE3069283
    assert crc32c(memoryview(b"6789"), crc32c(b"12345")) == 0xE3069283


def test_golden_vector_builds_exactly() -> None:
    builder = RecordBatchBuilder(0)
    builder.append(0, 283843, b"key1", b"value1")
    builder.append(1, 1234, b"key2", b"value2")
    out = builder.build()
    assert out.hex() == GOLDEN
    batch = RecordBatch(out)
    assert batch.crc == 3851219455 == batch.compute_checksum()
    assert len(out) == 97 == batch.size_in_bytes


def test_golden_vector_reads_field_by_field() -> None:
    batch = RecordBatch(bytes.fromhex(GOLDEN))
    batch.ensure_valid()
    assert (batch.base_offset, batch.batch_length, batch.partition_leader_epoch, batch.magic) == (
        0,
        85,
        -1,
        2,
    )
    assert (batch.attributes, batch.last_offset_delta, batch.last_offset, batch.next_offset) == (0, 1, 1, 2)
    assert (batch.base_timestamp, batch.max_timestamp, batch.first_timestamp) == (283843, 283843, 283843)
    assert (batch.producer_id, batch.producer_epoch, batch.base_sequence, batch.records_count) == (
        -1,
        -1,
        -1,
        2,
    )
    assert batch.compression is CompressionType.NONE
    assert batch.timestamp_type is TimestampType.CREATE_TIME
    assert not (
        batch.is_transactional or batch.is_control or batch.has_delete_horizon or batch.has_producer_id
    )
    assert batch.delete_horizon_ms is None and batch.last_sequence == -1
    assert list(batch.records()) == [
        Record(0, 283843, b"key1", b"value1"),
        Record(1, 1234, b"key2", b"value2"),
    ]
    assert list(batch.iter_key_offsets()) == [(0, b"key1", True), (1, b"key2", True)]
    assert "baseOffset=0" in repr(batch) and "count=2" in repr(batch)


def test_commit_marker_vector() -> None:
    out = build_control_batch(
        base_offset=983,
        timestamp=1000,
        producer_id=73,
        producer_epoch=13,
        control_type=ControlRecordType.COMMIT,
        coordinator_epoch=347,
        partition_leader_epoch=29,
    )
    assert out.hex() == COMMIT_MARKER
    batch = RecordBatch(out)
    batch.ensure_valid()
    assert len(out) == 78 and batch.crc == 388722120
    assert batch.attributes == TRANSACTIONAL_FLAG_MASK | CONTROL_FLAG_MASK == 0x30
    assert batch.is_control and batch.is_transactional and batch.base_sequence == -1
    assert batch.control_type() is ControlRecordType.COMMIT
    (record,) = batch.records()
    assert record.key == b"\x00\x00\x00\x01"
    assert decode_end_txn_marker_value(record.value) == (0, 347)


def test_abort_marker_and_non_marker_control_batch() -> None:
    abort = RecordBatch(
        build_control_batch(
            base_offset=5, timestamp=7, producer_id=1, producer_epoch=0, control_type=ControlRecordType.ABORT
        )
    )
    assert abort.control_type() is ControlRecordType.ABORT and abort.size_in_bytes == 78
    leader_change = RecordBatch(
        build_control_batch(
            base_offset=5,
            timestamp=7,
            producer_id=-1,
            producer_epoch=-1,
            control_type=ControlRecordType.LEADER_CHANGE,
        )
    )
    assert leader_change.is_control and not leader_change.is_transactional
    assert leader_change.control_type() is ControlRecordType.LEADER_CHANGE


def test_control_key_parse_rules() -> None:
    assert ControlRecordType.parse(b"\x00\x00\x00\x63") is ControlRecordType.UNKNOWN
    assert ControlRecordType.parse(b"\x00\x01\x00\x06") is ControlRecordType.KRAFT_VOTERS
    with pytest.raises(CorruptRecordError):
        ControlRecordType.parse(b"\x00\x00\x01")
    with pytest.raises(CorruptRecordError):
        ControlRecordType.parse(b"\xff\xff\x00\x01")
    with pytest.raises(CorruptRecordError):
        decode_end_txn_marker_value(b"\x00\x00\x00")
    with pytest.raises(CorruptRecordError):
        RecordBatch(bytes.fromhex(GOLDEN)).control_type()


def test_empty_header_vector() -> None:
    builder = RecordBatchBuilder(
        3,
        producer_id=23,
        producer_epoch=5,
        base_sequence=10,
        partition_leader_epoch=293,
        compression=CompressionType.GZIP,
    )
    builder.append(3, 11, b"k", b"v")
    builder.append(4, 12, b"k", b"w")
    original = RecordBatch(builder.build())
    out = build_empty_header(original)
    assert out.hex() == EMPTY_HEADER
    empty = RecordBatch(out)
    empty.ensure_valid()
    assert len(out) == RECORD_BATCH_OVERHEAD
    assert (empty.base_offset, empty.last_offset, empty.records_count, empty.base_timestamp) == (3, 4, 0, -1)
    assert empty.max_timestamp == 12 and empty.compression is CompressionType.NONE
    assert list(empty.records()) == [] and list(empty.iter_key_offsets()) == []
    assert empty.last_sequence == 11


def test_empty_header_keeps_flags_but_clears_delete_horizon() -> None:
    builder = RecordBatchBuilder(
        10,
        producer_id=4,
        producer_epoch=1,
        base_sequence=0,
        is_transactional=True,
        delete_horizon_ms=99,
        timestamp_type=TimestampType.LOG_APPEND_TIME,
        log_append_time_ms=500,
    )
    builder.append(10, 1, b"k", None)
    empty = RecordBatch(build_empty_header(RecordBatch(builder.build())))
    assert empty.is_transactional and not empty.has_delete_horizon
    assert empty.timestamp_type is TimestampType.LOG_APPEND_TIME and empty.max_timestamp == 500


def test_delete_horizon_vector() -> None:
    builder = RecordBatchBuilder(0, partition_leader_epoch=998, delete_horizon_ms=1073741823)
    builder.append(0, 5, b"0", b"0")
    builder.append(1, 10, b"1", None)
    builder.append(2, 15, b"2", b"2")
    out = builder.build()
    assert out.hex() == DELETE_HORIZON and len(out) == 99
    batch = RecordBatch(out)
    batch.ensure_valid()
    assert batch.attributes == 0x40 and batch.has_delete_horizon
    assert batch.delete_horizon_ms == 1073741823 == batch.base_timestamp
    assert batch.first_timestamp == 5 and batch.max_timestamp == 15
    assert [(r.offset, r.timestamp, r.key, r.value) for r in batch.records()] == [
        (0, 5, b"0", b"0"),
        (1, 10, b"1", None),
        (2, 15, b"2", b"2"),
    ]
    assert list(batch.iter_key_offsets()) == [(0, b"0", True), (1, b"1", False), (2, b"2", True)]


@pytest.mark.parametrize(
    ("records", "size"),
    [
        ([(b"1", b"1")], 70),
        ([(b"12", b"12")], 72),
        ([(b"123", b"123")], 74),
        ([(b"1", b"1"), (b"2", b"2")], 79),
        ([(b"hello", b"hello")], 78),
        ([(b"1", b"x" * 25)], 94),
    ],
)
def test_reference_sizes(records: list[tuple[bytes, bytes]], size: int) -> None:
    builder = RecordBatchBuilder(0)
    for i, (k, v) in enumerate(records):
        builder.append(i, 1000, k, v)
    assert len(builder.build()) == size == builder.estimated_size


def test_compression_names() -> None:
    assert CompressionType.from_name("lz4") is CompressionType.LZ4
    assert CompressionType.ZSTD.name_lower == "zstd"
    assert [c.value for c in CompressionType] == [0, 1, 2, 3, 4]
