"""A tiered round's plan from metadata alone: the cleanable range over both tiers, and Kafka's
size-bounded grouping of remote segments."""

from __future__ import annotations

from dataclasses import dataclass, field

from cleaner.tiered.view import PartitionView, partition_view
from log.local_log import LocalLog
from log.record.varint import INT32_MAX
from log.types import TopicPartition
from metadata.manager import RemoteLogMetadataManager
from metadata.types import RemoteLogSegmentMetadata


@dataclass(frozen=True, slots=True)
class TieredRoundPlan:
    """What a round will do, computed from metadata and the local log only."""

    topic_partition: TopicPartition
    leader_epoch: int
    first_dirty_offset: int
    upper: int
    segments: tuple[RemoteLogSegmentMetadata, ...]  # every referenced segment, by offset
    dirty: tuple[RemoteLogSegmentMetadata, ...]
    cleaner_offsets: dict[int, int] = field(default_factory=dict)

    @property
    def cleanable_bytes(self) -> int:
        return sum(s.segment_size_in_bytes for s in self.dirty)

    @property
    def remote_bytes(self) -> int:
        return sum(s.segment_size_in_bytes for s in self.segments)


def plan_round(tp: TopicPartition, log: PartitionView | LocalLog, rlmm: RemoteLogMetadataManager, *, leader_epoch: int,
               local_checkpoint: int | None, now: int) -> TieredRoundPlan | None:
    """The cleanable range of a tiered partition (Kafka's cleanableOffsets over both tiers).

    Returns None when nothing is in remote storage yet.
    """
    view = partition_view(log)
    segments = rlmm.list_remote_log_segments(tp)
    if not segments:
        return None
    log_start = segments[0].start_offset
    remote_cp = rlmm.resolve_cleaner_checkpoint(tp)
    cps = [c for c in (local_checkpoint, remote_cp) if c is not None]
    cp = max(cps) if cps else log_start
    if cp < log_start or cp > view.log_end_offset:
        cp = log_start
    remote_end = segments[-1].end_offset + 1
    candidates = [remote_end, view.last_stable_offset, view.active_base_offset]
    min_lag = max(int(view.config.get("min.compaction.lag.ms")), 0)
    if min_lag > 0:
        for s in segments:
            if s.end_offset >= cp and s.max_timestamp_ms > now - min_lag:
                candidates.append(s.start_offset)
                break
    raw_upper = min(candidates)
    upper = raw_upper
    for s in segments:  # round down to a remote segment boundary
        if s.start_offset < raw_upper <= s.end_offset:
            upper = s.start_offset
            break
    upper = max(cp, upper)
    dirty = tuple(s for s in segments if s.end_offset >= cp and s.start_offset < upper)
    return TieredRoundPlan(tp, leader_epoch, cp, upper, tuple(segments), dirty, dict(rlmm.cleaner_offsets(tp)))


def dirty_ratio(plan: TieredRoundPlan, local_only_bytes: int) -> float:
    """cleanable / (remote + local-only) bytes, from metadata (no object-store call)."""
    total = plan.remote_bytes + local_only_bytes
    return plan.cleanable_bytes / total if total else 0.0


def group_remote_segments(run: list[RemoteLogSegmentMetadata], max_size: int, end: int) -> list[list[RemoteLogSegmentMetadata]]:
    """Kafka's groupSegmentsBySize over remote metadata: size and 2^31-1 offset span.

    The in-process TieredCleaner and the Spark job group with this one function, so they
    produce the same segments.
    """
    groups: list[list[RemoteLogSegmentMetadata]] = []
    i = 0
    while i < len(run):
        group = [run[i]]
        size = run[i].segment_size_in_bytes
        i += 1
        while i < len(run):
            nxt = run[i]
            last = (run[i + 1].start_offset - 1) if i + 1 < len(run) else max(end - 1, nxt.end_offset)
            if size + nxt.segment_size_in_bytes > max_size or last - group[0].start_offset > INT32_MAX:
                break
            group.append(nxt)
            size += nxt.segment_size_in_bytes
            i += 1
        groups.append(group)
    return groups
