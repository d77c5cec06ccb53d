"""Corrupt and truncated input: every failure is a CorruptRecordError naming source and position."""

from __future__ import annotations

import io
import struct
from pathlib import Path

import pytest

from log.errors import CorruptRecordError
from log.record import (
    ATTRIBUTES_OFFSET,
    LENGTH_OFFSET,
    MAGIC_OFFSET,
    RECORDS_COUNT_OFFSET,
    RECORDS_OFFSET,
    CompressionType,
    RecordBatch,
    RecordBatchBuilder,
    crc32c,
    decompress,
    iter_batches,
    iter_file_batches,
    read_batch_at,
)


def _batch(
    base: int, n: int = 3, codec: CompressionType = CompressionType.NONE, value_size: int = 10
) -> bytes:
    builder = RecordBatchBuilder(base, compression=codec)
    for i in range(n):
        builder.append(base + i, 1000 + i, f"k{i}".encode(), b"v" * value_size)
    return builder.build()


def _recrc(buf: bytearray) -> bytearray:
    struct.pack_into(">I", buf, 17, crc32c(memoryview(buf)[ATTRIBUTES_OFFSET:]))
    return buf


def test_bad_crc_is_reported_with_source_and_position() -> None:
    buf = bytearray(_batch(0))
    buf[-2] ^= 0xFF
    batch = RecordBatch(buf)
    assert not batch.is_valid()
    with pytest.raises(CorruptRecordError, match="crc") as info:
        batch.ensure_valid(source="00000000000000000000.log", position=4096)
    assert info.value.source == "00000000000000000000.log" and info.value.position == 4096
    assert "00000000000000000000.log at byte 4096" in str(info.value)


def test_bad_magic() -> None:
    good = _batch(0)
    buf = bytearray(good + good)
    buf[len(good) + MAGIC_OFFSET] = 1
    with pytest.raises(CorruptRecordError, match="magic 1") as info:
        list(iter_batches(buf, source="seg"))
    assert info.value.position == len(good)
    with pytest.raises(CorruptRecordError, match="magic"):
        RecordBatch(buf[len(good) :]).ensure_valid()


def test_length_too_small() -> None:
    buf = bytearray(_batch(0))
    struct.pack_into(">i", buf, LENGTH_OFFSET, 48)
    with pytest.raises(CorruptRecordError, match="smaller than the minimum") as info:
        list(iter_batches(buf, source="seg"))
    assert info.value.position == 0
    # even when the caller would accept a torn tail: a short length is corruption, not truncation
    with pytest.raises(CorruptRecordError):
        list(iter_batches(buf, allow_truncated_tail=True))


def test_truncated_tail() -> None:
    a, b = _batch(0), _batch(3)
    buf = a + b[:-5]
    assert [p for p, _ in iter_batches(buf, allow_truncated_tail=True)] == [0]
    with pytest.raises(CorruptRecordError, match="truncated") as info:
        list(iter_batches(buf, source="seg"))
    assert info.value.position == len(a) and info.value.source == "seg"
    # fewer bytes than a header
    assert [p for p, _ in iter_batches(a + b[:10], allow_truncated_tail=True)] == [0]
    with pytest.raises(CorruptRecordError, match="header") as info:
        list(iter_batches(a + b[:10]))
    assert info.value.position == len(a)
    # end bounds the walk
    assert [p for p, _ in iter_batches(a + b, 0, len(a))] == [0]
    assert [p for p, _ in iter_batches(a + b, len(a))] == [len(a)]


def test_records_count_inconsistent() -> None:
    buf = bytearray(_batch(0, n=3))
    struct.pack_into(">i", buf, RECORDS_COUNT_OFFSET, 1000)
    with pytest.raises(CorruptRecordError, match="declares 1000 records"):
        RecordBatch(_recrc(buf)).ensure_valid(position=0)
    struct.pack_into(">i", buf, RECORDS_COUNT_OFFSET, 2)  # plausible, but a record is left over
    batch = RecordBatch(_recrc(buf))
    batch.ensure_valid()
    with pytest.raises(CorruptRecordError, match="after its 2 records"):
        list(batch.records())
    with pytest.raises(CorruptRecordError, match="after its 2 records"):
        list(batch.iter_key_offsets())
    struct.pack_into(">i", buf, RECORDS_COUNT_OFFSET, -1)
    with pytest.raises(CorruptRecordError, match="negative"):
        RecordBatch(_recrc(buf)).ensure_valid()


