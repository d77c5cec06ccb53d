"""Builder -> reader round trips for every codec, plus a hypothesis property over arbitrary records."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from log.errors import InvalidRequestError
from log.record import (
    CompressionType,
    Record,
    RecordBatch,
    RecordBatchBuilder,
    compress,
    decompress,
    iter_batches,
    stamp_batch,
)
from log.record.compression import XERIAL_MAGIC
from log.types import TimestampType

CODECS = list(CompressionType)


def _build(records: list[Record], codec: CompressionType, **kwargs: object) -> bytes:
    builder = RecordBatchBuilder(records[0].offset, compression=codec, **kwargs)  # type: ignore[arg-type]
    for r in records:
        builder.append(r.offset, r.timestamp, r.key, r.value, r.headers)
    return builder.build()


@pytest.mark.parametrize("codec", CODECS, ids=lambda c: c.name_lower)
def test_round_trip_mixed_records(codec: CompressionType) -> None:
    records = [
        Record(100, 1_700_000_000_000, b"key-a", b"value" * 50, (("h1", b"x"), ("h2", None))),
        Record(101, 1_699_999_999_000, None, b"keyless"),  # negative timestamp delta
        Record(105, 1_700_000_000_500, b"key-a", None),  # tombstone after an offset gap
        Record(106, 1_700_000_000_400, b"", b""),
        Record(300, -1, b"\x00" * 200, b"\xff" * 5000, (("\u00e9t\u00e9", b"\x00"),)),
    ]
    out = _build(
        records,
        codec,
        producer_id=42,
        producer_epoch=3,
        base_sequence=7,
        is_transactional=True,
        partition_leader_epoch=9,
    )
    batch = RecordBatch(out)
    batch.ensure_valid()
    assert batch.compression is codec
    assert (batch.base_offset, batch.last_offset, batch.records_count) == (100, 300, 5)
    assert batch.max_timestamp == 1_700_000_000_500 and batch.base_timestamp == 1_700_000_000_000
    assert (batch.producer_id, batch.producer_epoch, batch.base_sequence) == (42, 3, 7)
    assert batch.is_transactional and not batch.is_control and batch.partition_leader_epoch == 9
    assert batch.last_sequence == 7 + 200
    got = list(batch.records())
    assert got == [
        Record(r.offset, r.timestamp, r.key, r.value, r.headers, 7 + r.offset - 100) for r in records
    ]
    assert list(batch.iter_key_offsets()) == [(r.offset, r.key, r.value is not None) for r in records]
    assert [Record(*fields) for fields in batch.iter_record_fields()] == got


@pytest.mark.parametrize("codec", CODECS, ids=lambda c: c.name_lower)
def test_log_append_time_overrides_record_timestamps(codec: CompressionType) -> None:
    records = [Record(0, 10, b"a", b"1"), Record(1, 20, b"b", b"2")]
    out = _build(records, codec, timestamp_type=TimestampType.LOG_APPEND_TIME, log_append_time_ms=999)
    batch = RecordBatch(out)
    batch.ensure_valid()
    assert batch.timestamp_type is TimestampType.LOG_APPEND_TIME and batch.max_timestamp == 999
    assert [r.timestamp for r in batch.records()] == [999, 999]


def test_last_offset_delta_is_kept_when_the_last_record_was_dropped() -> None:
    builder = RecordBatchBuilder(50)
    builder.append(52, 1, b"k", b"v")
    batch = RecordBatch(builder.build(last_offset_delta=9))
    assert (batch.base_offset, batch.last_offset, batch.records_count) == (50, 59, 1)
    assert [r.offset for r in batch.records()] == [52]
    with pytest.raises(InvalidRequestError):
        builder.build(last_offset_delta=1)


def test_builder_rejects_bad_appends() -> None:
    builder = RecordBatchBuilder(10)
    with pytest.raises(InvalidRequestError):
        builder.append(9, 0, b"k", b"v")
    builder.append(10, 0, b"k", b"v")
    with pytest.raises(InvalidRequestError):
        builder.append(10, 0, b"k", b"v")
    with pytest.raises(InvalidRequestError):
        builder.append(10 + (1 << 31), 0, b"k", b"v")
    with pytest.raises(InvalidRequestError):
        builder.append(11, -2, b"k", b"v")
    with pytest.raises(InvalidRequestError):
        RecordBatchBuilder(0).build()
    with pytest.raises(InvalidRequestError):
        RecordBatchBuilder(0, timestamp_type=TimestampType.LOG_APPEND_TIME)
    assert builder.num_records == 1


def test_stamp_batch_in_place() -> None:
    first = _build([Record(0, 5, b"a", b"1"), Record(1, 6, b"b", b"2")], CompressionType.NONE)
    second = _build([Record(0, 7, b"c", b"3")], CompressionType.LZ4)
    buf = bytearray(first + second)
    crc_before = RecordBatch(first).crc
    stamp_batch(buf, 0, base_offset=1000, partition_leader_epoch=4)
    stamp_batch(buf, len(first), base_offset=1002, partition_leader_epoch=4, log_append_time_ms=12345)
    (p0, b0), (p1, b1) = list(iter_batches(buf))
    b0.ensure_valid()
    b1.ensure_valid()
    assert (p0, p1) == (0, len(first))
    assert (b0.base_offset, b0.partition_leader_epoch, b0.crc) == (1000, 4, crc_before)
    assert [r.offset for r in b0.records()] == [1000, 1001]
    assert b1.base_offset == 1002 and b1.timestamp_type is TimestampType.LOG_APPEND_TIME
    assert [(r.offset, r.timestamp) for r in b1.records()] == [(1002, 12345)]


def test_snappy_writes_xerial_and_reads_raw() -> None:
    import cramjam

    data = bytes(range(256)) * 300  # > one 32 KiB xerial block
    framed = compress(CompressionType.SNAPPY, data)
    assert framed.startswith(XERIAL_MAGIC + b"\x00\x00\x00\x01\x00\x00\x00\x01")
    assert decompress(CompressionType.SNAPPY, framed) == data
    assert decompress(CompressionType.SNAPPY, bytes(cramjam.snappy.compress_raw(data))) == data


def test_lz4_frames_have_independent_blocks() -> None:
    framed = compress(CompressionType.LZ4, b"abc" * 100_000)
    assert framed[:4] == b"\x04\x22\x4d\x18"
    assert framed[4] & 0x20, "Kafka's LZ4 reader needs the block-independence flag"


def test_lz4_frame_descriptor_is_kafkas() -> None:
    """Regression: recompressed LZ4 batches set the block-checksum flag (FLG 0x70).
    Kafka's KafkaLZ4BlockOutputStream writes FLG 0x60, BD 0x40 (64 KiB blocks), and the header
    checksum byte for that descriptor is 0x82; no checksum follows any block."""
    data = b"abc" * 100_000
    framed = compress(CompressionType.LZ4, data)
    assert framed[4:7] == b"\x60\x40\x82"
    assert decompress(CompressionType.LZ4, framed) == data
    # no block checksums: the frame is exactly header + (4-byte size + block)* + end mark
    pos, blocks = 7, 0
    while (size := int.from_bytes(framed[pos:pos + 4], "little")) != 0:
        pos += 4 + (size & 0x7FFFFFFF)
        blocks += 1
    assert pos + 4 == len(framed) and blocks == -(-len(data) // 65536)


_records = st.lists(
    st.tuples(
        st.integers(0, 1000),  # offset gap
        st.integers(-1, 1 << 41),  # timestamp (Kafka allows none below -1)
        st.one_of(st.none(), st.binary(max_size=40)),
        st.one_of(st.none(), st.binary(max_size=300)),
        st.lists(st.tuples(st.text(max_size=8), st.one_of(st.none(), st.binary(max_size=10))), max_size=3),
    ),
    min_size=1,
    max_size=30,
)


@settings(max_examples=60, deadline=None)
@given(
    base=st.integers(0, 1 << 50),
    rows=_records,
    codec=st.sampled_from(CODECS),
    seq=st.sampled_from([-1, 0, (1 << 31) - 5]),
)
def test_property_any_records_round_trip(
    base: int, rows: list[tuple[int, int, bytes | None, bytes | None, list]], codec: CompressionType, seq: int
) -> None:
    offset = base
    records = []
    for gap, ts, key, value, headers in rows:
        records.append(Record(offset, ts, key, value, tuple(headers)))
        offset += gap + 1
    builder = RecordBatchBuilder(
        base, compression=codec, base_sequence=seq, producer_id=1 if seq >= 0 else -1
    )
    for r in records:
        builder.append(r.offset, r.timestamp, r.key, r.value, r.headers)
    batch = RecordBatch(builder.build())
    batch.ensure_valid()
    got = list(batch.records())
    assert [(r.offset, r.timestamp, r.key, r.value, r.headers) for r in got] == [
        (r.offset, r.timestamp, r.key, r.value, r.headers) for r in records
    ]
    assert batch.max_timestamp == max(r.timestamp for r in records)
    assert batch.last_offset == records[-1].offset
    if seq >= 0:
        assert all(0 <= r.sequence < (1 << 31) for r in got)
        assert got[-1].sequence == batch.last_sequence
    assert list(batch.iter_key_offsets()) == [(r.offset, r.key, r.value is not None) for r in records]


@pytest.mark.parametrize("codec", CODECS, ids=lambda c: c.name_lower)
def test_decompress_scratch_answers_what_decompress_does(codec: CompressionType, monkeypatch) -> None:
    # the produce path's decoder into a per-thread buffer: the same bytes as decompress() for every size (the
    # buffer grows, and past its cap the allocating path answers), the same error for corrupt input
    from log.errors import CorruptRecordError
    from log.record import compression

    monkeypatch.setattr(compression, "_scratch", __import__("threading").local())
    monkeypatch.setattr(compression, "_SCRATCH_START_BYTES", 1024)
    monkeypatch.setattr(compression, "SCRATCH_MAX_BYTES", 64 * 1024)
    for size in (0, 10, 1024, 5000, 64 * 1024, 300_000):
        data = bytes(range(251)) * (size // 251) + b"x" * (size % 251)
        framed = compress(codec, data)
        assert bytes(compression.decompress_scratch(codec, framed)) == decompress(codec, framed) == data
    held = compression.decompress_scratch(codec, compress(codec, b"first" * 10))
    assert bytes(held) == b"first" * 10
    if codec is not CompressionType.NONE:
        bad = bytearray(compress(codec, b"payload" * 1000))
        bad[len(bad) // 2] ^= 0xFF
        bad = bad[: len(bad) - 3]
        with pytest.raises(CorruptRecordError):
            decompress(codec, bytes(bad))
        with pytest.raises(CorruptRecordError):
            compression.decompress_scratch(codec, bytes(bad))
