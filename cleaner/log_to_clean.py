"""Which part of a log a round may clean, and how dirty the log is (Kafka's LogToClean and
LogCleanerManager.cleanableOffsets / maxCompactionDelay).

* :func:`cleanable_offsets` (A.3.1): the dirty section starts at the checkpoint (reset to the
  log start if the checkpoint is out of range) and the cleanable part ends at the first
  uncleanable offset = min(last stable offset, active segment base, base of the first segment
  holding a record younger than min.compaction.lag.ms).
* :class:`LogToClean` (A.3.2): clean / cleanable / total bytes and the dirty ratio, with the
  first uncleanable offset rounded down to a segment base. It also carries KIP-354's
  *must-clean ratio*: the bytes of cleanable segments whose first batch is older than
  max.compaction.lag.ms, over the total.
* :func:`max_compaction_delay` (A.3.3): how far past max.compaction.lag.ms the oldest dirty
  segment is (0 if not past).

Pure functions of a log snapshot; thread-safe as far as the LocalLog's own methods are.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from log.config import LONG_MAX
from log.local_log import LocalLog
from log.segment import LogSegment
from log.types import TopicPartition


@dataclass(frozen=True, slots=True)
class CleanableOffsets:
    first_dirty_offset: int
    first_uncleanable_dirty_offset: int
    force_update_checkpoint: bool

    def __post_init__(self) -> None:
        if self.first_uncleanable_dirty_offset < self.first_dirty_offset:
            raise ValueError(f"uncleanable offset {self.first_uncleanable_dirty_offset} < first dirty "
                             f"{self.first_dirty_offset}")


def cleanable_offsets(log: LocalLog, checkpoint: int | None, now: int) -> CleanableOffsets:
    """Kafka's LogCleanerManager.cleanableOffsets (A.3.1)."""
    with log.lock:
        log_start = log.log_start_offset
        cp = log_start if checkpoint is None else checkpoint
        if cp < log_start or cp > log.log_end_offset:
            # below the log start (retention moved it) or past the end (truncation): restart
            first_dirty, force = log_start, True
        else:
            first_dirty, force = cp, False
        min_lag = max(int(log.config.get("min.compaction.lag.ms")), 0)
        candidates = [log.last_stable_offset, log.active_segment.base_offset]
        if min_lag > 0:
            for seg in log.non_active_segments_from(first_dirty):
                if seg.largest_timestamp > now - min_lag:
                    candidates.append(seg.base_offset)
                    break
        first_uncleanable = min(candidates)
        return CleanableOffsets(first_dirty, max(first_dirty, first_uncleanable), force)


def max_compaction_delay(log: LocalLog, first_dirty_offset: int, now: int) -> int:
    """ms by which the oldest dirty segment's first batch is past max.compaction.lag.ms (A.3.3)."""
    ts = [t for seg in log.non_active_segments_from(first_dirty_offset)
          if 0 < (t := seg.first_batch_timestamp) < LONG_MAX]
    earliest = min(ts) if ts else LONG_MAX
    clean_until = now - max(int(log.config.get("max.compaction.lag.ms")), 0)
    return clean_until - earliest if earliest < clean_until else 0


def _sizes(segs: list[LogSegment]) -> int:
    return sum(s.size for s in segs)


class CleanRatios:
    """Dirty and must-clean ratios and the selection order, from a log's byte counts.

    Shared by the local pool's :class:`LogToClean` and the tiered pool's TieredLogToClean;
    subclasses provide ``cleanable_bytes``, ``must_clean_bytes``, ``total_bytes`` and
    ``need_compaction_now``.
    """

    cleanable_bytes: int
    must_clean_bytes: int
    need_compaction_now: bool

    @property
    def total_bytes(self) -> int:
        raise NotImplementedError

    @property
    def cleanable_ratio(self) -> float:
        """Dirty ratio: cleanable bytes / total bytes (0 for an empty log)."""
        return self.cleanable_bytes / self.total_bytes if self.total_bytes else 0.0

    @property
    def must_clean_ratio(self) -> float:
        """KIP-354: bytes of cleanable segments past max.compaction.lag.ms / total bytes."""
        return self.must_clean_bytes / self.total_bytes if self.total_bytes else 0.0

    def priority(self) -> tuple[bool, float, float]:
        """Sort key, highest first: past max.compaction.lag.ms, then must-clean ratio, then dirty ratio.

        This follows KIP-354's text ("sorted based on must clean ratio first and then by dirty
        ratio"), as tiercompact's design asks; Kafka 4.0's grabFilthiestCompactedLog only
        compares the dirty ratio (needCompactionNow makes a log eligible, not first).
        """
        return (self.need_compaction_now, self.must_clean_ratio, self.cleanable_ratio)



@dataclass(eq=False)
class LogToClean(CleanRatios):
    """A log with its dirty section, as chosen by the manager (Kafka's LogToClean).

    ``first_uncleanable_offset`` is ``uncleanable_offset`` rounded down to a segment base: a
    round cleans whole segments only. ``now`` (with max.compaction.lag.ms) fixes which
    segments are must-clean.
    """

    topic_partition: TopicPartition
    log: LocalLog
    first_dirty_offset: int
    uncleanable_offset: int
    need_compaction_now: bool = False
    now: int | None = None
    clean_bytes: int = field(init=False)
    first_uncleanable_offset: int = field(init=False)
    cleanable_bytes: int = field(init=False)
    must_clean_bytes: int = field(init=False)

    def __post_init__(self) -> None:
        log = self.log
        with log.lock:
            self.clean_bytes = _sizes(log.segments_in_range(0, self.first_dirty_offset))
            later = log.non_active_segments_from(self.uncleanable_offset)
            self.first_uncleanable_offset = (later[0] if later else log.active_segment).base_offset
            cleanable = log.segments_in_range(min(self.first_dirty_offset, self.first_uncleanable_offset),
                                              self.first_uncleanable_offset)
            self.cleanable_bytes = _sizes(cleanable)
            must = 0
            if self.now is not None:
                clean_until = self.now - max(int(log.config.get("max.compaction.lag.ms")), 0)
                must = sum(s.size for s in cleanable if 0 < s.first_batch_timestamp < clean_until)
            self.must_clean_bytes = must

    @property
    def total_bytes(self) -> int:
        return self.clean_bytes + self.cleanable_bytes

    def __repr__(self) -> str:
        return (f"LogToClean({self.topic_partition}, dirty=[{self.first_dirty_offset}, "
                f"{self.first_uncleanable_offset}), ratio={self.cleanable_ratio:.3f}, "
                f"must_clean={self.must_clean_ratio:.3f}, now={self.need_compaction_now})")
