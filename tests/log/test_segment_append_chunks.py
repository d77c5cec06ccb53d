"""LogSegment.append_chunks (one write for many appends, the cleaner's output) leaves the same
files and state as one append per chunk."""

from __future__ import annotations

import random
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from log.errors import LogSegmentOffsetOverflowError
from log.record import RecordBatchBuilder
from log.segment import LogSegment


def _chunks(seed: int, n: int) -> list[tuple[bytes, int, int, int]]:
    """``n`` chunks of 1-4 batches: (bytes, largest offset, max timestamp, its offset)."""
    rnd = random.Random(seed)
    out = []
    off = 1000
    for _ in range(n):
        data = b""
        max_ts, max_off = -1, -1
        for _ in range(rnd.randrange(1, 5)):
            b = RecordBatchBuilder(off)
            for _ in range(rnd.randrange(1, 20)):
                ts = rnd.choice([-1, 5, 1_700_000_000_000 + rnd.randrange(10**6)])
                b.append(off, ts, b"k%d" % rnd.randrange(9), rnd.randbytes(rnd.randrange(0, 300)))
                if ts > max_ts:
                    max_ts, max_off = ts, off
                off += rnd.randrange(1, 3)
            data += b.build()
        out.append((data, off - 1, max_ts, max_off if max_off >= 0 else off - 1))
    return out


def _state(seg: LogSegment) -> tuple:
    seg.flush()
    files = tuple(p.read_bytes() for p in (seg.log_path, seg.offset_index.path, seg.time_index.path))
    return (files, seg.size, seg.max_timestamp_so_far, seg.offset_of_max_timestamp_so_far,
            seg.read_next_offset(), seg._first_batch_timestamp, seg._bytes_since_last_index_entry)


@settings(max_examples=60, deadline=None)
@given(seed=st.integers(0, 10**6), n=st.integers(1, 30), interval=st.sampled_from([1, 200, 4096, 10**6]),
       splits=st.lists(st.integers(1, 30), max_size=6), first=st.booleans())
def test_append_chunks_is_one_append_per_chunk(tmp_path_factory, seed, n, interval, splits, first):
    chunks = _chunks(seed, n)
    root = tmp_path_factory.mktemp("seg")
    one, many = root / "one", root / "many"
    one.mkdir()
    many.mkdir()
    a = LogSegment(one, 1000, create=True, index_interval_bytes=interval)
    b = LogSegment(many, 1000, create=True, index_interval_bytes=interval)
    if first:  # appends to a segment that already holds data too
        a.append(chunks[0][0], largest_offset=chunks[0][1], largest_timestamp=chunks[0][2],
                 offset_of_largest_timestamp=chunks[0][3])
        b.append(chunks[0][0], largest_offset=chunks[0][1], largest_timestamp=chunks[0][2],
                 offset_of_largest_timestamp=chunks[0][3])
        chunks = chunks[1:]
    for data, largest, ts, ts_off in chunks:
        a.append(data, largest_offset=largest, largest_timestamp=ts, offset_of_largest_timestamp=ts_off)
    # the same chunks in a few append_chunks calls
    bounds = sorted({0, len(chunks), *(s % (len(chunks) + 1) for s in splits)})
    for lo, hi in zip(bounds, bounds[1:], strict=False):
        group = chunks[lo:hi]
        data = bytearray()
        marks = []
        for d, largest, ts, ts_off in group:
            data += d
            marks.append((len(data), largest, ts, ts_off))
        b.append_chunks(data, marks)
    assert _state(a) == _state(b)
    a.close()
    b.close()


def test_append_chunks_checks_every_offset_before_writing(tmp_path: Path):
    seg = LogSegment(tmp_path, 0, create=True)
    data = _chunks(1, 2)
    with pytest.raises(LogSegmentOffsetOverflowError):
        seg.append_chunks(data[0][0] + data[1][0], [(len(data[0][0]), 5, 1, 5),
                                                     (len(data[0][0]) + len(data[1][0]), 2**32, 1, 2**32)])
    assert seg.size == 0 and seg.log_path.stat().st_size == 0
    seg.close()
