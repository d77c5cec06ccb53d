"""The driver's publish step: each partition's new segments registered and published under the
job's epoch (fenced as an in-process round), its uploads removed when that fails, its outcome
and its round report."""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from cleaner.report import RoundReporter
from cleaner.round_metadata import TieredMetadata
from cleaner.spark.partition_round import (
    PartitionRoundResult,
)
from cleaner.spark.report import partition_round_report, spark_report
from cleaner.spark.tasks import (
    RewriteResult,
    RewriteTask,
    StoreSpec,
)
from cleaner.spark.views import DriverView
from cleaner.tiered import RoundTxnIndexes, TieredRoundPlan
from cleaner.tiered.view import PartitionView
from cleaner.transactions import CleanedTransactionMetadata
from log.clock import Clock
from log.errors import TiercompactError
from log.index.bloom import KeyBloomFilter
from log.types import TopicPartition
from metadata.errors import FencedLeaderEpochError
from metadata.reports import ACTION_SKIPPED_BY_KEY_INDEX
from metadata.types import RemoteLogSegmentId, RemoteLogSegmentMetadata
from remote.segment_deletion import SegmentDeleter

logger = logging.getLogger(__name__)


@dataclass(slots=True)
class PartitionOutcome:
    """What the job did to one partition. ``status``: cleaned, nothing-to-clean, fenced, failed."""

    topic_partition: TopicPartition
    status: str
    leader_epoch: int
    first_dirty_offset: int = 0
    end_offset: int = 0
    new_segment_ids: list[str] = field(default_factory=list)
    replaced_segment_ids: list[str] = field(default_factory=list)
    segments_skipped_by_bloom: int = 0
    segments_skipped_by_key_index: int = 0
    segments_cleaned: int = 0
    bytes_downloaded: int = 0
    bytes_uploaded: int = 0
    messages_read: int = 0
    messages_written: int = 0
    error: str | None = None

    def as_dict(self) -> dict[str, Any]:
        return {"topic": self.topic_partition.topic, "partition": self.topic_partition.partition,
                "status": self.status, "leader_epoch": self.leader_epoch,
                "first_dirty_offset": self.first_dirty_offset, "end_offset": self.end_offset,
                "new_segments": len(self.new_segment_ids), "replaced_segments": len(self.replaced_segment_ids),
                "segments_skipped_by_bloom": self.segments_skipped_by_bloom,
                "segments_skipped_by_key_index": self.segments_skipped_by_key_index,
                "segments_cleaned": self.segments_cleaned, "bytes_downloaded": self.bytes_downloaded,
                "bytes_uploaded": self.bytes_uploaded, "records_read": self.messages_read,
                "records_retained": self.messages_written, "error": self.error}


@dataclass(slots=True)
class JobPartition:
    """The driver's state for one partition of the job."""

    idx: int
    tp: TopicPartition
    view: DriverView
    epoch: int
    plan: TieredRoundPlan
    outcome: PartitionOutcome
    segs: dict[int, RemoteLogSegmentMetadata] = field(default_factory=dict)  # segment number -> md (candidates)
    blooms: dict[int, KeyBloomFilter | None] = field(default_factory=dict)
    blobs: dict[int, bytes] = field(default_factory=dict)
    tasks: list[RewriteTask] = field(default_factory=list)
    #: the round's transaction state, replayed group by group in log order
    txn: CleanedTransactionMetadata = field(default_factory=CleanedTransactionMetadata)
    #: the partition's transaction indexes over both tiers (as the in-process round reads them)
    txn_indexes: RoundTxnIndexes | None = None
    leased: bool = False
    #: for the round report: segments the bloom test skipped, bytes each scan fetched
    skipped: set[int] = field(default_factory=set)
    scanned: dict[int, int] = field(default_factory=dict)
    #: segments the exact key index ruled out after the bloom filter said "maybe", and
    #: the bytes of each key index fetched
    skipped_by_key_index: set[int] = field(default_factory=set)
    index_bytes: dict[int, int] = field(default_factory=dict)
    #: the partition runs as one partition round (not split across tasks), and its result
    whole: bool = False
    round: PartitionRoundResult | None = None

    def is_clean_region(self, md: RemoteLogSegmentMetadata) -> bool:
        return md.end_offset < self.plan.first_dirty_offset

    @property
    def log(self) -> PartitionView:
        return self.view


