"""Round reports in the metadata store: recorded, listed newest first, paged, pruned, kept
across reopen and schema upgrade; on every backend (SQLite memory/file, PostgreSQL)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from sqlalchemy import create_engine, delete, insert, inspect, select

from log.errors import InvalidRequestError
from log.types import TopicPartition
from metadata.reports import (
    ACTION_REWRITTEN,
    ACTION_SKIPPED_BY_BLOOM,
    ACTION_UPLOADED,
    ENGINE_LOCAL,
    ENGINE_TIERED,
    OUTCOME_COMPLETED,
    OUTCOME_FENCED,
    CompactionReport,
    SegmentReport,
    new_round_id,
)
from metadata.sql import SqlRemoteLogMetadataManager
from metadata.sql.schema import SCHEMA_VERSION, round_segments, rounds, schema_version
from tests.contract.conftest import open_manager

TP = TopicPartition("orders", 0)
OTHER = TopicPartition("orders", 1)


@pytest.fixture
def mdm(metadata_backend: str, tmp_path: Path) -> Iterator[SqlRemoteLogMetadataManager]:
    m = open_manager(metadata_backend, tmp_path)
    yield m
    m.close()


def report(n: int, *, tp: TopicPartition = TP, outcome: str = OUTCOME_COMPLETED,
           segments: tuple[SegmentReport, ...] = ()) -> CompactionReport:
    return CompactionReport(round_id=f"round-{tp.partition}-{n:04d}", topic_partition=tp, engine=ENGINE_TIERED, leader_epoch=3,
                            started_ms=1000 * n, ended_ms=1000 * n + 5, checkpoint_before=10 * n,
                            checkpoint_after=None if outcome != OUTCOME_COMPLETED else 10 * n + 10,
                            outcome=outcome, error=None if outcome == OUTCOME_COMPLETED else "moved",
                            segments=segments)


SEGS = (
    SegmentReport("a" * 32, ACTION_REWRITTEN, 0, 99, superseded=7, tombstone=2, aborted=3, marker=1,
                  bytes_in=4096, bytes_out=1024, downloaded=4096, requests=2),
    SegmentReport("b" * 32, ACTION_SKIPPED_BY_BLOOM, 100, 199),
    SegmentReport("c" * 32, ACTION_UPLOADED, 0, 99, bytes_out=1024, uploaded=1200, requests=5),
)


def test_a_report_round_trips_with_its_segments(mdm: SqlRemoteLogMetadataManager) -> None:
    r = report(1, segments=SEGS)
    mdm.record_compaction_report(r)
    assert mdm.list_compaction_reports(TP) == [r]
    got = mdm.list_compaction_reports(TP)[0]
    assert got.removed == {"superseded": 7, "tombstone": 2, "aborted": 3, "marker": 1}
    assert got.totals() == {"bytes_in": 4096, "bytes_out": 2048, "downloaded": 4096, "uploaded": 1200,
                            "requests": 7}
    assert [s.action for s in got.segments] == [ACTION_REWRITTEN, ACTION_SKIPPED_BY_BLOOM, ACTION_UPLOADED]
    assert mdm.list_compaction_reports(OTHER) == []


def test_failed_and_fenced_rounds_keep_their_outcome(mdm: SqlRemoteLogMetadataManager) -> None:
    mdm.record_compaction_report(report(1, outcome=OUTCOME_FENCED))
    (got,) = mdm.list_compaction_reports(TP)
    assert got.outcome == OUTCOME_FENCED and got.checkpoint_after is None and got.error == "moved"


def test_listing_is_newest_first_and_pages_with_before(mdm: SqlRemoteLogMetadataManager) -> None:
    for n in range(1, 8):
        mdm.record_compaction_report(report(n, segments=SEGS[:1]))
        mdm.record_compaction_report(report(n, tp=OTHER))
    ids = [r.round_id for r in mdm.list_compaction_reports(TP, limit=100)]
    assert ids == [f"round-0-{n:04d}" for n in range(7, 0, -1)]
    page1 = mdm.list_compaction_reports(TP, limit=3)
    page2 = mdm.list_compaction_reports(TP, limit=3, before=page1[-1].round_id)
    page3 = mdm.list_compaction_reports(TP, limit=3, before=page2[-1].round_id)
    assert [r.round_id for r in page1 + page2 + page3] == ids
    assert mdm.list_compaction_reports(TP, limit=3, before=page3[-1].round_id) == []
    with pytest.raises(InvalidRequestError, match="not a round id"):
        mdm.list_compaction_reports(TP, before="round-0-9999")
    with pytest.raises(InvalidRequestError, match="not a round id"):  # another partition's round
        mdm.list_compaction_reports(TP, before=mdm.list_compaction_reports(OTHER)[0].round_id)
    with pytest.raises(InvalidRequestError, match="limit"):
        mdm.list_compaction_reports(TP, limit=0)


def test_recording_a_round_again_replaces_it(mdm: SqlRemoteLogMetadataManager) -> None:
    mdm.record_compaction_report(report(1, segments=SEGS))
    mdm.record_compaction_report(report(1, segments=SEGS[1:2]))
    (got,) = mdm.list_compaction_reports(TP)
    assert got.segments == SEGS[1:2]


def test_only_the_newest_rounds_are_kept(mdm: SqlRemoteLogMetadataManager) -> None:
    for n in range(1, 6):
        mdm.record_compaction_report(report(n, segments=SEGS), keep=3)
    mdm.record_compaction_report(report(1, tp=OTHER), keep=3)
    assert [r.round_id for r in mdm.list_compaction_reports(TP)] == ["round-0-0005", "round-0-0004", "round-0-0003"]
    assert len(mdm.list_compaction_reports(OTHER)) == 1


def test_delete_partition_forgets_its_reports(mdm: SqlRemoteLogMetadataManager) -> None:
    mdm.record_compaction_report(report(1, segments=SEGS))
    mdm.record_compaction_report(report(2, tp=OTHER, segments=SEGS))
    mdm.delete_partition(TP)
    assert mdm.list_compaction_reports(TP) == []
    assert len(mdm.list_compaction_reports(OTHER)[0].segments) == 3


def test_report_invariants() -> None:
    with pytest.raises(InvalidRequestError, match="action"):
        SegmentReport("x", "shredded")
    with pytest.raises(InvalidRequestError, match="superseded"):
        SegmentReport("x", ACTION_REWRITTEN, superseded=-1)
    with pytest.raises(InvalidRequestError, match="checkpoint_after"):
        CompactionReport(new_round_id(), TP, ENGINE_LOCAL, 0, 1, 2, 0, None)
    with pytest.raises(InvalidRequestError, match="ends"):
        CompactionReport(new_round_id(), TP, ENGINE_LOCAL, 0, 5, 2, 0, 1)
    with pytest.raises(InvalidRequestError, match="engine"):
        CompactionReport(new_round_id(), TP, "flink", 0, 1, 2, 0, 1)


def test_reports_survive_reopen_of_a_file_store(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path}/metadata.db"
    with SqlRemoteLogMetadataManager(url) as m:
        m.record_compaction_report(report(1, segments=SEGS))
    with SqlRemoteLogMetadataManager(url) as m:
        assert m.list_compaction_reports(TP) == [report(1, segments=SEGS)]


def test_a_version_1_store_gets_the_report_tables(tmp_path: Path) -> None:
    """An existing store from before reports (schema version 1) is upgraded on open."""
    url = f"sqlite:///{tmp_path}/metadata.db"
    SqlRemoteLogMetadataManager(url).close()
    engine = create_engine(url)
    round_segments.drop(engine)
    rounds.drop(engine)
    with engine.begin() as conn:
        conn.execute(delete(schema_version))
        conn.execute(insert(schema_version).values(version=1))
    assert not inspect(engine).has_table("tc_compaction_rounds")
    with SqlRemoteLogMetadataManager(url) as m:
        m.record_compaction_report(report(1, segments=SEGS))
        assert m.list_compaction_reports(TP)[0].segments == SEGS
    with engine.connect() as conn:
        assert [r[0] for r in conn.execute(select(schema_version.c.version))] == [SCHEMA_VERSION]
    engine.dispose()


def test_a_store_newer_than_this_version_is_refused(tmp_path: Path) -> None:
    from log.errors import InvalidConfigError

    url = f"sqlite:///{tmp_path}/metadata.db"
    SqlRemoteLogMetadataManager(url).close()
    engine = create_engine(url)
    with engine.begin() as conn:
        conn.execute(insert(schema_version).values(version=SCHEMA_VERSION + 1))
    engine.dispose()
    with pytest.raises(InvalidConfigError, match="upgrade tiercompact"):
        SqlRemoteLogMetadataManager(url)
