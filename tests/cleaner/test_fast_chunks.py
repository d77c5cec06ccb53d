"""The compiled loops read segments in chunks (cleaner/fast_reader.py and the kernels'
frame_batches): the chunk reader yields the reference's chunks (``cleaner.cleaner._chunks``),
whatever its buffer size (so it moves the unread tail and grows the buffer), and raises the
reference's error, naming the same file and byte, for every kind of damage, in both passes of a
round. Each test runs with both kernels (conftest's ``record_kernels``).
"""

from __future__ import annotations

import random
import struct
import tempfile
from pathlib import Path

import pytest

from cleaner import fast_reader
from cleaner.cleaner import CleanContext, Cleaner, _chunks, build_offset_map_from_segments, clean_into
from cleaner.config import CleanerConfig
from cleaner.fast_reader import ChunkReader
from cleaner.log_to_clean import LogToClean, cleanable_offsets
from cleaner.offset_map import CompactOffsetMap
from cleaner.stats import CleanerStats
from cleaner.transactions import CleanedTransactionMetadata
from log.errors import CorruptRecordError
from log.local_log import LocalLog, RecordSpec
from log.record import CompressionType, RecordBatchBuilder, iter_batches
from log.record.crc32c import crc32c
from log.segment import LogSegment
from tests.cleaner.test_txn_corruption import flip_byte


def _big_log(make_log, seed: int = 1) -> LocalLog:
    """One segment of ~60 batches of 1-40 records, values up to 3000 bytes, mixed codecs."""
    rnd = random.Random(seed)
    log = make_log(**{"cleanup.policy": "compact", "segment.bytes": 1 << 24})
    for _ in range(60):
        recs = [RecordSpec(b"k%d" % rnd.randrange(30) if rnd.random() < 0.9 else None,
                           None if rnd.random() < 0.1 else rnd.randbytes(rnd.randrange(0, 3000)))
                for _ in range(rnd.randrange(1, 40))]
        recs = [r if r.key is not None or r.value is not None else RecordSpec(None, b"") for r in recs]
        log.append_records(recs, compression=rnd.choice([CompressionType.NONE] * 3 + [CompressionType.LZ4]))
    log.roll()
    return log


def _chunk_bytes(buf: bytearray, lo: int, hi: int) -> list[bytes]:
    return [b.raw.tobytes() for _p, b in iter_batches(bytes(buf[lo:hi]))]


