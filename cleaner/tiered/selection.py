"""Selection for the tiered pool: a tiered partition's LogToClean, sized from metadata alone."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from cleaner.log_to_clean import CleanRatios
from cleaner.round_metadata import TieredMetadata
from cleaner.tiered.plan import TieredRoundPlan, plan_round
from log.errors import UnknownTopicOrPartitionError
from log.local_log import LocalLog
from log.types import TopicPartition
from metadata.errors import NotLeaderForPartitionError
from remote.storage_manager import RemoteStorageManager


@dataclass(frozen=True, slots=True)
class TieredContext:
    """What the LogCleaner needs to run tiered rounds (given by the composition root)."""

    rlmm: TieredMetadata
    rsm: RemoteStorageManager
    leader_epoch: Callable[[TopicPartition], int]
    temp_dir: Path
    broker_id: int = 0
    threads: int = 1
    bloom_skip: bool = True
    free_disk: Callable[[Path], int] | None = None


@dataclass(eq=False)
class TieredLogToClean(CleanRatios):
    """A tiered partition's dirty section, sized from metadata (no object-store call).

    The dirty ratio is cleanable / (remote + local-only) bytes. KIP-354's
    must-clean test needs each dirty segment's earliest record time, which remote metadata
    does not hold; following KIP-354's own estimate, a segment's earliest timestamp is the
    previous segment's largest timestamp (the first segment's: its largest minus
    the max segment time).
    """

    topic_partition: TopicPartition
    log: LocalLog
    plan: TieredRoundPlan
    local_only_bytes: int
    now: int
    must_clean_bytes: int = field(init=False)
    need_compaction_now: bool = field(init=False)
    cleanable_bytes: int = field(init=False)

    def __post_init__(self) -> None:
        max_lag = max(int(self.log.config.get("max.compaction.lag.ms")), 0)
        clean_until = self.now - max_lag
        by_start = {s.start_offset: i for i, s in enumerate(self.plan.segments)}
        must = 0
        for seg in self.plan.dirty:
            i = by_start[seg.start_offset]
            earliest = (self.plan.segments[i - 1].max_timestamp_ms if i > 0
                        else seg.max_timestamp_ms - self.log.config.max_segment_ms)
            if 0 < earliest < clean_until:
                must += seg.segment_size_in_bytes
        self.must_clean_bytes = must
        self.need_compaction_now = must > 0
        self.cleanable_bytes = self.plan.cleanable_bytes

    @property
    def first_dirty_offset(self) -> int:
        return self.plan.first_dirty_offset

    @property
    def first_uncleanable_offset(self) -> int:
        return self.plan.upper

    @property
    def total_bytes(self) -> int:
        return self.plan.remote_bytes + self.local_only_bytes


def tiered_log_to_clean(ctx: TieredContext, tp: TopicPartition, log: LocalLog, checkpoint: int | None,
                        now: int) -> TieredLogToClean | None:
    """The tiered LogToClean of ``log``, or None while nothing is in remote storage or
    another broker leads the partition (that broker cleans it; this one is a follower)."""
    try:
        epoch = ctx.leader_epoch(tp)
    except (NotLeaderForPartitionError, UnknownTopicOrPartitionError):
        return None  # another broker leads it, or the topic was deleted (a stale local copy)
    plan = plan_round(tp, log, ctx.rlmm, leader_epoch=epoch, local_checkpoint=checkpoint, now=now)
    if plan is None:
        return None
    remote_end = plan.segments[-1].end_offset + 1
    local_only = sum(s.size for s in log.all_segments() if s.base_offset >= remote_end)
    return TieredLogToClean(tp, log, plan, local_only, now)
