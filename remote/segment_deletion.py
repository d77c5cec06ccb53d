"""KIP-405's remote segment delete sequence, written once: DELETE_SEGMENT_STARTED (a fenced
metadata write), delete the segment's objects, DELETE_SEGMENT_FINISHED.

Remote retention and the deferred-delete loop (:mod:`remote.retention`), the tiered round's
cleanup of a failed round's uploads (:mod:`cleaner.tiered`) and the Spark driver's
(:mod:`cleaner.spark.publish`) all delete through :class:`SegmentDeleter`.

The tombstone DELETE_SEGMENT_STARTED is written first, in the same transaction as the fence
check, so a zombie leader is rejected with :class:`~metadata.errors.FencedLeaderEpochError`
before it touches an object. A writer that already knows it was fenced (or whose upload was
never registered) deletes the objects only (``tombstone=False``): it may not touch metadata,
and the new leader's deferred-delete loop ends such rows. Deleting objects is idempotent, so
a sequence that stopped half-way is simply run again.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Callable, Iterable
from contextlib import AbstractContextManager
from dataclasses import dataclass
from typing import Any, Protocol

from log.clock import Clock
from metadata.errors import FencedLeaderEpochError
from metadata.types import RemoteLogSegmentId, RemoteLogSegmentMetadata, RemoteLogSegmentState

logger = logging.getLogger(__name__)


class SegmentStateWriter(Protocol):
    """The one metadata write the sequence makes (:class:`~metadata.manager.RemoteLogMetadataManager`'s)."""

    def update_remote_log_segment_state(self, segment_id: RemoteLogSegmentId, state: RemoteLogSegmentState, *,
                                        leader_epoch: int, event_timestamp_ms: int,
                                        broker_id: int) -> RemoteLogSegmentMetadata: ...


class SegmentObjects(Protocol):
    """The object-store side (:meth:`~remote.storage_manager.RemoteStorageManager.delete_log_segment_data`)."""

    def delete_log_segment_data(self, md: RemoteLogSegmentMetadata) -> None: ...


@dataclass(frozen=True)
class SegmentDeleter:
    """Deletes remote segments of one writer (a broker, a round, a Spark driver).

    ``on_fenced`` sees a FencedLeaderEpochError of the tombstone write before it is raised (the
    RemoteLogManager counts it and forgets its cached epoch); ``on_objects_deleted`` runs once
    a segment's objects are gone (the RemoteLogManager drops it from its read cache).
    """

    metadata: SegmentStateWriter
    objects: SegmentObjects
    broker_id: int
    clock: Clock
    on_fenced: Callable[[FencedLeaderEpochError, RemoteLogSegmentMetadata], None] | None = None
    on_objects_deleted: Callable[[RemoteLogSegmentMetadata], None] | None = None

    def delete(self, md: RemoteLogSegmentMetadata, leader_epoch: int, *, tombstone: bool = True,
               hold: Callable[[], AbstractContextManager[Any]] | None = None) -> None:
        """DELETE_SEGMENT_STARTED (fenced) -> delete objects (idempotent) -> FINISHED;
        ``tombstone=False``: the objects only. ``hold()`` (the caller's partition lock) is
        entered around each metadata write only, not around the object-store calls.

        Raises:
            FencedLeaderEpochError: ``leader_epoch`` was superseded; nothing was deleted.
            RemoteStorageError: an object delete failed; the segment stays DELETE_SEGMENT_STARTED
                and the sequence may be run again.
        """
        sid = md.remote_log_segment_id
        held = hold or contextlib.nullcontext
        if tombstone:
            try:
                with held():
                    self.metadata.update_remote_log_segment_state(
                        sid, RemoteLogSegmentState.DELETE_SEGMENT_STARTED, leader_epoch=leader_epoch,
                        event_timestamp_ms=self.clock.milliseconds(), broker_id=self.broker_id)
            except FencedLeaderEpochError as e:
                if self.on_fenced is not None:
                    self.on_fenced(e, md)
                raise
        self.objects.delete_log_segment_data(md)
        if self.on_objects_deleted is not None:
            self.on_objects_deleted(md)
        if tombstone:
            with held():
                self.metadata.update_remote_log_segment_state(
                    sid, RemoteLogSegmentState.DELETE_SEGMENT_FINISHED, leader_epoch=leader_epoch,
                    event_timestamp_ms=self.clock.milliseconds(), broker_id=self.broker_id)

    def remove_uploads(self, uploads: Iterable[RemoteLogSegmentMetadata], leader_epoch: int, *,
                       tombstone: Callable[[RemoteLogSegmentMetadata], bool], what: str) -> None:
        """Best effort, for a failed round's or job's uploads: each is deleted (with its tombstone
        when ``tombstone(md)``); a failure is logged and left to the deferred-delete loop or the
        orphan sweep (:mod:`remote.orphans`)."""
        for md in uploads:
            try:
                self.delete(md, leader_epoch, tombstone=tombstone(md))
            except Exception:  # noqa: BLE001 - best effort: the deferred-delete loop finds what is left
                logger.warning("%s: could not remove %s %s; the deferred-delete loop or the orphan sweep will",
                               md.topic_partition, what, md.id, exc_info=True)
