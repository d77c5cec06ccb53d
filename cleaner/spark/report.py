"""The report of a Spark clean of one partition (see :mod:`cleaner.report`).

The driver knows per segment what the job did with it: scanned for the map (dirty segments,
and clean ones that may hold transactions), skipped by its bloom filter, or rewritten by a
rewrite task; and per task what it removed, by reason, and uploaded. A task cleans a whole
group into one new segment, so the records removed are reported on the new ("uploaded")
segment's row rather than split across its sources. No pyspark here: the driver passes plain
values.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from cleaner.report import build_report
from log.types import TopicPartition
from metadata.reports import (
    ACTION_CARRIED_FORWARD,
    ACTION_REWRITTEN,
    ACTION_SKIPPED_BY_BLOOM,
    ACTION_SKIPPED_BY_KEY_INDEX,
    ACTION_UPLOADED,
    ENGINE_SPARK,
    OUTCOME_COMPLETED,
    OUTCOME_FAILED,
    OUTCOME_FENCED,
    CompactionReport,
    SegmentReport,
)
from metadata.types import RemoteLogSegmentMetadata

#: PartitionOutcome.status -> report outcome
_OUTCOMES = {"cleaned": OUTCOME_COMPLETED, "nothing-to-clean": OUTCOME_COMPLETED, "fenced": OUTCOME_FENCED,
             "failed": OUTCOME_FAILED}


def spark_report(tp: TopicPartition, *, leader_epoch: int, started_ms: int, ended_ms: int, status: str,
                 first_dirty_offset: int, end_offset: int, segments: Mapping[int, RemoteLogSegmentMetadata],
                 skipped: set[int], scanned: Mapping[int, int], tasks: Sequence[Any],
                 sources_of: Mapping[int, Sequence[int]], results: Sequence[Any],
                 error: str | None = None, skipped_by_key_index: set[int] | None = None, round_id: str | None = None,
                 index_bytes: Mapping[int, int] | None = None) -> CompactionReport:
    """``segments``: segment number -> metadata; ``scanned``: number -> bytes the scan fetched;
    ``tasks``/``results``: the rewrite tasks and (when they ran) their results, in order;
    ``sources_of``: task key -> the segment numbers it rewrote."""
    rewritten = {i: t for t in tasks for i in sources_of.get(t.key, ())}
    ran = bool(results)
    rows: list[SegmentReport] = []
    for i, md in sorted(segments.items(), key=lambda kv: kv[1].start_offset):
        if i in skipped:
            action = ACTION_SKIPPED_BY_BLOOM
        elif skipped_by_key_index and i in skipped_by_key_index:
            action = ACTION_SKIPPED_BY_KEY_INDEX
        elif i in rewritten:
            action = ACTION_REWRITTEN
        else:
            action = ACTION_CARRIED_FORWARD
        fetched = ran and i in rewritten
        rows.append(SegmentReport(
            md.id, action, md.start_offset, md.end_offset,
            bytes_in=md.segment_size_in_bytes if fetched else 0,
            downloaded=scanned.get(i, 0) + (md.segment_size_in_bytes if fetched else 0)
            + (index_bytes or {}).get(i, 0),
            requests=(1 if i in scanned else 0) + (1 if fetched else 0) + (1 if i in (index_bytes or {}) else 0)))
    for task, res in zip(tasks, results, strict=False):
        superseded, tombstone, aborted, marker = getattr(res, "removed", (0, 0, 0, 0))
        rows.append(SegmentReport(
            res.new_segment_id, ACTION_UPLOADED, res.start_offset, res.end_offset, superseded=superseded,
            tombstone=tombstone, aborted=aborted, marker=marker, bytes_out=res.size, uploaded=res.bytes_uploaded,
            requests=max(getattr(res, "requests", 0) - len(task.sources), 0)))
    outcome = _OUTCOMES.get(status, OUTCOME_FAILED)
    return build_report(tp, engine=ENGINE_SPARK, leader_epoch=leader_epoch, started_ms=started_ms,
                        ended_ms=ended_ms, checkpoint_before=first_dirty_offset, checkpoint_after=end_offset,
                        segments=rows, error=error, outcome=outcome, round_id=round_id)


def partition_round_report(tp: TopicPartition, *, leader_epoch: int, started_ms: int, ended_ms: int, status: str,
                           first_dirty_offset: int, end_offset: int, stats: Any | None, error: str | None = None,
                           round_id: str | None = None) -> CompactionReport:
    """The report of a partition the job ran whole (one partition round on an executor): the
    round's own per-segment accounts (``stats``, a CleanerStats), as an in-process round reports."""
    return build_report(tp, engine=ENGINE_SPARK, leader_epoch=leader_epoch, started_ms=started_ms,
                        ended_ms=ended_ms, checkpoint_before=first_dirty_offset, checkpoint_after=end_offset,
                        stats=stats, error=error, outcome=_OUTCOMES.get(status, OUTCOME_FAILED), round_id=round_id)
