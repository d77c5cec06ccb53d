"""The cleaner counts every record it drops by reason (superseded, expired tombstone, aborted,
marker), per round and per source segment, with the record kernels and with the reference loop."""

from __future__ import annotations

import pytest

from cleaner.cleaner import Cleaner
from cleaner.config import CleanerConfig
from cleaner.log_to_clean import LogToClean, cleanable_offsets
from cleaner.offset_map import CompactOffsetMap, SkimpyOffsetMap
from cleaner.stats import CleanerStats
from log.clock import MockClock
from log.local_log import LocalLog, RecordSpec
from tests.cleaner.model import Producers, all_batches

DAY = 86_400_000


def _round(log: LocalLog, now: int, kind: str) -> CleanerStats:
    cfg = CleanerConfig(dedupe_buffer_size=24 * 1000, load_factor=1.0)
    o = cleanable_offsets(log, None, now)
    ltc = LogToClean(log.topic_partition, log, o.first_dirty_offset, o.first_uncleanable_dirty_offset)
    omap = CompactOffsetMap(16 * 1000) if kind == "kernels" else SkimpyOffsetMap(24 * 1000)
    return Cleaner(omap, cfg).do_clean(ltc, now)[1]


def _sum_accounts(stats: CleanerStats) -> dict[str, int]:
    return {k: sum(getattr(a, k) for a in stats.segment_accounts)
            for k in ("superseded", "tombstone", "aborted", "marker")}


@pytest.mark.parametrize("kind", ["kernels", "reference"])
def test_removals_are_counted_by_reason(make_log, clock: MockClock, kind: str) -> None:
    log = make_log(**{"delete.retention.ms": DAY, "segment.bytes": 200})
    p = Producers(log)
    p.append([RecordSpec(b"a", b"aborted")], pid=9, transactional=True)   # 0
    p.end(9, commit=False)                                                # 1: ABORT marker
    p.append([RecordSpec(b"f", b"1")], pid=9)                             # 2: pid 9's last batch
    for k, v in ((b"a", b"1"), (b"a", b"2"), (b"b", None), (b"c", b"1")):  # 3..6
        log.append_records([RecordSpec(k, v)])
    log.append_records([RecordSpec(b"d", b"1"), RecordSpec(b"d", b"2"), RecordSpec(b"e", None)])  # 7..9
    log.roll()
    now = clock.milliseconds()

    first = _round(log, now, kind)
    # a@3 and d@7 are superseded; the aborted record goes; tombstones and the marker stay for now
    assert first.records_removed == {"superseded": 2, "tombstone": 0, "aborted": 1, "marker": 0}
    assert first.as_dict()["records_removed"] == first.records_removed
    assert _sum_accounts(first) == first.records_removed
    assert len(first.segment_accounts) == len({a.segment_id for a in first.segment_accounts}) > 1
    assert {a.action for a in first.segment_accounts} == {"cleaned-local"}
    assert sum(a.bytes_in for a in first.segment_accounts) == first.bytes_read
    assert sum(a.bytes_out for a in first.segment_accounts) == first.bytes_written
    assert [a.segment_id for a in first.segment_accounts] == [f"{a.base_offset:020d}" for a in first.segment_accounts]

    second = _round(log, now + 1, kind)  # the marker is stamped with its horizon: nothing removed
    assert second.records_removed == {"superseded": 0, "tombstone": 0, "aborted": 0, "marker": 0}

    third = _round(log, now + 1 + DAY, kind)  # horizons passed: tombstones b, e and the marker go
    assert third.records_removed == {"superseded": 0, "tombstone": 2, "aborted": 0, "marker": 1}
    assert _sum_accounts(third) == third.records_removed
    kept = {(r.key, r.value) for b in all_batches(log) if not b.is_control for r in b.records()}
    assert kept == {(b"a", b"2"), (b"c", b"1"), (b"d", b"2"), (b"f", b"1")}
