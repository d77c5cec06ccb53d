"""Fetch pages and index look-ups read a segment in small windows (log.segment.SCAN_BUFFER_SIZE),
growing the window for a batch larger than it: the answers are those of a whole-file scan."""

from __future__ import annotations

from log.fetch import read_local
from log.local_log import RecordSpec
from log.segment import SCAN_BUFFER_SIZE


def test_pages_and_lookups_across_batches_larger_than_the_read_window(make_log):
    # sparse index (one entry per MiB): look-ups scan forward across many windows
    log = make_log(segment_bytes=64 * 1024 * 1024, index_interval_bytes=1024 * 1024)
    big = b"v" * (SCAN_BUFFER_SIZE * 3 + 17)
    expected = {}
    for i in range(40):
        value = big if i % 7 == 3 else b"small-%d" % i
        res = log.append_records([RecordSpec(b"k%d" % j, value + b"%d" % j, None, ()) for j in range(3)])
        for j in range(3):
            expected[res.base_offset + j] = value + b"%d" % j
    end = log.log_end_offset
    for start in range(0, end, 5):
        page = read_local(log, start, max_bytes=1 << 20, max_records=4)
        got = [(r.offset, r.value) for r in page.records]
        assert got and got[0][0] == start
        assert all(expected[o] == v for o, v in got)
        assert [o for o, _ in got] == list(range(start, start + len(got)))
    seg = log.segments.all()[0]
    for target in (0, 50, end - 1):
        pos = seg.find_position(target)
        batch = next(b for _p, b in seg.batches(pos))
        assert batch.base_offset <= target <= batch.last_offset
