"""Kafka's documented compaction guarantees, checked against a replay model over random workloads."""

from __future__ import annotations

import tempfile
from pathlib import Path

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from log.clock import MockClock
from log.config import LogConfig
from log.local_log import LocalLog, RecordSpec
from tests.cleaner.model import (
    Producers,
    aborted_offsets,
    all_batches,
    clean_until_done,
    committed_records,
    latest_tombstones,
    replay,
)

KEYS = [b"k%d" % i for i in range(8)]
TXN_PIDS = (10, 11)

record = st.tuples(st.one_of(st.none(), st.sampled_from(KEYS)),
                   st.one_of(st.none(), st.binary(min_size=0, max_size=12)))
op = st.one_of(
    st.tuples(st.just("rec"), st.lists(record, min_size=1, max_size=3),
              st.sampled_from(["plain", "idem", "txn10", "txn11"]), st.integers(0, 50)),
    st.tuples(st.just("end"), st.sampled_from(TXN_PIDS), st.booleans()),
    st.tuples(st.just("roll")),
)


def _run(ops, segment_bytes: int, dedupe_entries: int, min_lag: int, clean_at_offset: int):
    clock = MockClock()
    with tempfile.TemporaryDirectory() as tmp:
        cfg = {"segment.bytes": segment_bytes, "delete.retention.ms": 10**9}
        if min_lag:
            cfg["min.compaction.lag.ms"] = min_lag
        log = LocalLog(Path(tmp) / "t-0", LogConfig.from_dict(cfg), clock=clock)
        prod = Producers(log)
        for o in ops:
            if o[0] == "rec":
                _, recs, kind, dt = o
                clock.advance(dt)
                specs = [RecordSpec(k, v if k is not None or v is not None else b"") for k, v in recs]
                if kind == "plain":
                    prod.append(specs)
                elif kind == "idem":
                    prod.append(specs, pid=1)
                else:
                    prod.append(specs, pid=int(kind[3:]), transactional=True)
            elif o[0] == "end":
                if o[1] in prod.open_txn:
                    prod.end(o[1], o[2])
            else:
                log.roll()
        log.roll()
        before = all_batches(log)
        now = clock.milliseconds() + clean_at_offset
        checkpoint = clean_until_done(log, now, dedupe_entries=dedupe_entries)
        after = all_batches(log)
        yield before, after, now, checkpoint
        # later, past delete.retention.ms: two more passes remove the stamped tombstones
        for _ in range(2):
            clean_until_done(log, now + 10**9 + 1, dedupe_entries=dedupe_entries)
        yield before, all_batches(log), None, checkpoint
        log.close()


@settings(max_examples=int(__import__("os").environ.get("TC_EXAMPLES", "150")), deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(ops=st.lists(op, min_size=1, max_size=60), segment_bytes=st.integers(150, 1500),
       dedupe_entries=st.integers(2, 12), min_lag=st.sampled_from([0, 0, 100, 1000]),
       clean_at_offset=st.integers(0, 2000))
def test_cleaning_keeps_the_guarantees(ops, segment_bytes, dedupe_entries, min_lag, clean_at_offset):
    for before, after, now, checkpoint in _run(ops, segment_bytes, dedupe_entries, min_lag, clean_at_offset):
        orig = committed_records(before)
        cleaned = committed_records(after)
        # same final state (read_committed), keyless records all kept
        assert replay(cleaned) == replay(orig)
        if now is None:
            continue
        # offsets never change and order is kept: every record is the original one at its offset
        by_offset = {r.offset: r for b in before if not b.is_control for r in b.records()}
        offsets = [r.offset for b in after if not b.is_control for r in b.records()]
        assert offsets == sorted(set(offsets))
        for b in after:
            if not b.is_control:
                for r in b.records():
                    o = by_offset[r.offset]
                    assert (r.key, r.value, r.timestamp, r.headers) == (o.key, o.value, o.timestamp, o.headers)
        batch_offsets = [(b.base_offset, b.last_offset) for b in after]
        assert all(a[1] < b[0] for a, b in zip(batch_offsets, batch_offsets[1:], strict=False))
        # nothing of an aborted transaction survives in the cleaned range
        assert not {o for o in aborted_offsets(before) if o < checkpoint} & set(offsets)
        # tombstones survive delete.retention.ms (which has not passed here)
        assert latest_tombstones(orig) <= {r.offset for r in cleaned}
        # a reader within min.compaction.lag.ms of the head sees every record
        if min_lag:
            young = {r.offset for r in orig if r.timestamp > now - min_lag}
            assert young <= {r.offset for r in cleaned}
