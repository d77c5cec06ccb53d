"""RemoteLogMetadataManager: the strongly consistent store of remote segment metadata.

Kafka's RemoteLogMetadataManager (KIP-405) plus what fenced tiered compaction adds: leader
registration with an epoch lineage, fenced writes, a cleaner-offset vector per partition
published atomically with compacted segments (:meth:`publish_compaction`), and superseded
(unreferenced) segments for deferred deletion. The side stores a node also keeps in the
metadata database have protocols of their own: :mod:`metadata.segment_indexes` (bloom filters
and key indexes), :mod:`metadata.reports`, :mod:`metadata.erasures`, :mod:`metadata.topic_configs`.

Fencing model: every write names the leader epoch it was made under. A write is accepted
only when that epoch is the partition's registered epoch (set by :meth:`become_leader`),
checked in the same database transaction as the write. A zombie leader, a Spark job
started before a leadership change, or a delayed retry is rejected with
:class:`~metadata.errors.FencedLeaderEpochError` whatever the arrival order.

Implementations are thread-safe. This module never talks to the object store.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Protocol

from log.types import TopicPartition
from metadata.types import (
    LeaderState,
    RemoteLogSegmentId,
    RemoteLogSegmentMetadata,
    RemoteLogSegmentState,
)

#: COPY_SEGMENT_STARTED segments older than this are treated as abandoned uploads.
DEFAULT_ORPHAN_GRACE_MS = 15 * 60 * 1000


class RemoteLogMetadataManager(Protocol):
    """The remote segment metadata store; see the module docstring for the fencing model.

    Every method may raise :class:`~metadata.errors.MetadataStoreError` when the backing
    store fails (``retriable`` tells whether a retry may help); that is not repeated below.
    """

    # ------------------------------------------------------------------ leadership

    def become_leader(
        self, tp: TopicPartition, leader_epoch: int, broker_id: int, start_offset: int = 0
    ) -> LeaderState:
        """Register ``broker_id`` as leader of ``tp`` at ``leader_epoch``.

        Epochs are strictly increasing per partition. The epoch lineage entry
        ``leader_epoch -> start_offset`` (the first offset the new leader will write) is
        recorded in the same transaction.

        Raises:
            FencedLeaderEpochError: ``leader_epoch`` is not greater than the registered one.
            InvalidRequestError: ``start_offset`` is below the previous epoch's start offset.
        """

    def leader_state(self, tp: TopicPartition) -> LeaderState | None:
        """The registered leader of ``tp``, or None if nobody became leader yet."""

    def leader_epochs(self, tp: TopicPartition) -> list[tuple[int, int]]:
        """The epoch lineage of ``tp``: ``[(epoch, start_offset), ...]`` sorted by epoch."""

    # ------------------------------------------------------------------ segment writes

    def add_remote_log_segment_metadata(self, md: RemoteLogSegmentMetadata, *, leader_epoch: int) -> None:
        """Record that an upload of ``md`` is starting (before any object is written).

        Idempotent for a retried call with the same id and offsets.

        Raises:
            InvalidStateTransitionError: ``md.state`` is not COPY_SEGMENT_STARTED, ``md`` is
                already superseded, or the id exists with different content.
            FencedLeaderEpochError: ``leader_epoch`` is not the registered epoch.
        """

    def add_remote_log_segments(self, new: Sequence[tuple[RemoteLogSegmentMetadata, bytes | None]], *,
                                leader_epoch: int) -> None:
        """:meth:`add_remote_log_segment_metadata` for each segment, with its key bloom filter
        when the bytes are not None (what :meth:`~metadata.segment_indexes.SegmentIndexStore.
        put_bloom_filter` stores), all of ``new``'s one partition in one fenced transaction: a
        segment and its filter arrive together (a tiered round registering its rewrite before
        the copy, a Spark driver registering what its executors uploaded), and a partition's
        results cost one round trip, not two per segment.
        All or nothing; idempotent like the single calls.

        Raises:
            InvalidRequestError: the segments are not all of one partition.
            InvalidStateTransitionError, FencedLeaderEpochError: as the single calls.
        """

    def update_remote_log_segment_state(
        self,
        segment_id: RemoteLogSegmentId,
        state: RemoteLogSegmentState,
        *,
        leader_epoch: int,
        event_timestamp_ms: int,
        broker_id: int,
    ) -> RemoteLogSegmentMetadata:
        """Move a segment to ``state`` and return its new metadata.

        COPY_SEGMENT_FINISHED makes a plain tiered copy visible to readers;
        DELETE_SEGMENT_STARTED is the tombstone step that must precede object deletion
        (fenced like every write, so a zombie cannot start deleting);
        DELETE_SEGMENT_FINISHED records that the objects are gone (the row stays as a
        tombstone; its bloom filter is dropped). A self transition is a no-op, which makes
        retries idempotent.

        Raises:
            RemoteSegmentNotFoundError: no such segment.
            InvalidStateTransitionError: Kafka's state machine forbids the move.
            FencedLeaderEpochError: ``leader_epoch`` is not the registered epoch.
        """

    def publish_compaction(
        self,
        tp: TopicPartition,
        *,
        leader_epoch: int,
        new_segment_ids: Sequence[RemoteLogSegmentId],
        replaced_segment_ids: Sequence[RemoteLogSegmentId],
        cleaner_offsets: Mapping[int, int],
    ) -> None:
        """Atomically swap compacted segments in (remotely what Kafka's UnifiedLog.replaceSegments does).

        In one transaction: check the fence; validate ``cleaner_offsets`` against the
        stored lineage (entries for epochs below ``leader_epoch`` must equal the stored
        ones, no entry for a later or unknown epoch, the entry for ``leader_epoch`` never
        goes backwards, values are non-decreasing by epoch); move every new segment
        COPY_SEGMENT_STARTED -> COPY_SEGMENT_FINISHED carrying the vector; mark every
        replaced segment ``superseded_by`` (it stays COPY_SEGMENT_FINISHED for deferred
        deletion but readers stop seeing it); store the vector as the partition's current one.

        Idempotent: repeating a publish that already committed succeeds without change.

        Raises:
            FencedLeaderEpochError: ``leader_epoch`` is not the registered epoch, or a new
                segment was added under a different epoch.
            CleanerOffsetLineageError: the vector contradicts the stored lineage.
            RemoteSegmentNotFoundError: an id is unknown or belongs to another partition.
            InvalidStateTransitionError: a new segment is not COPY_SEGMENT_STARTED, or a
                replaced one is not a referenced COPY_SEGMENT_FINISHED segment.
        """

    def publish_cleaner_offsets(
        self, tp: TopicPartition, *, leader_epoch: int, cleaner_offsets: Mapping[int, int]
    ) -> None:
        """Store a new cleaner-offset vector for a clean that rewrote no remote segment.

        Same fence and validation as :meth:`publish_compaction`; idempotent.

        Raises:
            FencedLeaderEpochError, CleanerOffsetLineageError: as publish_compaction.
        """

    # ------------------------------------------------------------------ reads

    def list_remote_log_segments(
        self,
        tp: TopicPartition,
        *,
        include_superseded: bool = False,
        states: Sequence[RemoteLogSegmentState] | None = None,
    ) -> list[RemoteLogSegmentMetadata]:
        """Segments of ``tp`` sorted by start offset (then id).

        By default only what readers see: COPY_SEGMENT_FINISHED and not superseded.
        ``states`` selects other states; ``include_superseded`` adds replaced ones.
        """

    def remote_log_segment_metadata(self, tp: TopicPartition, offset: int) -> RemoteLogSegmentMetadata | None:
        """The referenced finished segment containing ``offset``; if ``offset`` falls in a
        gap (e.g. left by compaction), the first referenced segment after it; else None."""

    def remote_log_size(self, tp: TopicPartition) -> int:
        """Sum of ``segment_size_in_bytes`` of the referenced finished segments.

        Served from memory after the first call and kept up to date incrementally by
        every write made through this manager (writes by other processes are seen after
        :meth:`invalidate_caches`).
        """

    def invalidate_caches(self, tp: TopicPartition | None = None) -> None:
        """Forget cached sums (for one partition, or all) so the next read recomputes them."""

    def cleaner_offsets(self, tp: TopicPartition) -> dict[int, int]:
        """The partition's current cleaner-offset vector {leader epoch -> cleaner offset}."""

    def resolve_cleaner_checkpoint(self, tp: TopicPartition) -> int | None:
        """The cleaner offset a new leader continues from: the vector's value for its
        highest epoch, or None when nothing was ever cleaned."""

    def unreferenced_segments(
        self, tp: TopicPartition, *, orphan_grace_ms: int | None = None
    ) -> list[RemoteLogSegmentMetadata]:
        """Segments whose objects the deferred-delete loop should remove, by start offset:
        superseded ones; COPY_SEGMENT_STARTED uploads abandoned by a crashed or fenced
        leader (older than ``orphan_grace_ms``, or added under an epoch below the current
        one); DELETE_SEGMENT_STARTED ones whose deletion did not finish."""

    def is_segment_within_leader_epochs(
        self, md: RemoteLogSegmentMetadata, tp: TopicPartition, log_end_offset: int | None = None
    ) -> bool:
        """Kafka's isRemoteSegmentWithinLeaderEpochs against the stored lineage of ``tp``
        (``log_end_offset`` adds the "segment ends below the log end" check)."""

    # ------------------------------------------------------------------ admin

    def partitions(self) -> list[TopicPartition]:
        """Every partition with a leader or segment metadata, sorted."""

    def begin_partition_deletion(
        self, tp: TopicPartition, *, leader_epoch: int, broker_id: int, event_timestamp_ms: int
    ) -> list[RemoteLogSegmentMetadata]:
        """The fenced first step of deleting a partition's remote data (topic deletion).

        In one transaction: check that ``leader_epoch`` is the registered epoch, then move
        every segment of ``tp`` that is not DELETE_SEGMENT_FINISHED to
        DELETE_SEGMENT_STARTED (readers stop seeing them). Returns those segments: the
        caller deletes their objects, then calls :meth:`delete_partition` with the same
        epoch. Idempotent for the current leader.

        Raises:
            FencedLeaderEpochError: ``leader_epoch`` is not the registered epoch; nothing
                changed (a non-leader or zombie cannot delete shared data).
        """

    def delete_partition(self, tp: TopicPartition, *, leader_epoch: int | None = None) -> None:
        """Forget everything about ``tp`` (topic deletion). Idempotent. The caller removes
        the objects first (see :meth:`begin_partition_deletion`).

        With ``leader_epoch`` the deletion is fenced in the same transaction (a partition
        with no leader row any more is already deleted: a no-op). ``None`` deletes
        unconditionally: only for tools that own the whole store, never a broker.

        Raises:
            FencedLeaderEpochError: ``leader_epoch`` is given and is not the registered epoch.
        """

    def close(self) -> None:
        """Release connections. Idempotent."""