def test_corrupt_record_bytes() -> None:
    buf = bytearray(_batch(0, n=1))
    buf[RECORDS_OFFSET + 4] = 0x7F  # key length varint: a huge positive key, past the record
    batch = RecordBatch(_recrc(buf))
    with pytest.raises(CorruptRecordError, match="record 0"):
        list(batch.records())
    buf = bytearray(_batch(0, n=1))
    buf[RECORDS_OFFSET] = 0x7E  # record length 63 > bytes left
    with pytest.raises(CorruptRecordError, match="invalid record size"):
        list(RecordBatch(_recrc(buf)).records())
    buf = bytearray(_batch(0, n=1))
    buf[RECORDS_OFFSET + 4] = 0x03  # key length -2
    with pytest.raises(CorruptRecordError, match="invalid key size"):
        list(RecordBatch(_recrc(buf)).iter_key_offsets())


@pytest.mark.parametrize(
    "codec", [c for c in CompressionType if c != CompressionType.NONE], ids=lambda c: c.name_lower
)
def test_garbage_compressed_data(codec: CompressionType) -> None:
    with pytest.raises(CorruptRecordError, match="decompress|snappy"):
        decompress(
            codec,
            b"\x82SNAPPY\x00\x00\x00\x00\x01\x00\x00\x00\x01\x00\x00\x00\x09garbage!!"
            if codec == 2
            else b"this is not compressed data at all",
        )
    buf = bytearray(_batch(0, codec=codec, value_size=500))
    for i in range(RECORDS_OFFSET + 20, len(buf) - 4):
        buf[i] ^= 0x5A
    batch = RecordBatch(_recrc(buf))
    batch.ensure_valid()  # the CRC was recomputed over the garbage
    with pytest.raises(CorruptRecordError):
        list(batch.records())


def test_record_batch_needs_a_header() -> None:
    with pytest.raises(CorruptRecordError, match="smaller than"):
        RecordBatch(b"\x00" * 60)


def _segment(tmp_path: Path, batches: list[bytes]) -> Path:
    path = tmp_path / "00000000000000000000.log"
    path.write_bytes(b"".join(batches))
    return path


@pytest.mark.parametrize("buffer_size", [17, 64, 200, 1 << 20])
def test_file_reader_small_and_large_buffers(tmp_path: Path, buffer_size: int) -> None:
    batches = [
        _batch(0, n=2),
        _batch(2, n=40, value_size=100),
        _batch(42, n=1),
        _batch(43, codec=CompressionType.LZ4),
    ]
    path = _segment(tmp_path, batches)
    got = list(iter_file_batches(path, buffer_size=buffer_size))
    positions = [0]
    for b in batches[:-1]:
        positions.append(positions[-1] + len(b))
    assert [p for p, _ in got] == positions
    assert [bytes(b.raw) for _, b in got] == batches  # each view still valid after the reader moved on
    for _, b in got:
        b.ensure_valid()
    # start/end positions are absolute
    sub = list(iter_file_batches(path, positions[1], positions[3], buffer_size=buffer_size))
    assert [p for p, _ in sub] == positions[1:3]
    with path.open("rb") as f:
        assert [p for p, _ in iter_file_batches(f, positions[2], buffer_size=buffer_size)] == positions[2:]
        assert read_batch_at(f, positions[3]).base_offset == 43


def test_file_reader_torn_tail_and_corruption(tmp_path: Path) -> None:
    a, b = _batch(0), _batch(3)
    path = _segment(tmp_path, [a, b[:-1]])
    assert [p for p, _ in iter_file_batches(path, allow_truncated_tail=True, buffer_size=32)] == [0]
    with pytest.raises(CorruptRecordError, match="truncated") as info:
        list(iter_file_batches(path, buffer_size=32))
    assert info.value.position == len(a) and info.value.source == str(path)
    with path.open("rb") as f, pytest.raises(CorruptRecordError, match="truncated") as info:
        read_batch_at(f, len(a))
    assert info.value.position == len(a)
    bad = bytearray(b)
    bad[MAGIC_OFFSET] = 0
    path = _segment(tmp_path, [a, a, bytes(bad)])
    with pytest.raises(CorruptRecordError, match="magic") as info:
        list(iter_file_batches(path, source="seg-7", allow_truncated_tail=True))
    assert (info.value.source, info.value.position) == ("seg-7", 2 * len(a))


def test_file_reader_on_a_file_object_without_a_name() -> None:
    data = _batch(0) + _batch(3)
    got = list(iter_file_batches(io.BytesIO(data), buffer_size=20))
    assert [b.base_offset for _, b in got] == [0, 3]
