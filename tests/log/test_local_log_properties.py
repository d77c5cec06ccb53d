"""Property: append then read returns exactly what was appended, across rolls and reopen."""

from __future__ import annotations

import tempfile
from pathlib import Path

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from log.clock import MockClock
from log.config import LogConfig
from log.fetch import records_from_batches
from log.local_log import LocalLog, RecordSpec
from log.record import CompressionType

keys = st.one_of(st.none(), st.binary(max_size=12))
values = st.one_of(st.none(), st.binary(max_size=60))
headers = st.lists(st.tuples(st.text(max_size=5), st.one_of(st.none(), st.binary(max_size=5))), max_size=2)
record = st.builds(lambda k, v, h, t: RecordSpec(k, v, t, tuple(h)), keys, values, headers,
                   st.integers(min_value=0, max_value=2**41))
batch = st.tuples(st.lists(record, min_size=1, max_size=6), st.sampled_from(list(CompressionType)))


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(batches=st.lists(batch, min_size=1, max_size=25), segment_bytes=st.integers(200, 3000),
       reopen_at=st.integers(0, 25))
def test_append_then_read_round_trips(batches, segment_bytes, reopen_at):
    with tempfile.TemporaryDirectory() as d:
        path = Path(d) / "p-0"
        cfg = LogConfig.from_dict({"segment.bytes": segment_bytes, "index.interval.bytes": 128})
        clock = MockClock()
        log = LocalLog(path, cfg, clock=clock)
        expected = []
        for i, (recs, codec) in enumerate(batches):
            if i == reopen_at:
                log.close()
                log = LocalLog(path, cfg, clock=clock)
            res = log.append_records(recs, compression=codec)
            expected.extend((res.base_offset + j, r.key, r.value, r.headers, r.timestamp) for j, r in enumerate(recs))
        got = records_from_batches(log.read(0, max_bytes=1 << 30), 0, max_records=10**9).records
        assert [(r.offset, r.key, r.value, r.headers, r.timestamp) for r in got] == expected
        # reading from any offset starts exactly there
        mid = len(expected) // 2
        got_mid = records_from_batches(log.read(mid, max_bytes=1 << 30), mid, max_records=10**9).records
        assert [r.offset for r in got_mid] == [e[0] for e in expected[mid:]]
        log.close()
