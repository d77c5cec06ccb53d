"""Remote log segment value types (Kafka's RemoteLogSegmentId / State / Metadata).

These are the types every layer above ``metadata`` speaks: the RemoteLogManager builds a
:class:`RemoteLogSegmentMetadata` before uploading, the RemoteStorageManager derives object
keys from it, the tiered cleaner publishes new ones with a cleaner-offset vector.
All are immutable and check their invariants on construction.
"""

from __future__ import annotations

import enum
import uuid
from collections.abc import Mapping
from dataclasses import dataclass, field, replace

from log.errors import InvalidRequestError
from log.types import TopicPartition
from metadata.errors import InvalidStateTransitionError


@dataclass(frozen=True, slots=True)
class RemoteLogSegmentId:
    """Identity of one uploaded copy of a segment.

    A fresh id is generated for every upload attempt (Kafka: "regenerated for every
    attempt"), so a retried or rewritten upload never overwrites objects a reader may
    still be using.
    """

    topic_partition: TopicPartition
    id: str

    def __post_init__(self) -> None:
        if not isinstance(self.id, str) or len(self.id) != 32 or any(c not in "0123456789abcdef" for c in self.id):
            raise InvalidRequestError(f"invalid remote segment id {self.id!r}: expected 32 lowercase hex digits")

    @staticmethod
    def generate(tp: TopicPartition) -> RemoteLogSegmentId:
        return RemoteLogSegmentId(tp, uuid.uuid4().hex)

    def __str__(self) -> str:
        return f"{self.topic_partition}:{self.id}"


class RemoteLogSegmentState(enum.Enum):
    """Lifecycle of a remote segment (Kafka ids kept for familiarity).

    COPY_SEGMENT_STARTED -> COPY_SEGMENT_FINISHED -> DELETE_SEGMENT_STARTED -> DELETE_SEGMENT_FINISHED,
    with COPY_SEGMENT_STARTED -> DELETE_SEGMENT_STARTED for abandoned uploads.
    """

    COPY_SEGMENT_STARTED = 0
    COPY_SEGMENT_FINISHED = 1
    DELETE_SEGMENT_STARTED = 2
    DELETE_SEGMENT_FINISHED = 3

    @staticmethod
    def is_valid_transition(src: RemoteLogSegmentState | None, dst: RemoteLogSegmentState) -> bool:
        """Kafka's RemoteLogSegmentState.isValidTransition; a self transition is valid
        (it makes retried updates idempotent). ``src=None`` means "new segment"."""
        if src is None:
            return dst is RemoteLogSegmentState.COPY_SEGMENT_STARTED
        if src is dst:
            return True
        return dst in _VALID_NEXT[src]


_S = RemoteLogSegmentState
_VALID_NEXT: dict[RemoteLogSegmentState, frozenset[RemoteLogSegmentState]] = {
    _S.COPY_SEGMENT_STARTED: frozenset({_S.COPY_SEGMENT_FINISHED, _S.DELETE_SEGMENT_STARTED}),
    _S.COPY_SEGMENT_FINISHED: frozenset({_S.DELETE_SEGMENT_STARTED}),
    _S.DELETE_SEGMENT_STARTED: frozenset({_S.DELETE_SEGMENT_FINISHED}),
    _S.DELETE_SEGMENT_FINISHED: frozenset(),
}


class FrozenIntMap(dict[int, int]):
    """A read-only, hashable, picklable {int -> int} (mappingproxy does not pickle, and
    Spark ships segment metadata to executors)."""

    __slots__ = ()

    def _readonly(self, *args: object, **kwargs: object) -> None:
        raise TypeError("segment metadata maps are immutable")

    __setitem__ = __delitem__ = clear = pop = popitem = setdefault = update = _readonly  # type: ignore[assignment]
    __ior__ = _readonly  # type: ignore[assignment]

    def __hash__(self) -> int:  # type: ignore[override]
        return hash(tuple(self.items()))

    def __reduce__(self) -> tuple[object, ...]:
        return (FrozenIntMap, (dict(self),))


def _frozen_int_map(name: str, m: Mapping[int, int]) -> Mapping[int, int]:
    out: dict[int, int] = {}
    for k, v in m.items():
        if isinstance(k, bool) or isinstance(v, bool) or not isinstance(k, int) or not isinstance(v, int):
            raise InvalidRequestError(f"{name} must map int -> int, got {k!r} -> {v!r}")
        if k < 0 or v < 0:
            raise InvalidRequestError(f"{name} entries must be >= 0, got {k} -> {v}")
        out[k] = v
    # sorted by epoch so equality, iteration and serialisation are deterministic
    return FrozenIntMap(sorted(out.items()))


