"""SegmentIndexStore: the key indexes of remote segments a planner consults instead of
downloading them (each segment's bloom filter, and whether its exact key index object exists).

Neither is fenced: both describe immutable segment content, so any broker may build them. A
filter registered together with its new segment goes through
:meth:`~metadata.manager.RemoteLogMetadataManager.add_remote_log_segments`, in the segment's
fenced transaction; a filter is dropped when its segment's deletion finishes.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

from log.types import TopicPartition
from metadata.log_start import LogStartOffsetStore
from metadata.manager import RemoteLogMetadataManager
from metadata.types import RemoteLogSegmentId


class SegmentIndexStore(Protocol):
    """Bloom filters and key index sizes of remote segments."""

    def put_bloom_filter(self, segment_id: RemoteLogSegmentId, data: bytes) -> None:
        """Store (or replace) the key bloom filter of a segment.

        Raises:
            RemoteSegmentNotFoundError: no such segment, or it was deleted.
        """

    def get_bloom_filter(self, segment_id: RemoteLogSegmentId) -> bytes | None:
        """The stored bloom filter bytes, or None if none was built yet."""

    def get_bloom_filters(self, tp: TopicPartition, segment_ids: Sequence[str]) -> dict[str, bytes]:
        """The stored bloom filters of several segments of ``tp`` in few round trips (a round
        plans over thousands): segment id -> bytes, absent when none was built."""

    def set_key_index(self, segment_id: RemoteLogSegmentId, size_bytes: int) -> None:
        """Record that the segment's exact key index object now exists (``key_index_bytes`` in
        its metadata), for a segment that got one after it was copied.

        Raises:
            RemoteSegmentNotFoundError: no such segment, or it was deleted.
        """


class IndexedSegmentStore(RemoteLogMetadataManager, SegmentIndexStore, LogStartOffsetStore, Protocol):
    """Remote segments with their key indexes and the log start DeleteRecords set: what tiering a
    segment, cleaning tiered ones and retention use."""