class Publishing:
    """The driver's publish step, one partition at a time (mixed into :class:`~cleaner.spark.job.SparkCleanJob`)."""

    rlmm: TieredMetadata
    store: StoreSpec
    clock: Clock
    broker_id: int
    reporter: RoundReporter
    job_id: str
    _reports: int

    @property
    def application_id(self) -> str:
        raise NotImplementedError

    def _stage(self, name: str, parts: Sequence[JobPartition]) -> None:
        raise NotImplementedError

    def _report(self, p: JobPartition, results: list[RewriteResult], started_ms: int, *, error: str | None = None,
                status: str | None = None) -> None:
        out = p.outcome
        if p.whole:
            self.reporter.record(partition_round_report(
                p.tp, leader_epoch=p.epoch, started_ms=started_ms, ended_ms=self.clock.milliseconds(),
                status=status or out.status, first_dirty_offset=p.plan.first_dirty_offset, end_offset=out.end_offset,
                stats=p.round.stats if p.round is not None else None, error=error or out.error,
                round_id=self._round_id()))
            return
        self.reporter.record(spark_report(
            p.tp, leader_epoch=p.epoch, started_ms=started_ms, ended_ms=self.clock.milliseconds(),
            status=status or out.status, first_dirty_offset=p.plan.first_dirty_offset, end_offset=p.plan.upper,
            segments=p.segs, skipped=p.skipped, scanned=p.scanned, tasks=p.tasks,
            sources_of={t.key: self._numbers(p, t) for t in p.tasks}, results=results, error=error or out.error,
            skipped_by_key_index=p.skipped_by_key_index, index_bytes=p.index_bytes, round_id=self._round_id()))

    def _round_id(self) -> str:
        """A Spark round's report id names its Spark application and job:
        ``<application id>:<job id>:<n>`` (at most 64 characters)."""
        self._reports += 1
        return f"{self.application_id[:36]}:{self.job_id.removeprefix('spark-')[:16]}:{self._reports}"

    def _publish(self, p: JobPartition, results: list[RewriteResult], now: int) -> None:
        out = p.outcome
        out.new_segment_ids = [t.new_segment_id for t in p.tasks]
        for res in results:
            out.segments_cleaned += res.segments_cleaned
            out.bytes_downloaded += res.bytes_downloaded
            out.bytes_uploaded += res.bytes_uploaded
            out.messages_read += res.messages_read
            out.messages_written += res.messages_written
        new = [(task.new_metadata(res.size, res.max_timestamp_ms, self.clock.milliseconds(),
                                  key_index_bytes=res.key_index_bytes), res.bloom)
               for task, res in zip(p.tasks, results, strict=True)]
        replaced = [p.segs[i] for t in p.tasks for i in self._numbers(p, t)]
        out.replaced_segment_ids = [m.id for m in replaced]
        vector = dict(p.plan.cleaner_offsets)
        vector[p.epoch] = p.plan.upper
        if not self._commit(p, new, [m.remote_log_segment_id for m in replaced], vector):
            return
        p.view.adopt(p.plan.upper)
        logger.info("spark clean %s [%d, %d): %d groups, %d skipped by bloom, %d B down, %d B up", p.tp,
                    p.plan.first_dirty_offset, p.plan.upper, len(p.tasks), out.segments_skipped_by_bloom,
                    out.bytes_downloaded, out.bytes_uploaded)

    def _commit(self, p: JobPartition, new: Sequence[tuple[RemoteLogSegmentMetadata, bytes | None]],
                replaced: Sequence[RemoteLogSegmentId], vector: dict[int, int]) -> bool:
        """Register the new segments (COPY_SEGMENT_STARTED, with their bloom filters) and publish
        them with the cleaner-offset vector under the job's epoch. False when the partition was
        fenced or failed: its outcome says so and its uploads were removed."""
        out = p.outcome
        registered: list[RemoteLogSegmentMetadata] = []
        try:
            # one transaction for all (their objects exist already, under the job's lease)
            self.rlmm.add_remote_log_segments(new, leader_epoch=p.epoch)
            registered = [md for md, _bloom in new]
            self._stage("before-publish", [p])
            if registered or replaced:
                self.rlmm.publish_compaction(p.tp, leader_epoch=p.epoch,
                                             new_segment_ids=[m.remote_log_segment_id for m in registered],
                                             replaced_segment_ids=replaced, cleaner_offsets=vector)
            else:
                self.rlmm.publish_cleaner_offsets(p.tp, leader_epoch=p.epoch, cleaner_offsets=vector)
            return True
        except FencedLeaderEpochError as e:
            logger.warning("%s: leadership moved during the Spark clean (epoch %d): %s", p.tp, p.epoch, e)
            out.status, out.error = "fenced", str(e)
            self._abandon(p, fenced=True, registered=registered)
        except Exception as e:  # noqa: BLE001 - one partition's failure must not stop the others
            logger.exception("%s: publishing the Spark clean failed", p.tp)
            out.status, out.error = "failed", f"{type(e).__name__}: {e}"
            self._abandon(p, fenced=False, registered=registered)
        return False

    def _publish_round(self, p: JobPartition) -> None:
        """Replay a partition round's metadata writes under the job's epoch (fenced as in process)."""
        out = p.outcome
        res = p.round
        writes = res.writes if res is not None else None
        if res is None or writes is None or writes.cleaner_offsets is None:
            out.status, out.error = "failed", f"the round of {p.tp} returned no publish"
            self._abandon(p, fenced=False)
            return
        for sid, size in writes.key_indexes:  # indexes built for segments that had none
            try:
                self.rlmm.set_key_index(RemoteLogSegmentId(p.tp, sid), size)
            except TiercompactError as e:
                logger.warning("%s: could not record the key index of %s: %s", p.tp, sid, e)
        if not self._commit(p, writes.new_segments, [RemoteLogSegmentId(p.tp, sid) for sid in writes.replaced_ids],
                            dict(writes.cleaner_offsets)):
            return
        stats = res.stats
        out.end_offset = res.end
        out.new_segment_ids = [md.id for md, _bloom in writes.new_segments]
        out.replaced_segment_ids = list(writes.replaced_ids)
        out.segments_skipped_by_bloom = stats.segments_skipped_by_bloom
        out.segments_skipped_by_key_index = sum(a.action == ACTION_SKIPPED_BY_KEY_INDEX
                                                for a in stats.segment_accounts)
        out.segments_cleaned = stats.segments_cleaned
        out.bytes_downloaded, out.bytes_uploaded = stats.bytes_downloaded, stats.bytes_uploaded
        out.messages_read, out.messages_written = stats.messages_read, stats.messages_written
        p.view.adopt(res.end)
        logger.info("spark clean %s [%d, %d) in one partition round: %d segments cleaned, %d skipped by bloom, "
                    "%d by key index, %d B down, %d B up", p.tp, p.plan.first_dirty_offset, res.end,
                    out.segments_cleaned, out.segments_skipped_by_bloom, out.segments_skipped_by_key_index,
                    out.bytes_downloaded, out.bytes_uploaded)

    @staticmethod
    def _numbers(p: JobPartition, task: RewriteTask) -> list[int]:
        ids = {s.segment_id for s in task.sources}
        return [i for i, md in p.segs.items() if md.id in ids]

    def _abandon(self, p: JobPartition, *, fenced: bool, registered: Sequence[RemoteLogSegmentMetadata] = ()) -> None:
        """Delete every object the job may have written for ``p`` (keys from the pre-generated ids).

        Registered segments go through DELETE_SEGMENT_STARTED/FINISHED unless fenced (a fenced
        writer may not touch metadata; the new leader's deferred-delete loop ends those rows)."""
        reg = {m.id: m for m in registered}
        if p.whole:  # what a round uploaded (a failed stage left only tagged objects: the sweep ends them)
            uploads = [md for md, _bloom in p.round.writes.new_segments] if p.round is not None else []
        else:
            uploads = [task.new_metadata(0, 0, 0) for task in p.tasks]
        SegmentDeleter(self.rlmm, self.store.open(), self.broker_id, self.clock).remove_uploads(
            [reg.get(upload.id) or upload for upload in uploads], p.epoch,
            tombstone=lambda md: md.id in reg and not fenced, what="upload of the Spark clean")