@dataclass(frozen=True, slots=True)
class RemoteLogSegmentMetadata:
    """What the metadata store knows about one remote segment.

    ``segment_leader_epochs`` maps leader epoch -> first offset of that epoch within the
    segment (Kafka's segmentLeaderEpochs). ``cleaner_offsets`` is the vector
    {leader epoch -> cleaner offset} published with a compacted segment (empty for a
    plain tiered copy). ``superseded_by`` is None while the segment is referenced by
    readers; after a compaction replaced it, it names the replacing segment id ("" when
    compaction removed every record and nothing replaced it).
    ``key_index_bytes`` says the segment's exact key index object exists (and its size), so
    a planner knows it without an object-store call.
    """

    remote_log_segment_id: RemoteLogSegmentId
    start_offset: int
    end_offset: int
    max_timestamp_ms: int
    broker_id: int
    event_timestamp_ms: int
    segment_size_in_bytes: int
    segment_leader_epochs: Mapping[int, int]
    state: RemoteLogSegmentState = RemoteLogSegmentState.COPY_SEGMENT_STARTED
    cleaner_offsets: Mapping[int, int] = field(default_factory=dict)
    superseded_by: str | None = None
    #: size of the segment's exact key index object (``.keyindex``), None if it has none yet
    key_index_bytes: int | None = None

    def __post_init__(self) -> None:
        if self.key_index_bytes is not None and (isinstance(self.key_index_bytes, bool)
                                                 or not isinstance(self.key_index_bytes, int)
                                                 or self.key_index_bytes < 0):
            raise InvalidRequestError(f"key_index_bytes {self.key_index_bytes!r} must be None or an int >= 0")
        if self.start_offset < 0:
            raise InvalidRequestError(f"start_offset {self.start_offset} must be >= 0")
        if self.end_offset < self.start_offset:
            raise InvalidRequestError(
                f"end_offset {self.end_offset} must be >= start_offset {self.start_offset}"
            )
        if self.segment_size_in_bytes < 0:
            raise InvalidRequestError(f"segment_size_in_bytes {self.segment_size_in_bytes} must be >= 0")
        if not self.segment_leader_epochs:
            raise InvalidRequestError("segment_leader_epochs must not be empty")
        if not isinstance(self.state, RemoteLogSegmentState):
            raise InvalidRequestError(f"state must be a RemoteLogSegmentState, got {self.state!r}")
        epochs = _frozen_int_map("segment_leader_epochs", self.segment_leader_epochs)
        first = next(iter(epochs.values()))
        if any(o > self.end_offset for o in epochs.values()) or first < 0:
            raise InvalidRequestError(
                f"segment_leader_epochs {dict(epochs)} has a start offset beyond end_offset {self.end_offset}"
            )
        object.__setattr__(self, "segment_leader_epochs", epochs)
        object.__setattr__(self, "cleaner_offsets", _frozen_int_map("cleaner_offsets", self.cleaner_offsets))

    @property
    def topic_partition(self) -> TopicPartition:
        return self.remote_log_segment_id.topic_partition

    @property
    def id(self) -> str:
        return self.remote_log_segment_id.id

    @property
    def is_referenced(self) -> bool:
        """Whether readers see this segment (finished and not replaced by compaction)."""
        return self.state is RemoteLogSegmentState.COPY_SEGMENT_FINISHED and self.superseded_by is None

    def with_state(
        self,
        state: RemoteLogSegmentState,
        *,
        event_timestamp_ms: int | None = None,
        broker_id: int | None = None,
        cleaner_offsets: Mapping[int, int] | None = None,
        superseded_by: str | None = None,
    ) -> RemoteLogSegmentMetadata:
        """A copy in ``state``; raises InvalidStateTransitionError for an illegal move."""
        if not RemoteLogSegmentState.is_valid_transition(self.state, state):
            raise InvalidStateTransitionError(self.remote_log_segment_id, self.state, state)
        return replace(
            self,
            state=state,
            event_timestamp_ms=self.event_timestamp_ms if event_timestamp_ms is None else event_timestamp_ms,
            broker_id=self.broker_id if broker_id is None else broker_id,
            cleaner_offsets=self.cleaner_offsets if cleaner_offsets is None else cleaner_offsets,
            superseded_by=self.superseded_by if superseded_by is None else superseded_by,
        )


@dataclass(frozen=True, slots=True)
class LeaderState:
    """The registered leader of a partition: only writes carrying this epoch are accepted."""

    topic_partition: TopicPartition
    leader_epoch: int
    broker_id: int

    def __post_init__(self) -> None:
        if self.leader_epoch < 0:
            raise InvalidRequestError(f"leader_epoch {self.leader_epoch} must be >= 0")


@dataclass(frozen=True, slots=True)
class PartitionVersion:
    """A partition's change token in the metadata store and its registered leader (epoch -1
    and broker -1 while nobody leads it): the token changes with every write of the partition."""

    token: str
    leader_epoch: int
    broker_id: int