@pytest.mark.parametrize("min_buffer", [64, 5000, 1 << 20])
@pytest.mark.parametrize("chunk", [1, 3000, 1 << 18])
def test_chunks_are_the_reference_chunks(make_log, record_kernels, monkeypatch, min_buffer, chunk):
    log = _big_log(make_log)
    seg = log.all_segments()[0]
    monkeypatch.setattr(fast_reader, "MIN_BUFFER", min_buffer)
    positions = [p for p, _b in seg.batches()]
    for start in (0, positions[1], positions[len(positions) // 2], positions[-1], seg.size):
        ref = [([b.raw.tobytes() for b in batches], size) for batches, size in _chunks(seg, start, chunk)]
        reader = ChunkReader(seg, start, record_kernels, chunk)
        got = []
        for buf, lo, hi in reader.chunks():
            assert positions.count(reader.file_base + lo) == 1  # chunks start at batch boundaries
            got.append((_chunk_bytes(buf, lo, hi), hi - lo))
        assert got == ref


def _set(data: bytearray, at: int, fmt: str, value: int) -> None:
    struct.pack_into(fmt, data, at, value)


def _fix_crc(data: bytearray, pos: int) -> None:
    size = struct.unpack_from(">i", data, pos + 8)[0] + 12
    _set(data, pos + 17, ">I", crc32c(memoryview(data)[pos + 21 : pos + size]))


DAMAGE = ["crc", "magic", "length_small", "length_past_end", "torn_batch", "torn_header", "negative_count",
          "too_many_records", "last_offset_delta", "records_in_empty_batch"]


def _damage(path: Path, kind: str, index: int) -> None:
    data = bytearray(path.read_bytes())
    positions = [p for p, _b in iter_batches(bytes(data))]
    pos = positions[index]
    size = struct.unpack_from(">i", data, pos + 8)[0] + 12
    if kind == "crc":
        data[pos + size - 1] ^= 0x20
    elif kind == "magic":
        data[pos + 16] = 1
    elif kind == "length_small":
        _set(data, pos + 8, ">i", 48)
    elif kind == "length_past_end":
        _set(data, pos + 8, ">i", len(data) - pos)
    elif kind == "torn_batch":
        del data[pos + size // 2 :]
    elif kind == "torn_header":
        del data[pos + 10 :]
    elif kind == "negative_count":
        _set(data, pos + 57, ">i", -1)
        _fix_crc(data, pos)
    elif kind == "too_many_records":
        _set(data, pos + 57, ">i", size)
        _fix_crc(data, pos)
    elif kind == "last_offset_delta":
        count = struct.unpack_from(">i", data, pos + 57)[0]
        _set(data, pos + 57, ">i", count + 1)
        _fix_crc(data, pos)
    elif kind == "records_in_empty_batch":
        _set(data, pos + 57, ">i", 0)
        _fix_crc(data, pos)
    path.write_bytes(bytes(data))


def _error(fn) -> CorruptRecordError:
    with pytest.raises(CorruptRecordError) as info:
        fn()
    return info.value


@pytest.mark.parametrize("kind", DAMAGE)
@pytest.mark.parametrize("min_buffer", [64, 1 << 20])
def test_damage_raises_the_reference_error(make_log, record_kernels, monkeypatch, kind, min_buffer):
    log = _big_log(make_log, seed=2)
    seg = log.all_segments()[0]
    n = len(list(seg.batches()))
    monkeypatch.setattr(fast_reader, "MIN_BUFFER", min_buffer)
    for index in (0, n // 2, n - 1):
        original = seg.log_path.read_bytes()
        _damage(seg.log_path, kind, index)
        seg.size = seg.log_path.stat().st_size
        for chunk in (1, 3000, 1 << 18):
            ref = _error(lambda chunk=chunk: list(_chunks(seg, 0, chunk)))
            got = _error(lambda chunk=chunk: list(ChunkReader(seg, 0, record_kernels, chunk).chunks()))
            assert (str(got), got.source, got.position) == (str(ref), ref.source, ref.position), (kind, index)
            assert got.source == str(seg.log_path)
        seg.log_path.write_bytes(original)
        seg.size = len(original)


def test_a_damaged_batch_stops_both_passes_of_a_compiled_round(make_log, record_kernels):
    log = _big_log(make_log, seed=3)
    seg = log.all_segments()[0]
    pos = [p for p, _b in seg.batches()][30]
    data = bytearray(seg.log_path.read_bytes())
    data[pos + 100] ^= 0x01
    seg.log_path.write_bytes(bytes(data))
    omap = CompactOffsetMap(1 << 16)
    txn = CleanedTransactionMetadata()
    err = _error(lambda: build_offset_map_from_segments([seg], 0, 10**9, omap, txn, max_entries=1000))
    assert (err.source, err.position) == (str(seg.log_path), pos)
    ctx = CleanContext(now_ms=0, delete_retention_ms=0, upper_bound_of_round=10**9, active_producers={},
                       txn_metadata=CleanedTransactionMetadata())
    with tempfile.TemporaryDirectory() as tmp:
        dest = LogSegment(Path(tmp), 0, create=True)
        err = _error(lambda: clean_into(seg, dest, omap, ctx, CleanerStats()))
        assert (err.source, err.position) == (str(seg.log_path), pos)
        dest.close()


def _compact_round(log: LocalLog, now: int, checkpoint: int | None = None) -> int:
    cfg = CleanerConfig(dedupe_buffer_size=24 * 1000)
    o = cleanable_offsets(log, checkpoint, now)
    ltc = LogToClean(log.topic_partition, log, o.first_dirty_offset, o.first_uncleanable_dirty_offset)
    end, _stats = Cleaner(CompactOffsetMap(16 * 1000), cfg).do_clean(ltc, now)
    return end


def test_the_rewrite_still_checks_what_the_map_pass_did_not_read(make_log, clock, record_kernels):
    """The rewriting pass skips the CRC only of the bytes the map pass checked this round: a
    damaged batch of the clean head (cleaned before, not mapped now) stops the round."""
    log = make_log(**{"cleanup.policy": "compact"})
    for k, v in ((b"a", b"old-a"), (b"b", b"old-b")):
        log.append_records([RecordSpec(k, v)])
    log.roll()
    end = _compact_round(log, clock.milliseconds())
    log.append_records([RecordSpec(b"a", b"new-a")])
    log.roll()
    seg = log.all_segments()[0]
    pos = flip_byte(seg.log_path, b"old-b")
    err = _error(lambda: _compact_round(log, clock.milliseconds(), checkpoint=end))
    assert (err.source, err.position) == (str(seg.log_path), pos)
    assert not list(log.dir.glob("*.cleaned")) and not list(log.dir.glob("*.swap"))


def test_a_checked_range_skips_the_crc_and_nothing_else(record_kernels):
    b = RecordBatchBuilder(0)
    b.append(0, 0, b"k", b"v")
    raw = bytearray(b.build())
    raw[-1] ^= 0x01  # CRC no longer matches
    frame = record_kernels.frame_batches
    assert frame(raw, 0, len(raw), 1, 0)[0] == record_kernels.FRAME_BAD
    assert frame(raw, 0, len(raw), 1, 0, 0, len(raw))[0] == record_kernels.FRAME_CHUNK
    assert frame(raw, 0, len(raw), 1, 0, 0, len(raw) - 1)[0] == record_kernels.FRAME_BAD  # not wholly inside
    struct.pack_into(">i", raw, 57, -1)  # a negative records count is refused all the same
    assert frame(raw, 0, len(raw), 1, 0, 0, len(raw))[0] == record_kernels.FRAME_BAD
