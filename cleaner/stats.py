"""Per-round cleaner statistics (Kafka's CleanerStats and PreCleanStats).

Times come from an injected Clock. A finished round becomes a plain dict through
:meth:`CleanerStats.as_dict`, whose names are API.md's (``bytes_read``, ``bytes_written``,
``records_read``, ``records_retained``, ``checkpoint``, ``elapsed_ms``, ...).

Thread-safety: a CleanerStats is written by the one thread running the round; publish it
(e.g. as ``last_stats``) only once the round is over.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

from log.clock import SYSTEM_CLOCK, Clock
from log.types import TopicPartition
from metadata.reports import REMOVAL_REASONS, SegmentCounts


@dataclass(slots=True)
class SegmentAccount(SegmentCounts):
    """What a round did to one source segment, added to as the round goes: removals by reason,
    bytes read/written (:meth:`CleanerStats.measure`), object-store bytes and calls. The fields
    are metadata.reports.SegmentCounts' (one definition); ``action`` is one of
    metadata.reports.ACTIONS. It becomes a report with ``SegmentReport.of``.
    """

    #: times the segment's log itself was fetched (``downloaded`` also counts its indexes)
    log_downloads: int = 0


@dataclass(slots=True)
class CleanerStats:
    clock: Clock = field(default=SYSTEM_CLOCK, repr=False, compare=False)
    topic_partition: TopicPartition | None = None
    bytes_read: int = 0
    bytes_written: int = 0
    messages_read: int = 0
    messages_written: int = 0
    map_bytes_read: int = 0
    map_messages_read: int = 0
    #: unkeyed records seen in the mapped range (Kafka drops them; tiercompact keeps them)
    invalid_messages_read: int = 0
    batches_copied: int = 0
    batches_rebuilt: int = 0
    batches_emptied: int = 0
    batches_deleted: int = 0
    segments_cleaned: int = 0
    groups: int = 0
    buffer_utilization: float = 0.0
    map_full: bool = False
    first_dirty_offset: int = -1
    end_offset: int = -1
    # tiered counters (filled by the tiered cleaner; zero for a local round)
    segments_downloaded: int = 0
    segments_skipped_by_bloom: int = 0
    bytes_downloaded: int = 0
    bytes_uploaded: int = 0
    # records dropped, by reason (metadata.reports.REMOVAL_REASONS)
    removed_superseded: int = 0
    removed_tombstone: int = 0
    removed_aborted: int = 0
    removed_marker: int = 0
    #: per source segment, in the order the round met them (the round report's segments)
    segment_accounts: list[SegmentAccount] = field(default_factory=list, repr=False)
    start_ms: float = -1.0
    map_complete_ms: float = -1.0
    end_ms: float = -1.0

    def __post_init__(self) -> None:
        if self.start_ms < 0:
            self.start_ms = self.clock.monotonic_ms()

    # Kafka's names
    def read_messages(self, n: int, size: int) -> None:
        self.messages_read += n
        self.bytes_read += size

    def recopy_messages(self, n: int, size: int) -> None:
        self.messages_written += n
        self.bytes_written += size

    def index_messages_read(self, n: int) -> None:
        self.map_messages_read += n

    def index_bytes_read(self, size: int) -> None:
        self.map_bytes_read += size

    def index_done(self) -> None:
        self.map_complete_ms = self.clock.monotonic_ms()

    def all_done(self) -> None:
        self.end_ms = self.clock.monotonic_ms()

    @property
    def elapsed_secs(self) -> float:
        end = self.end_ms if self.end_ms >= 0 else self.clock.monotonic_ms()
        return max(end - self.start_ms, 0.0) / 1000.0

    @property
    def elapsed_index_secs(self) -> float:
        if self.map_complete_ms < 0:
            return 0.0
        return max(self.map_complete_ms - self.start_ms, 0.0) / 1000.0

    # per-segment accounting
    def account(self, segment_id: str, action: str | None = None, base_offset: int = -1,
                end_offset: int = -1) -> SegmentAccount:
        """The account of ``segment_id``, created on first use (as "carried-forward" unless an
        ``action`` is given); a given ``action`` replaces the recorded one."""
        for a in self.segment_accounts:
            if a.segment_id == segment_id:
                if action is not None:
                    a.action = action
                return a
        a = SegmentAccount(segment_id, action or "carried-forward", base_offset, end_offset)
        self.segment_accounts.append(a)
        return a

    @contextmanager
    def measure(self, account: SegmentAccount) -> Iterator[SegmentAccount]:
        """Add to ``account`` the bytes read and written and the records removed inside the block."""
        bytes_read, bytes_written, removed = self.bytes_read, self.bytes_written, self.records_removed
        try:
            yield account
        finally:
            account.bytes_in += self.bytes_read - bytes_read
            account.bytes_out += self.bytes_written - bytes_written
            for reason, n in self.records_removed.items():
                setattr(account, reason, getattr(account, reason) + n - removed[reason])

    def removed_discarded_batch(self, is_control: bool, records: int) -> None:
        """A batch whose records all go because its transaction is decided (aborted data, or a
        marker past its horizon)."""
        if is_control:
            self.removed_marker += records
        else:
            self.removed_aborted += records

    @property
    def records_removed(self) -> dict[str, int]:
        """Records removed by reason (``removed_<reason>`` for each of REMOVAL_REASONS)."""
        return {reason: getattr(self, f"removed_{reason}") for reason in REMOVAL_REASONS}

    @property
    def records_read(self) -> int:
        return self.messages_read

    @property
    def records_retained(self) -> int:
        return self.messages_written

    def as_dict(self) -> dict[str, Any]:
        """API.md's cleaner-stats shape."""
        return {
            "topic": self.topic_partition.topic if self.topic_partition else None,
            "partition": self.topic_partition.partition if self.topic_partition else None,
            "bytes_read": self.bytes_read,
            "bytes_written": self.bytes_written,
            "records_read": self.messages_read,
            "records_retained": self.messages_written,
            "map_bytes_read": self.map_bytes_read,
            "map_records_read": self.map_messages_read,
            "keyless_records_read": self.invalid_messages_read,
            "batches_copied": self.batches_copied,
            "batches_rebuilt": self.batches_rebuilt,
            "batches_emptied": self.batches_emptied,
            "batches_deleted": self.batches_deleted,
            "segments_cleaned": self.segments_cleaned,
            "buffer_utilization": self.buffer_utilization,
            "map_full": self.map_full,
            "first_dirty_offset": self.first_dirty_offset,
            "checkpoint": self.end_offset,
            "segments_downloaded": self.segments_downloaded,
            "segments_skipped_by_bloom": self.segments_skipped_by_bloom,
            "bytes_downloaded": self.bytes_downloaded,
            "bytes_uploaded": self.bytes_uploaded,
            "records_removed": self.records_removed,
            "elapsed_ms": round(self.elapsed_secs * 1000.0, 3),
            "map_elapsed_ms": round(self.elapsed_index_secs * 1000.0, 3),
        }


@dataclass(slots=True)
class PreCleanStats:
    """What the last selection saw (Kafka: max compaction delay across compacted partitions)."""

    max_compaction_delay_ms: int = 0
    delayed_partitions: int = 0
    cleanable_partitions: int = 0

    def update_max_compaction_delay(self, delay_ms: int) -> None:
        self.max_compaction_delay_ms = max(self.max_compaction_delay_ms, delay_ms)
        if delay_ms > 0:
            self.delayed_partitions += 1
