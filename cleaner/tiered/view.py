"""What a tiered round reads of its partition besides metadata and the object store: the
:class:`PartitionView` protocol, and :class:`LocalPartition`, the view of a node's live LocalLog.

The round (:class:`~cleaner.tiered.TieredCleaner`), its plan (:func:`~cleaner.tiered.plan_round`)
and its transaction walk (:class:`~cleaner.tiered.RoundTxnIndexes`) are typed against the
protocol, so three partitions run the same code: a node's live log (:class:`LocalPartition`), a
Spark executor's shipped copy of what the driver read of it (:mod:`cleaner.spark.partition_round`)
and a partition known only from its remote tier (:mod:`cleaner.spark.views`).
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol, runtime_checkable

from cleaner.retention import ProducerInfo
from log.config import LogConfig
from log.index.txn_index import AbortedTxn, TxnIndexLink
from log.local_log import LocalLog
from log.segment import LogSegment
from log.types import TopicPartition
from metadata.types import RemoteLogSegmentMetadata


@dataclass(frozen=True, slots=True)
class LinkedCopy:
    """Hard links to a local segment's files (its log, and its transaction index if present)."""

    links: tuple[Path, ...]
    base_offset: int
    index_interval_bytes: int
    #: what a corruption error names: the local file
    name: str


@runtime_checkable
class PartitionView(Protocol):
    """One partition's local side, as a tiered round reads it (see the module docstring)."""

    @property
    def topic_partition(self) -> TopicPartition: ...

    @property
    def config(self) -> LogConfig: ...

    @property
    def log_end_offset(self) -> int: ...

    @property
    def last_stable_offset(self) -> int: ...

    @property
    def active_base_offset(self) -> int:
        """The base offset of the active segment (nothing at or above it is cleanable)."""
        ...

    def local_bytes_above(self, remote_end: int) -> int:
        """Bytes of the local segments starting at or above ``remote_end`` (not tiered yet)."""
        ...

    def active_producers(self) -> Mapping[int, ProducerInfo]:
        """Each producer's last batch, as Kafka's cleaner keeps it (over both tiers)."""
        ...

    def local_txn_links(self, remote_end: int) -> list[TxnIndexLink]:
        """The transaction indexes of the local segments reaching above ``remote_end``, in offset
        order, each starting at ``max(base, remote_end)``."""
        ...

    def local_copy_txns(self, md: RemoteLogSegmentMetadata) -> list[AbortedTxn] | None:
        """The transaction index of an identical local copy of ``md``; None without one."""
        ...

    def link_local_copy(self, md: RemoteLogSegmentMetadata, into: Path) -> LinkedCopy | None:
        """Hard-link an identical local copy of ``md`` into ``into``; None without one (or when
        linking fails)."""
        ...

    def drop_local_copies_below(self, end: int) -> list[int]:
        """Delete the local segments wholly below ``end`` (stale copies of remote data once the
        checkpoint reached ``end``); returns their base offsets."""
        ...


@dataclass
class LocalPartition:
    """A node's live LocalLog as a :class:`PartitionView` (every read under the log's lock)."""

    log: LocalLog

    @property
    def topic_partition(self) -> TopicPartition:
        return self.log.topic_partition

    @property
    def config(self) -> LogConfig:
        return self.log.config

    @property
    def log_end_offset(self) -> int:
        return self.log.log_end_offset

    @property
    def last_stable_offset(self) -> int:
        return self.log.last_stable_offset

    @property
    def active_base_offset(self) -> int:
        return self.log.active_segment.base_offset

    def local_bytes_above(self, remote_end: int) -> int:
        return sum(s.size for s in self.log.all_segments() if s.base_offset >= remote_end)

    def active_producers(self) -> Mapping[int, ProducerInfo]:
        with self.log.lock:
            return self.log.producer_state.active_producers()

    def local_txn_links(self, remote_end: int) -> list[TxnIndexLink]:
        with self.log.lock:
            local = [seg for seg in self.log.all_segments() if seg.read_next_offset() > remote_end]
        return [(max(seg.base_offset, remote_end), self._txn_loader(seg)) for seg in local]

    def _txn_loader(self, seg: LogSegment) -> Callable[[], list[AbortedTxn]]:
        def load() -> list[AbortedTxn]:
            with self.log.lock:
                return seg.txn_index.all()
        return load

    def _local_copy(self, md: RemoteLogSegmentMetadata) -> LogSegment | None:
        """The local segment holding exactly the remote segment's bytes ('both' tier), if any."""
        log = self.log
        with log.lock:
            seg = log.segments.get(md.start_offset)
            if seg is None or seg is log.active_segment or seg.size != md.segment_size_in_bytes:
                return None
            if seg.read_next_offset() != md.end_offset + 1 or not seg.log_path.exists():
                return None
            return seg

    def local_copy_txns(self, md: RemoteLogSegmentMetadata) -> list[AbortedTxn] | None:
        local = self._local_copy(md)
        if local is None:
            return None
        with self.log.lock:
            return local.txn_index.all()

    def link_local_copy(self, md: RemoteLogSegmentMetadata, into: Path) -> LinkedCopy | None:
        # under the log's lock, so local retention running meanwhile cannot pull the files away
        with self.log.lock:
            seg = self._local_copy(md)
            if seg is None:
                return None
            links: list[Path] = []
            try:
                for f in (seg.log_path, seg.txn_index.path):
                    if f.exists():
                        dst = into / f.name
                        dst.unlink(missing_ok=True)
                        os.link(f, dst)
                        links.append(dst)
            except OSError:
                for p in links:
                    p.unlink(missing_ok=True)
                return None
            return LinkedCopy(tuple(links), seg.base_offset, seg.index_interval_bytes, str(seg.log_path))

    def drop_local_copies_below(self, end: int) -> list[int]:
        log = self.log
        with log.lock:
            stale = [s for s in log.all_segments() if s is not log.active_segment and s.read_next_offset() <= end]
            return log.delete_segments(stale)


def partition_view(log: PartitionView | LocalLog) -> PartitionView:
    """``log`` as a :class:`PartitionView`: a LocalLog is wrapped, a view returned as it is."""
    return LocalPartition(log) if isinstance(log, LocalLog) else log
