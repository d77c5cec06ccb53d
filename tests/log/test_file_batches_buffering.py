"""iter_file_batches reads a file in buffers (one new buffer per refill, the file read straight
into it): whatever the buffer size, batch sizes, end position or a truncated tail, it yields
exactly the batches (and positions) an in-memory walk of the same bytes yields."""

from __future__ import annotations

import io
import random

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from log.errors import CorruptRecordError
from log.record import RecordBatchBuilder, iter_batches, iter_file_batches
from log.record.records import HEADER_SIZE_UP_TO_MAGIC


def _log_bytes(sizes: list[int], seed: int) -> bytes:
    rnd = random.Random(seed)
    out = bytearray()
    off = 0
    for n in sizes:
        b = RecordBatchBuilder(off)
        for i in range(n):
            b.append(off + i, 1000, b"k%d" % i, rnd.randbytes(rnd.randrange(0, 3000)))
        off += n
        out += b.build()
    return bytes(out)


def _walk(it) -> list[tuple[int, bytes]] | str:
    try:
        return [(p, bytes(b.raw)) for p, b in it]
    except CorruptRecordError as e:
        return f"corrupt: {e}"


@settings(max_examples=150, deadline=None)
@given(sizes=st.lists(st.integers(1, 12), min_size=0, max_size=6), seed=st.integers(0, 1000),
       buffer_size=st.sampled_from([HEADER_SIZE_UP_TO_MAGIC, 100, 4096, 1 << 20]), cut=st.integers(0, 50),
       start_batch=st.integers(0, 6), as_path=st.booleans(), truncated_ok=st.booleans())
def test_file_walk_equals_memory_walk(tmp_path_factory, sizes, seed, buffer_size, cut, start_batch, as_path,
                                      truncated_ok):
    data = _log_bytes(sizes, seed)
    starts = [p for p, _b in iter_batches(data)] + [len(data)]
    start = starts[min(start_batch, len(starts) - 1)]
    end = max(start, len(data) - cut)
    expected = _walk((start + p, b) for p, b in iter_batches(data[start:end], allow_truncated_tail=truncated_ok))
    if as_path:
        path = tmp_path_factory.mktemp("f") / "00.log"
        path.write_bytes(data)
        src = path
    else:
        src = io.BytesIO(data)
    got = _walk(iter_file_batches(src, start, end, allow_truncated_tail=truncated_ok, buffer_size=buffer_size))
    if isinstance(expected, str) or isinstance(got, str):
        assert isinstance(expected, str) and isinstance(got, str)  # both refuse (messages name positions)
    else:
        assert got == expected


def test_a_batch_larger_than_the_buffer_is_read_whole():
    data = _log_bytes([40, 1, 40], 1)
    got = list(iter_file_batches(io.BytesIO(data), buffer_size=1024))
    assert [bytes(b.raw) for _p, b in got] == [bytes(b.raw) for _p, b in iter_batches(data)]
    assert all(len(b.raw) > 1024 for _p, b in got[::2])
    with pytest.raises(ValueError):
        list(iter_file_batches(io.BytesIO(data), buffer_size=HEADER_SIZE_UP_TO_MAGIC - 1))


def test_a_path_is_read_through_one_descriptor_closed_however_the_walk_ends(tmp_path):
    """A path is opened once and read with pread (no file object's fstat and lseek); the
    descriptor is closed when the walk ends, is abandoned half-way or fails."""
    import os

    data = _log_bytes([3, 5, 2], 7)
    path = tmp_path / "00.log"
    path.write_bytes(data)
    fds = lambda: len(os.listdir("/proc/self/fd"))  # noqa: E731
    before = fds()
    assert _walk(iter_file_batches(path, 0, buffer_size=100)) == _walk(iter_batches(data))
    walk = iter_file_batches(path, 0)
    next(walk)
    assert fds() == before + 1
    walk.close()  # a fetch page that stopped early
    assert fds() == before
    path.write_bytes(data[:-5])
    with pytest.raises(CorruptRecordError):
        list(iter_file_batches(path, 0))
    assert fds() == before
    with pytest.raises(FileNotFoundError):
        list(iter_file_batches(tmp_path / "gone.log", 0))
