"""cleaner.report: outcomes from exceptions, reports from stats, and a reporter that counts rounds
and never fails one because the metadata store would not take its report."""

from __future__ import annotations

from typing import Any

import pytest

from cleaner.errors import LogCleaningAbortedError, ThreadShutdownError
from cleaner.report import RoundReporter, build_report, outcome_of
from cleaner.stats import CleanerStats
from log.types import TopicPartition
from metadata import load_metadata_manager
from metadata.errors import FencedLeaderEpochError, MetadataStoreError

TP = TopicPartition("t", 0)


def test_outcome_of() -> None:
    assert outcome_of(None) == "completed"
    assert outcome_of(FencedLeaderEpochError(TP, 1, 2, 0, "publish")) == "fenced"
    assert outcome_of(LogCleaningAbortedError("paused", TP)) == "aborted"
    assert outcome_of(ThreadShutdownError("stopping", TP)) == "aborted"
    assert outcome_of(OSError("disk")) == "failed"


def _stats() -> CleanerStats:
    stats = CleanerStats(topic_partition=TP)
    up = stats.account("b" * 32, "uploaded", 0, 99)
    up.uploaded = 700
    src = stats.account("a" * 32, "rewritten", 0, 99)
    src.superseded, src.bytes_in, src.bytes_out = 3, 900, 600
    stats.account("c" * 32, "skipped-by-bloom", 100, 199)
    return stats


def test_build_report_orders_segments_and_drops_the_checkpoint_of_an_unfinished_round() -> None:
    r = build_report(TP, engine="tiered", leader_epoch=4, started_ms=10, ended_ms=20, checkpoint_before=0,
                     checkpoint_after=100, stats=_stats())
    assert [(s.segment_id[0], s.action) for s in r.segments] == [("a", "rewritten"), ("b", "uploaded"),
                                                                 ("c", "skipped-by-bloom")]
    assert (r.outcome, r.checkpoint_after, r.error) == ("completed", 100, None)
    assert r.removed["superseded"] == 3 and r.totals()["uploaded"] == 700
    failed = build_report(TP, engine="local", leader_epoch=0, started_ms=10, ended_ms=5, checkpoint_before=0,
                          checkpoint_after=100, error=OSError("disk says no"))
    assert (failed.outcome, failed.checkpoint_after, failed.error) == ("failed", None, "OSError: disk says no")
    assert failed.ended_ms == failed.started_ms  # a clock that stepped back does not make it invalid


class _BrokenStore:
    def record_compaction_report(self, report: Any, **kw: Any) -> None:
        raise MetadataStoreError("database is down", retriable=True)


def test_the_reporter_counts_and_survives_a_store_that_refuses() -> None:
    reporter = RoundReporter(_BrokenStore())  # type: ignore[arg-type]
    r = build_report(TP, engine="tiered", leader_epoch=4, started_ms=1, ended_ms=2, checkpoint_before=0,
                     checkpoint_after=100, stats=_stats())
    assert reporter.record(r) is r
    assert reporter.failed_writes == 1
    assert reporter.records_removed()[("tiered", "superseded")] == 3
    assert reporter.rounds()[("tiered", "completed")] == 1


@pytest.mark.parametrize("engine", ["local", "tiered", "spark"])
def test_the_reporter_records_in_the_store(engine: str) -> None:
    with load_metadata_manager("sqlite:///:memory:") as rlmm:
        reporter = RoundReporter(rlmm)
        r = reporter.record(build_report(TP, engine=engine, leader_epoch=0, started_ms=1, ended_ms=2,
                                         checkpoint_before=0, checkpoint_after=None,
                                         error=LogCleaningAbortedError("paused", TP)))
        assert rlmm.list_compaction_reports(TP) == [r]
        assert r.outcome == "aborted" and reporter.rounds()[(engine, "aborted")] == 1
