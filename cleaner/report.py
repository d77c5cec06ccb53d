"""Round reports: a :class:`~metadata.reports.CompactionReport` for every cleaning round.

:class:`RoundReporter` turns a round's :class:`~cleaner.stats.CleanerStats` (its per-segment
accounts and removal reasons) into a report, records it in the metadata store and keeps
cumulative counts for the metrics (pulled by ``service/metrics.py``): records removed by
reason and rounds by engine and outcome. Local and tiered rounds are reported by the
LogCleaner (background threads and the admin API's clean alike), Spark rounds by the
job's driver.

Recording never fails the round: a metadata store that cannot take the report is logged
and counted (``failed_writes``), and the round's own outcome stands.

Thread-safety: RoundReporter is thread-safe.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable

from cleaner.errors import LogCleaningAbortedError
from cleaner.stats import CleanerStats, SegmentAccount
from log.clock import SYSTEM_CLOCK, Clock
from log.locks import RANK_LEAF, ordered_lock
from log.types import TopicPartition
from metadata.errors import FencedLeaderEpochError
from metadata.reports import (
    ACTION_UPLOADED,
    ENGINES,
    OUTCOME_ABORTED,
    OUTCOME_COMPLETED,
    OUTCOME_FAILED,
    OUTCOME_FENCED,
    OUTCOMES,
    REMOVAL_REASONS,
    CompactionReport,
    RoundReportStore,
    SegmentReport,
    new_round_id,
)

logger = logging.getLogger(__name__)


def outcome_of(error: BaseException | None) -> str:
    """How a round ended, from what it raised (None: it completed)."""
    if error is None:
        return OUTCOME_COMPLETED
    if isinstance(error, FencedLeaderEpochError):
        return OUTCOME_FENCED
    if isinstance(error, LogCleaningAbortedError):
        return OUTCOME_ABORTED
    return OUTCOME_FAILED


def segment_reports(accounts: Iterable[SegmentAccount]) -> tuple[SegmentReport, ...]:
    """In offset order, each new (uploaded) segment after the sources it replaces."""
    accounts = sorted(accounts, key=lambda a: (a.base_offset, a.action == ACTION_UPLOADED))
    return tuple(SegmentReport.of(a) for a in accounts)


def build_report(tp: TopicPartition, *, engine: str, leader_epoch: int, started_ms: int, ended_ms: int,
                 checkpoint_before: int, checkpoint_after: int | None, stats: CleanerStats | None = None,
                 segments: Iterable[SegmentReport] = (), error: BaseException | str | None = None,
                 outcome: str | None = None, round_id: str | None = None) -> CompactionReport:
    """A round's report. ``error`` (an exception) decides the outcome unless ``outcome`` is given;
    segments come from ``stats``' accounts, then ``segments``."""
    if outcome is None:
        outcome = OUTCOME_FAILED if isinstance(error, str) else outcome_of(error)
    message = None
    if isinstance(error, BaseException):
        message = f"{type(error).__name__}: {error}"
    elif error is not None:
        message = error
    segs = (segment_reports(stats.segment_accounts) if stats is not None else ()) + tuple(segments)
    return CompactionReport(
        round_id=round_id or new_round_id(), topic_partition=tp, engine=engine, leader_epoch=leader_epoch,
        started_ms=started_ms, ended_ms=max(ended_ms, started_ms), checkpoint_before=checkpoint_before,
        checkpoint_after=checkpoint_after if outcome == OUTCOME_COMPLETED else None, outcome=outcome,
        error=message, segments=segs)


class RoundReporter:
    """Records round reports in ``store`` and counts them for the metrics."""

    def __init__(self, store: RoundReportStore, *, clock: Clock = SYSTEM_CLOCK) -> None:
        self.store = store
        self.clock = clock
        self._lock = ordered_lock("cleaner.round_reporter", RANK_LEAF)
        self._removed: dict[tuple[str, str], int] = {(e, r): 0 for e in ENGINES for r in REMOVAL_REASONS}
        self._rounds: dict[tuple[str, str], int] = {(e, o): 0 for e in ENGINES for o in OUTCOMES}
        self.failed_writes = 0

    def record(self, report: CompactionReport) -> CompactionReport:
        """Store ``report`` (best effort) and count it."""
        with self._lock:
            for reason, n in report.removed.items():
                self._removed[(report.engine, reason)] += n
            self._rounds[(report.engine, report.outcome)] += 1
        try:
            self.store.record_compaction_report(report)
        except Exception:  # noqa: BLE001 - a report must never fail the round it describes
            with self._lock:
                self.failed_writes += 1
            logger.warning("%s: could not record the report of round %s", report.topic_partition, report.round_id,
                           exc_info=True)
        return report

    def records_removed(self) -> dict[tuple[str, str], int]:
        """(engine, reason) -> records removed since start."""
        with self._lock:
            return dict(self._removed)

    def rounds(self) -> dict[tuple[str, str], int]:
        """(engine, outcome) -> rounds reported since start."""
        with self._lock:
            return dict(self._rounds)
