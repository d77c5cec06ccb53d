"""Errors of the metadata layer.

    TiercompactError
    └── MetadataError
        ├── FencedLeaderEpochError        a write by a leader whose epoch has been superseded
        │   ├── CleanerOffsetLineageError a cleaner-offset vector contradicting the stored lineage
        │   └── NotLeaderForPartitionError this broker does not hold the partition's registered epoch
        ├── InvalidStateTransitionError   e.g. DELETE_SEGMENT_FINISHED -> COPY_SEGMENT_STARTED
        ├── RemoteSegmentNotFoundError    no metadata for that segment id
        └── MetadataStoreError            the database failed (``retriable`` when it says so)
            └── MetadataStoreTimeoutError a lock, busy or statement timeout bounded a transaction

SQLAlchemy and driver errors are translated in metadata/sql/engine.py and never leave the package.
This module imports nothing of metadata (metadata.types raises its errors).
"""

from __future__ import annotations

import enum
from typing import TYPE_CHECKING

from log.errors import TiercompactError

if TYPE_CHECKING:
    from log.types import TopicPartition


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
    """A cleaner-offset vector that contradicts the stored lineage: a stale or
    zombie claim for an earlier epoch, or a cleaner offset going backwards."""

    def __init__(self, topic_partition: TopicPartition, attempted_epoch: int, detail: str) -> None:
        super().__init__(topic_partition, attempted_epoch, None, None, "publish",
                         detail=f"cleaner offsets for {topic_partition} published at leader epoch "
                                f"{attempted_epoch} rejected: {detail}")


class NotLeaderForPartitionError(FencedLeaderEpochError):
    """This broker does not hold the partition's registered leader epoch.

    Raised before any upload, publish or delete when the metadata store shows the current
    epoch registered by another broker, or an epoch newer than the one this broker acts
    under: a restarted old leader never resumes an epoch another broker registered. The
    broker is a follower (fenced) for the partition until leadership is moved back to it
    with a higher epoch.
    """

    def __init__(
        self,
        topic_partition: TopicPartition,
        broker_id: int,
        current_epoch: int,
        current_broker: int,
        action: str,
    ) -> None:
        self.broker_id = broker_id
        super().__init__(
            topic_partition, current_epoch, current_epoch, current_broker, action,
            detail=(f"{action} on {topic_partition} rejected: broker {broker_id} is not the leader; broker "
                    f"{current_broker} holds leader epoch {current_epoch} in the metadata store. This broker "
                    f"is fenced for {topic_partition} (no uploads, cleaning publishes or deletes of shared "
                    f"data): send the request to broker {current_broker}, or move leadership here with a "
                    f"higher epoch (leadership request with leader_epoch={current_epoch + 1}, "
                    f"broker_id={broker_id})"))


class InvalidStateTransitionError(MetadataError):
    """A segment state change Kafka's state machine does not allow."""

    def __init__(
        self,
        segment_id: object,
        src: enum.Enum | None,
        dst: enum.Enum,
        detail: str = "",
    ) -> None:
        """``segment_id`` is a RemoteLogSegmentId (or its text), ``src`` and ``dst``
        RemoteLogSegmentStates (``src`` None for a new segment)."""
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


class MetadataStoreTimeoutError(MetadataStoreError):
    """A metadata transaction hit its bound: PostgreSQL's lock_timeout or
    statement_timeout, or SQLite's busy timeout (another writer, e.g. a stalled old leader,
    held the lock). Always retriable; ``retry_after_s`` is a hint for clients."""

    def __init__(self, message: str, *, retry_after_s: int = 1) -> None:
        super().__init__(message, retriable=True)
        self.retry_after_s = retry_after_s
