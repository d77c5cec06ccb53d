"""read_raw returns stored batches byte for byte: from the batch holding the offset, whole
batches up to the limit, the first batch whole even past the limit, bounded by max_offset."""

from __future__ import annotations

import pytest

from log.errors import OffsetOutOfRangeError
from log.fetch_raw import read_raw
from log.local_log import RecordSpec
from log.record import iter_batches


def _fill(log, n_batches=30, per=3, big_every=7):
    for i in range(n_batches):
        value = b"x" * 5000 if i % big_every == 3 else b"v%d" % i
        log.append_records([RecordSpec(b"k%d" % j, value, None, ()) for j in range(per)])
        if i % 10 == 9:
            log.roll()


def _stored(log):
    out = {}
    for seg in log.all_segments():
        for _p, b in seg.batches(0):
            out[b.base_offset] = bytes(b.raw)
    return out


def test_every_offset_reads_the_stored_batches_from_the_one_holding_it(make_log):
    log = make_log(segment_bytes=1 << 20, index_interval_bytes=128)
    _fill(log)
    stored = _stored(log)
    end = log.log_end_offset
    for off in range(end):
        res = read_raw(log, off, 1 << 20)
        batches = [b for _p, b in iter_batches(res.data)]
        assert batches[0].base_offset <= off <= batches[0].last_offset
        assert [bytes(b.raw) for b in batches] == [stored[b.base_offset] for b in batches]
        assert batches[-1].next_offset == res.next_offset == end
    assert read_raw(log, end, 100).data == b""
    with pytest.raises(OffsetOutOfRangeError):
        read_raw(log, end + 1, 100)


def test_limits(make_log):
    log = make_log(segment_bytes=1 << 20, index_interval_bytes=128)
    _fill(log)
    stored = _stored(log)
    bases = sorted(stored)
    big = next(b for b in bases if len(stored[b]) > 5000)
    res = read_raw(log, big, 10)  # the first batch whole, bigger than the limit
    assert res.data == stored[big]
    assert read_raw(log, big, 10, min_one=False).data == b""
    res = read_raw(log, 0, 300)
    got = [b for _p, b in iter_batches(res.data)]
    assert len(res.data) <= 300 and got and got[0].base_offset == 0
    res = read_raw(log, 0, 1 << 20, max_offset=bases[4] + 1)
    assert [b.base_offset for _p, b in iter_batches(res.data)] == bases[:5]
