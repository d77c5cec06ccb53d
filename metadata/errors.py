"""Errors of the metadata layer.

    TiercompactError
    └── MetadataError
        ├── FencedLeaderEpochError        a write by a leader whose epoch has been superseded
        │   └── CleanerOffsetLineageError a cleaner-offset vector contradicting the stored lineage
        ├── InvalidStateTransitionError   e.g. DELETE_SEGMENT_FINISHED -> COPY_SEGMENT_STARTED
        ├── RemoteSegmentNotFoundError    no metadata for that segment id
        └── MetadataStoreError            the database failed (``retriable`` when it says so)

SQLAlchemy and driver errors are translated in metadata/sql.py and never leave the package.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from log.errors import TiercompactError

if TYPE_CHECKING:
    from log.types import TopicPartition
    from metadata.types import RemoteLogSegmentId, RemoteLogSegmentState


class MetadataError(TiercompactError):
    """Root of the metadata subtree."""


class FencedLeaderEpochError(MetadataError):
    """A publish, upload or delete came from a leader epoch that is no longer current.

    The caller's work must be discarded: another leader owns the partition now.
    """

    def __init__(
        self,
        topic_partition: TopicPartition,
        attempted_epoch: int,
        current_epoch: int | None,
        current_broker: int | None,
        action: str,
        detail: str | None = None,
    ) -> None:
        self.topic_partition = topic_partition
        self.attempted_epoch = attempted_epoch
        self.current_epoch = current_epoch
        self.current_broker = current_broker
        if detail is not None:
            msg = detail
        elif current_epoch is None:
            msg = (f"{action} on {topic_partition} with leader epoch {attempted_epoch} rejected: the partition "
                   f"has no registered leader; call become_leader first")
        elif attempted_epoch < current_epoch:
            msg = (f"{action} on {topic_partition} with leader epoch {attempted_epoch} was fenced by broker "
                   f"{current_broker} at leader epoch {current_epoch}; discard this work (it will be redone "
                   f"by the current leader)")
        else:
            msg = (f"{action} on {topic_partition} with leader epoch {attempted_epoch} rejected: the current "
                   f"leader epoch is {current_epoch} (broker {current_broker}); call become_leader with the "
                   f"new epoch first")
        super().__init__(msg)


class CleanerOffsetLineageError(FencedLeaderEpochError):
    """A cleaner-offset vector that contradicts the stored lineage (seed 004): a stale or
    zombie claim for an earlier epoch, or a cleaner offset going backwards."""

    def __init__(self, topic_partition: TopicPartition, attempted_epoch: int, detail: str) -> None:
        super().__init__(topic_partition, attempted_epoch, None, None, "publish",
                         detail=f"cleaner offsets for {topic_partition} published at leader epoch "
                                f"{attempted_epoch} rejected: {detail}")


class InvalidStateTransitionError(MetadataError):
    """A segment state change Kafka's state machine does not allow."""

    def __init__(
        self,
        segment_id: RemoteLogSegmentId | str,
        src: RemoteLogSegmentState | None,
        dst: RemoteLogSegmentState,
        detail: str = "",
    ) -> None:
        self.segment_id = segment_id
        self.src = src
        self.dst = dst
        s = src.name if src is not None else "(new)"
        super().__init__(f"remote segment {segment_id}: invalid state transition {s} -> {dst.name}"
                         + (f" ({detail})" if detail else ""))


class RemoteSegmentNotFoundError(MetadataError):
    """No metadata exists for the given remote segment id."""


class MetadataStoreError(MetadataError):
    """The metadata database failed; ``retriable`` is True when a retry may succeed
    (lock timeout, lost connection, serialization failure)."""

    def __init__(self, message: str, *, retriable: bool = False) -> None:
        super().__init__(message)
        self.retriable = retriable
