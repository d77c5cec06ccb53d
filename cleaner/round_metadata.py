"""What a tiered round reads from and writes to the metadata store, and a recorder that holds
the writes back for a Spark driver to make.

:class:`RoundMetadata` is the part of :class:`~metadata.manager.RemoteLogMetadataManager` a
round of :class:`cleaner.tiered.TieredCleaner` (with its :class:`~cleaner.key_skip.SkipPolicy`
and :class:`~cleaner.tiered.RoundTxnIndexes`) uses once its plan is made: bloom filters, the
registration of new segments and the fenced publish. The in-process round passes the real
store.

:class:`DeferredRoundMetadata` is what a Spark executor passes instead (:mod:`cleaner.spark.
partition_round`): an executor may have no route to the metadata store (a SQLite file on the
node, a PostgreSQL the cluster cannot reach), and it must never publish anyway, since the driver
publishes every partition of a job under the epoch it captured at the job's start. Reads come
from what the driver shipped (the partition's bloom filters); writes are recorded, in order, and
the driver replays them against the real store (:meth:`DeferredRoundMetadata.writes`). The
recorder never raises a fence: fencing happens when the driver replays.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Protocol

from log.types import TopicPartition
from metadata.reports import RoundReportStore
from metadata.segment_indexes import IndexedSegmentStore
from metadata.types import RemoteLogSegmentId, RemoteLogSegmentMetadata, RemoteLogSegmentState


class TieredMetadata(IndexedSegmentStore, RoundReportStore, Protocol):
    """The metadata store as the tiered cleaner uses it: remote segments with their key indexes
    (to plan and run rounds, a :class:`RoundMetadata`) and round reports."""


class RoundMetadata(Protocol):
    """The metadata store as a tiered round sees it (the methods' contracts are
    :class:`~metadata.manager.RemoteLogMetadataManager`'s)."""

    def get_bloom_filter(self, segment_id: RemoteLogSegmentId) -> bytes | None: ...

    def get_bloom_filters(self, tp: TopicPartition, segment_ids: Sequence[str]) -> dict[str, bytes]: ...

    def set_key_index(self, segment_id: RemoteLogSegmentId, size_bytes: int) -> None: ...

    def add_remote_log_segments(self, new: Sequence[tuple[RemoteLogSegmentMetadata, bytes | None]], *,
                                leader_epoch: int) -> None: ...

    def update_remote_log_segment_state(self, segment_id: RemoteLogSegmentId, state: RemoteLogSegmentState, *,
                                        leader_epoch: int, event_timestamp_ms: int,
                                        broker_id: int) -> RemoteLogSegmentMetadata: ...

    def publish_compaction(self, tp: TopicPartition, *, leader_epoch: int,
                           new_segment_ids: Sequence[RemoteLogSegmentId],
                           replaced_segment_ids: Sequence[RemoteLogSegmentId],
                           cleaner_offsets: Mapping[int, int]) -> None: ...

    def publish_cleaner_offsets(self, tp: TopicPartition, *, leader_epoch: int,
                                cleaner_offsets: Mapping[int, int]) -> None: ...


@dataclass(frozen=True, slots=True)
class RoundWrites:
    """A round's metadata writes, as a driver replays them: the new segments in upload order
    (each with its bloom filter), the segments they replace, the cleaner-offset vector, key
    indexes built for segments that had none, and the new segments the round itself abandoned."""

    new_segments: tuple[tuple[RemoteLogSegmentMetadata, bytes | None], ...] = ()
    replaced_ids: tuple[str, ...] = ()
    cleaner_offsets: tuple[tuple[int, int], ...] | None = None
    key_indexes: tuple[tuple[str, int], ...] = ()
    abandoned_ids: tuple[str, ...] = ()

    @property
    def published(self) -> bool:
        return self.cleaner_offsets is not None


@dataclass
class DeferredRoundMetadata:
    """Reads from the shipped ``blooms`` (segment id -> filter bytes); writes recorded for the
    driver (see the module docstring). One round per instance; not thread-safe."""

    blooms: dict[str, bytes] = field(default_factory=dict)
    _new: dict[str, RemoteLogSegmentMetadata] = field(default_factory=dict)
    _new_blooms: dict[str, bytes] = field(default_factory=dict)
    _replaced: list[str] = field(default_factory=list)
    _vector: tuple[tuple[int, int], ...] | None = None
    _key_indexes: dict[str, int] = field(default_factory=dict)
    _abandoned: list[str] = field(default_factory=list)

    # ---- reads ------------------------------------------------------------------------------
    def get_bloom_filter(self, segment_id: RemoteLogSegmentId) -> bytes | None:
        return self._new_blooms.get(segment_id.id) or self.blooms.get(segment_id.id)

    def get_bloom_filters(self, tp: TopicPartition, segment_ids: Sequence[str]) -> dict[str, bytes]:
        return {sid: self.blooms[sid] for sid in segment_ids if sid in self.blooms}

    # ---- writes (recorded) ------------------------------------------------------------------
    def put_bloom_filter(self, segment_id: RemoteLogSegmentId, data: bytes) -> None:
        if segment_id.id in self._new:
            self._new_blooms[segment_id.id] = data
        # a filter for an existing segment is never built by a round (only by tiering)

    def set_key_index(self, segment_id: RemoteLogSegmentId, size_bytes: int) -> None:
        self._key_indexes[segment_id.id] = size_bytes

    def add_remote_log_segment_metadata(self, md: RemoteLogSegmentMetadata, *, leader_epoch: int) -> None:
        if md.state is not RemoteLogSegmentState.COPY_SEGMENT_STARTED:
            raise ValueError(f"a round registers new segments COPY_SEGMENT_STARTED, not {md.state.name}")
        self._new[md.id] = md

    def add_remote_log_segments(self, new: Sequence[tuple[RemoteLogSegmentMetadata, bytes | None]], *,
                                leader_epoch: int) -> None:
        for md, bloom in new:
            self.add_remote_log_segment_metadata(md, leader_epoch=leader_epoch)
            if bloom is not None:
                self.put_bloom_filter(md.remote_log_segment_id, bloom)

    def update_remote_log_segment_state(self, segment_id: RemoteLogSegmentId, state: RemoteLogSegmentState, *,
                                        leader_epoch: int, event_timestamp_ms: int,
                                        broker_id: int) -> RemoteLogSegmentMetadata:
        """Only a round abandoning its own upload moves a segment: the driver never registers it."""
        md = self._new.get(segment_id.id)
        if md is None:
            raise ValueError(f"segment {segment_id} is not one of this round's uploads")
        if state is RemoteLogSegmentState.DELETE_SEGMENT_STARTED:
            self._new.pop(segment_id.id)
            self._new_blooms.pop(segment_id.id, None)
            self._abandoned.append(segment_id.id)
        return md

    def publish_compaction(self, tp: TopicPartition, *, leader_epoch: int,
                           new_segment_ids: Sequence[RemoteLogSegmentId],
                           replaced_segment_ids: Sequence[RemoteLogSegmentId],
                           cleaner_offsets: Mapping[int, int]) -> None:
        missing = [s.id for s in new_segment_ids if s.id not in self._new]
        if missing:
            raise ValueError(f"publish names segments the round never registered: {missing}")
        self._replaced = [s.id for s in replaced_segment_ids]
        self._vector = tuple(sorted(cleaner_offsets.items()))

    def publish_cleaner_offsets(self, tp: TopicPartition, *, leader_epoch: int,
                                cleaner_offsets: Mapping[int, int]) -> None:
        self._vector = tuple(sorted(cleaner_offsets.items()))

    def writes(self) -> RoundWrites:
        """What the driver replays, in upload order."""
        return RoundWrites(new_segments=tuple((md, self._new_blooms.get(sid)) for sid, md in self._new.items()),
                           replaced_ids=tuple(self._replaced), cleaner_offsets=self._vector,
                           key_indexes=tuple(self._key_indexes.items()), abandoned_ids=tuple(self._abandoned))
