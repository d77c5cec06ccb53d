"""The per-segment fields (records removed by reason, bytes, object-store traffic) have one
definition, metadata.reports.SegmentCounts: the cleaner's running SegmentAccount and the
stored SegmentReport are built from it, and the report still behaves as a frozen value."""

from __future__ import annotations

import pickle
from dataclasses import FrozenInstanceError, asdict, fields, replace

import pytest

from cleaner.report import segment_reports
from cleaner.stats import CleanerStats, SegmentAccount
from log.errors import InvalidRequestError
from metadata.reports import REMOVAL_REASONS, SEGMENT_COUNTERS, SegmentCounts, SegmentReport


def test_account_and_report_share_the_one_field_definition() -> None:
    shared = [f.name for f in fields(SegmentCounts)]
    assert [f.name for f in fields(SegmentReport)] == shared
    assert [f.name for f in fields(SegmentAccount)] == [*shared, "log_downloads"]
    assert set(REMOVAL_REASONS) <= set(SEGMENT_COUNTERS)


def test_report_is_an_immutable_hashable_value() -> None:
    r = SegmentReport("s1", "rewritten", 0, 9, superseded=3, marker=1, downloaded=100, requests=2)
    with pytest.raises(FrozenInstanceError):
        r.superseded = 4  # type: ignore[misc]
    with pytest.raises(FrozenInstanceError):
        del r.action
    same = SegmentReport("s1", "rewritten", 0, 9, superseded=3, marker=1, downloaded=100, requests=2)
    assert r == same and hash(r) == hash(same) and len({r, same}) == 1
    assert replace(r, superseded=5).superseded == 5 and r.superseded == 3
    assert pickle.loads(pickle.dumps(r)) == r
    assert r.removed == {"superseded": 3, "tombstone": 0, "aborted": 0, "marker": 1}
    assert r.as_dict() == {"segment_id": "s1", "action": "rewritten", "base_offset": 0, "end_offset": 9,
                           "removed": r.removed, "bytes_in": 0, "bytes_out": 0, "downloaded": 100, "uploaded": 0,
                           "requests": 2}
    with pytest.raises(InvalidRequestError):
        SegmentReport("s1", "no-such-action")
    with pytest.raises(InvalidRequestError):
        SegmentReport("s1", "rewritten", tombstone=-1)


def test_a_measured_account_becomes_the_same_report() -> None:
    stats = CleanerStats()
    account = stats.account("s1", "rewritten", 10, 19)
    with stats.measure(account):
        stats.bytes_read += 70
        stats.bytes_written += 30
        stats.removed_superseded += 4
        stats.removed_tombstone += 1
        stats.removed_discarded_batch(True, 2)
        stats.removed_discarded_batch(False, 5)
    account.downloaded += 70
    account.requests += 1
    account.log_downloads += 1
    assert stats.records_removed == {"superseded": 4, "tombstone": 1, "aborted": 5, "marker": 2}
    assert account.removed == stats.records_removed
    (report,) = segment_reports([account])
    assert report == SegmentReport("s1", "rewritten", 10, 19, superseded=4, tombstone=1, aborted=5, marker=2,
                                   bytes_in=70, bytes_out=30, downloaded=70, requests=1)
    assert {k: v for k, v in asdict(account).items() if k != "log_downloads"} == asdict(report)
    account.superseded += 1  # the account stays mutable; the report is a copy
    assert report.superseded == 4
