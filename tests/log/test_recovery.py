"""Recovery on open: torn tails, mid-file corruption, swap crashes, lost indexes."""

from __future__ import annotations

import os

import pytest

from log.errors import CorruptRecordError
from log.fetch import records_from_batches
from log.local_log import CLEAN_SHUTDOWN_FILE, RecordSpec, SimulatedCrash


def _append_n(log, n, start=0):
    for i in range(start, start + n):
        log.append_records([RecordSpec(f"k{i}".encode(), f"v{i}".encode())])


def _values(log):
    batches = log.read(log.log_start_offset, max_bytes=1 << 30)
    return [(r.offset, r.value) for r in records_from_batches(batches, log.log_start_offset,
                                                                max_records=10**9).records]


def _crash(log):
    """Drop the log without a clean shutdown (as if the process died)."""
    for seg in log.all_segments():
        seg.close()
    (log.dir / CLEAN_SHUTDOWN_FILE).unlink(missing_ok=True)


def test_torn_tail_is_truncated_and_valid_batches_kept(make_log):
    log = make_log()
    _append_n(log, 10)
    path = log.active_segment.log_path
    size = path.stat().st_size
    _crash(log)
    with open(path, "r+b") as f:  # half of the last batch reached the disk
        f.truncate(size - 20)
    log2 = make_log()
    assert [o for o, _ in _values(log2)] == list(range(9))
    assert log2.log_end_offset == 9
    _append_n(log2, 1, start=9)  # appends continue at the right offset
    assert [o for o, _ in _values(log2)] == list(range(10))


def test_bad_crc_on_last_batch_is_a_torn_tail(make_log):
    log = make_log()
    _append_n(log, 5)
    path = log.active_segment.log_path
    _crash(log)
    data = bytearray(path.read_bytes())
    data[-3] ^= 0xFF
    path.write_bytes(bytes(data))
    log2 = make_log()
    assert [o for o, _ in _values(log2)] == list(range(4))


def test_corruption_in_the_middle_is_reported_not_truncated(make_log):
    log = make_log()
    _append_n(log, 5)
    path = log.active_segment.log_path
    _crash(log)
    data = bytearray(path.read_bytes())
    data[70] ^= 0xFF  # inside the second batch; valid batches follow it
    path.write_bytes(bytes(data))
    with pytest.raises(CorruptRecordError) as err:
        make_log()
    assert str(path) in str(err.value) and "byte" in str(err.value)
    assert path.stat().st_size == len(data)  # nothing was dropped


def test_missing_and_corrupt_indexes_are_rebuilt(make_log):
    log = make_log(segment_bytes=600, index_interval_bytes=100)
    _append_n(log, 40)
    first = log.all_segments()[0]
    idx_bytes = first.offset_index.path.read_bytes()
    log.close()
    first.offset_index.path.unlink()
    (log.dir / f"{log.all_segments()[1].base_offset:020d}.timeindex").write_bytes(b"\x00" * 7)  # bad length
    log2 = make_log(segment_bytes=600, index_interval_bytes=100)
    assert first.offset_index.path.read_bytes() == idx_bytes
    assert [o for o, _ in _values(log2)] == list(range(40))
    assert log2.read(17)[0].base_offset == 17


@pytest.mark.parametrize("step", ["renamed_to_swap", "renamed_to_deleted", "renamed_from_swap", "before_swap"])
def test_crash_at_each_swap_step_leaves_every_record_once(make_log, step):
    """Replace segments 0..2 by one 'cleaned' segment holding the same records; crash at a step."""
    log = make_log(segment_bytes=300)
    _append_n(log, 30)
    olds = log.all_segments()[:3]
    expected = _values(log)
    cleaned = log.create_cleaned_segment(olds[0].base_offset)
    for seg in olds:
        for _p, b in seg.batches():
            cleaned.append(b.raw, largest_offset=b.last_offset, largest_timestamp=b.max_timestamp,
                           offset_of_largest_timestamp=b.last_offset)
    cleaned.on_become_inactive()
    calls = []

    def hook(name):
        calls.append(name)
        if name == step:
            raise SimulatedCrash(name)

    log.crash_hook = hook
    if step == "before_swap":
        _crash(log)
    else:
        with pytest.raises(SimulatedCrash):
            log.replace_segments([cleaned], olds)
        _crash(log)
    log2 = make_log(segment_bytes=300)
    assert _values(log2) == expected
    leftovers = [p.name for p in log2.dir.iterdir() if p.name.endswith((".swap", ".cleaned", ".deleted"))]
    assert leftovers == []


def test_swap_replaces_old_segments(make_log):
    log = make_log(segment_bytes=300)
    _append_n(log, 30)
    olds = log.all_segments()[:3]
    cleaned = log.create_cleaned_segment(olds[0].base_offset)
    for seg in olds:
        for _p, b in seg.batches():
            if b.base_offset % 2 == 0:
                cleaned.append(b.raw, largest_offset=b.last_offset, largest_timestamp=b.max_timestamp,
                               offset_of_largest_timestamp=b.last_offset)
    cleaned.on_become_inactive()
    last_old_mtime = olds[-1].last_modified
    cleaned.set_last_modified(last_old_mtime)
    log.replace_segments([cleaned], olds)
    segs = log.all_segments()
    assert segs[0].base_offset == 0 and segs[1].base_offset == olds[-1].read_next_offset()
    kept = [o for o, _ in _values(log) if o < segs[1].base_offset]
    assert kept == [o for o in range(segs[1].base_offset) if o % 2 == 0]
    assert not any(p.name.endswith((".swap", ".cleaned")) for p in log.dir.iterdir())
    assert os.path.getmtime(segs[0].log_path) * 1000 == pytest.approx(last_old_mtime, abs=1)
