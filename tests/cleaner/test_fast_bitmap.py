"""The supersession bitmap (cleaner/fast_cleaner.py: the rewriting pass decides a record the map
pass put without hashing its key again) answers what the digest look-up answers: logs with
overlapping batches and repeated or decreasing record offsets clean to the same bytes, stats
and errors with the compiled kernels (bitmap, chunk loops) as with the pure-Python ones (every
key looked up, batch by batch), and the bitmap turns itself off where an offset may name two
records.
"""

from __future__ import annotations

import tempfile
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from cleaner import fast_cleaner, fast_reader
from cleaner.kernels import fastpath
from log.record.builder import _write_header_and_crc
from log.record.varint import encode_varint, encode_varlong
from log.segment import LogSegment
from tests.cleaner.kernel_runs import map_then_clean


def _raw_batch(base: int, records: list[tuple[int, bytes | None, bytes | None]], pid: int = -1) -> bytes:
    """A batch holding ``records`` (offset delta, key, value) as given: the builder would refuse
    repeated or decreasing offsets, the cleaner must not."""
    body = bytearray()
    for od, key, value in records:
        r = bytearray(b"\x00") + encode_varlong(0) + encode_varint(od)
        r += encode_varint(-1) if key is None else encode_varint(len(key)) + key
        r += encode_varint(-1) if value is None else encode_varint(len(value)) + value
        r += encode_varint(0)
        body += encode_varint(len(r)) + r
    lod = max([len(records) - 1] + [od for od, _k, _v in records])
    return _write_header_and_crc(bytearray(61) + body, base_offset=base, partition_leader_epoch=0, attributes=0,
                                 last_offset_delta=lod, base_timestamp=1000, max_timestamp=1000, producer_id=pid,
                                 producer_epoch=0 if pid >= 0 else -1, base_sequence=-1,
                                 records_count=len(records))


record = st.tuples(st.sampled_from([1, 1, 1, 2, 0, -1]), st.sampled_from([None, b"a", b"b", b"c", b"d"]),
                   st.sampled_from([None, b"v", b"value"]))
batch = st.tuples(st.integers(-3, 8), st.lists(record, min_size=1, max_size=6), st.sampled_from([-1, -1, 7]))


def _segment(directory: Path, batches: list[tuple[int, list, int]]) -> LogSegment:
    seg = LogSegment(directory, 0, create=True, index_interval_bytes=64)
    base = 100
    for step, recs, pid in batches:
        base = max(base + step, 0)
        od, records = 0, []
        for d, key, value in recs:
            records.append((od, key, value if key is not None or value is not None else b""))
            od += d
        raw = _raw_batch(base, records, pid)
        last = base + max([len(records) - 1] + [o for o, _k, _v in records])
        seg.append(raw, largest_offset=last, largest_timestamp=1000, offset_of_largest_timestamp=last)
    seg.close_writer()
    return seg


def _run(kernels, directory: Path, batches, start: int, max_entries: int):
    """Map then clean one segment with ``kernels``; the output bytes, stats, error and map."""
    return map_then_clean(kernels, _segment(directory / "src", batches), directory / "out", start=start,
                          max_entries=max_entries)


@pytest.fixture
def record_kernels():
    """The bitmap tests compare the two kernels themselves: no need for conftest's two runs."""
    return None


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(batches=st.lists(batch, min_size=1, max_size=25), start=st.integers(90, 140),
       max_entries=st.sampled_from([2, 3, 1000]), tiny_reads=st.booleans(), holes=st.booleans())
def test_odd_offsets_clean_alike_with_and_without_the_bitmap(batches, start, max_entries, tiny_reads, holes):
    compiled = fastpath.compiled_kernels()
    default_buffer = fast_reader.MIN_BUFFER
    fast_reader.MIN_BUFFER = 64 if tiny_reads else default_buffer
    # holes: runs of wholly superseded batches, however small, are not read by the rewriting pass
    default_holes = fast_cleaner.NOTE_MIN_BYTES, fast_cleaner.MIN_HOLE_BYTES
    if holes:
        fast_cleaner.NOTE_MIN_BYTES, fast_cleaner.MIN_HOLE_BYTES = 0, 1
    try:
        with tempfile.TemporaryDirectory() as tmp:
            (Path(tmp) / "c").mkdir()
            (Path(tmp) / "p").mkdir()
            got = _run(compiled, Path(tmp) / "c", batches, start, max_entries)
            ref = _run(fastpath.pure_kernels(), Path(tmp) / "p", batches, start, max_entries)
    finally:
        fast_reader.MIN_BUFFER = default_buffer
        fast_cleaner.NOTE_MIN_BYTES, fast_cleaner.MIN_HOLE_BYTES = default_holes
    assert got[:3] == ref[:3]


def test_an_ordinary_log_is_decided_by_the_bitmap():
    with tempfile.TemporaryDirectory() as tmp:
        batches = [(0, [(1, b"a", b"1"), (1, b"b", b"2"), (1, b"a", b"3")], -1),
                   (3, [(1, b"b", None), (1, b"c", b"4")], -1)]
        (Path(tmp) / "c").mkdir()
        _files, stats, error, omap = _run(fastpath.compiled_kernels(), Path(tmp) / "c", batches, 0, 1000)
        assert error is None and omap.table.bits_ok and omap.table.bitmap_bytes > 0
        assert stats["records_retained"] == 3  # b"a" at 100 and b"b" at 101 superseded


def test_the_bitmap_turns_off_where_an_offset_may_name_two_records():
    k = fastpath.compiled_kernels()
    t = k.KeyTable(1000)
    t.reset(bytes(16))
    t.note_batch(0, 9)
    t.note_batch(10, 19)
    assert t.bits_ok
    t.note_batch(15, 20)  # overlaps the last batch
    assert not t.bits_ok
    cases = [([(0, b"a", b"1"), (1, b"b", b"2")], 101, True),
             ([(0, b"a", b"1"), (0, b"b", b"2")], 101, False),  # an offset twice
             ([(0, b"a", b"1"), (2, b"b", b"2"), (1, b"c", b"3")], 102, False),  # decreasing
             ([(0, b"a", b"1"), (5, b"b", b"2")], 101, False)]  # past the batch's last offset
    for records, last, fine in cases:
        t.reset(bytes(16))
        t.note_batch(100, last)
        assert k.map_records(t, _raw_batch(100, records)[61:], len(records), 100, 0, 1000)[0] == k.OK
        assert t.bits_ok == fine, records
    t.put(b"x", 500, 1000)  # a put from Python names no batch's record
    assert not t.bits_ok
