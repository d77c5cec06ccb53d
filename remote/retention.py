"""Retention and deletion: a RemoteLogManager's local and remote retention, deferred deletion of
unreferenced segments, erasure deletes and topic deletion (see :mod:`remote.log_manager`)."""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence

from log.errors import TiercompactError
from log.local_log import retention_breached
from log.segment import LogSegment
from log.types import TopicPartition
from metadata.errors import FencedLeaderEpochError
from metadata.types import RemoteLogSegmentState as S
from remote.leadership import Leadership
from remote.tiered_read import log_start_over_tiers

logger = logging.getLogger(__name__)


class Retention(Leadership):
    """Deletes remote and local segments of a partition, each through the fenced delete sequence."""

    _cleaner_checkpoint: Callable[[TopicPartition], int | None]

    def delete_unreferenced(self, tp: TopicPartition, *, orphan_grace_ms: int | None = None,
                            _all_unfinished: bool = False) -> list[str]:
        """The deferred-delete step: delete superseded segments, abandoned uploads and
        unfinished deletions; returns the deleted segment ids.

        Validation: the DELETE_SEGMENT_STARTED tombstone is written with our leader epoch in
        the same transaction as the fence check, so a zombie leader gets
        FencedLeaderEpochError before any object is touched; a segment readers still see is
        never deleted. A storage failure on one segment does not stop the others; the first
        one is raised at the end (the segment stays DELETE_SEGMENT_STARTED and is retried).
        The partition lock is held while planning and around each metadata write, never
        across the object-store calls.
        """
        with self._lock(tp):
            epoch = self.leader_epoch(tp)
            todo = {m.id: m for m in self.metadata.unreferenced_segments(tp, orphan_grace_ms=orphan_grace_ms)}
            if _all_unfinished:
                todo.update((m.id, m) for m in self.metadata.list_remote_log_segments(
                    tp, include_superseded=True, states=[S.COPY_SEGMENT_STARTED, S.DELETE_SEGMENT_STARTED]))
            with self._guard:
                abandoned = dict(self._abandoned.get(tp, {}))
            if abandoned:
                pending = {m.id: m for m in self.metadata.list_remote_log_segments(
                    tp, include_superseded=True, states=[S.COPY_SEGMENT_STARTED, S.DELETE_SEGMENT_STARTED])}
                for sid in abandoned:
                    if sid in pending:
                        todo.setdefault(sid, pending[sid])
                    else:  # finished meanwhile (or never written): nothing left to do
                        with self._guard:
                            self._abandoned.get(tp, {}).pop(sid, None)
            lineage_ok = {sid: self.metadata.is_segment_within_leader_epochs(md, tp) for sid, md in todo.items()}
        deleted: list[str] = []
        first_error: Exception | None = None
        for sid, md in sorted(todo.items(), key=lambda kv: (kv[1].start_offset, kv[0])):
            if md.is_referenced:
                continue
            try:
                self._delete_remote(md, epoch)
            except FencedLeaderEpochError:
                raise
            except TiercompactError as e:
                logger.warning("%s: deferred delete of %s failed: %s", tp, sid, e)
                first_error = first_error or e
                continue
            logger.info("%s: deleted unreferenced segment %s [%d, %d] (%s%s)", tp, sid, md.start_offset,
                        md.end_offset, md.state.name if md.superseded_by is None else "superseded",
                        "" if lineage_ok[sid] else ", outside the current epoch lineage")
            deleted.append(sid)
        if first_error is not None:
            raise first_error
        return deleted

    def delete_replaced_now(self, tp: TopicPartition, segment_ids: Sequence[str]) -> dict[str, int]:
        """Delete these unreferenced segments now, ahead of the deferred-delete loop (an
        erasure's replaced objects); returns segment id -> time its objects were deleted.

        The same validation as :meth:`delete_unreferenced`: the fenced DELETE_SEGMENT_STARTED
        tombstone under this node's epoch first, never a segment readers still see. Segments
        not named keep their schedule. An id already deleted (DELETE_SEGMENT_FINISHED) or
        unknown is skipped.
        """
        wanted = set(segment_ids)
        if not wanted:
            return {}
        with self._lock(tp):
            epoch = self.leader_epoch(tp)
            todo = [m for m in self.metadata.list_remote_log_segments(
                tp, include_superseded=True,
                states=[S.COPY_SEGMENT_FINISHED, S.DELETE_SEGMENT_STARTED])  # never an upload in flight
                if m.id in wanted and not m.is_referenced]
        out: dict[str, int] = {}
        for md in sorted(todo, key=lambda m: (m.start_offset, m.id)):
            self._delete_remote(md, epoch)  # the partition lock around the metadata writes only
            out[md.id] = self.clock.milliseconds()
            logger.info("%s: deleted replaced segment %s [%d, %d] now (erasure)", tp, md.id, md.start_offset,
                        md.end_offset)
        return out

    def recover_orphans(self, tp: TopicPartition) -> list[str]:
        """At startup: delete every unfinished upload of ``tp`` now (no grace period)."""
        return self.delete_unreferenced(tp, _all_unfinished=True)

    def delete_partition_data(self, tp: TopicPartition) -> list[str]:
        """Delete every remote object and all metadata of ``tp`` (topic deletion), fenced.

        The leader check reads the metadata store now (:meth:`check_current_leader`), then
        the fenced DELETE_SEGMENT_STARTED tombstone of every segment is written in one
        transaction, the objects are deleted, and the metadata is dropped in a second fenced
        transaction. A non-leader or a zombie is refused before anything changes. Returns
        the ids of the deleted segments; idempotent (a retry after a crash finishes the job).

        Raises:
            NotLeaderForPartitionError, FencedLeaderEpochError: this broker does not hold
                the current epoch; nothing was deleted.
        """
        action = "deletion of the partition's remote data"
        with self._lock(tp):
            state = self.check_current_leader(tp, action)
            if state is None:
                return []  # nobody ever registered the partition: it has no remote data
            epoch = state.leader_epoch
            try:
                mds = self.metadata.begin_partition_deletion(tp, leader_epoch=epoch, broker_id=self.broker_id,
                                                             event_timestamp_ms=self.clock.milliseconds())
            except FencedLeaderEpochError as e:
                self._count_fenced(e, tp)
                raise
            for md in mds:
                self.rsm.delete_log_segment_data(md)
                self.cache.invalidate_segment(md.id)
            try:
                self.metadata.delete_partition(tp, leader_epoch=epoch)
            except FencedLeaderEpochError as e:
                self._count_fenced(e, tp)
                raise
            self._leaders.pop(tp, None)
            with self._guard:
                self._abandoned.pop(tp, None)
            return [md.id for md in mds]

    def apply_local_retention(self, tp: TopicPartition, now: int | None = None) -> list[int]:
        """Delete copied local segments past local retention; returns their base offsets."""
        with self._lock(tp):
            log = self._log(tp)
            cfg = log.config
            if not cfg.remote_storage_enable:
                return []
            now = self.clock.milliseconds() if now is None else now
            highest = self._highest_remote_offset(tp)
            checkpoint: int | None = None
            gate_on_checkpoint = cfg.compact and not cfg.delete
            if gate_on_checkpoint:
                checkpoint = self._cleaner_checkpoint(tp)
                if checkpoint is None:
                    return []
            deletable: list[LogSegment] = []
            # copied segments below the log start offset DeleteRecords set go whatever local retention says;
            # both lists are oldest-first runs of the log's segments, so the longer one holds the other
            start_breached = log.start_breached_segments()
            breached = log.retention_breached_segments(now, cfg.local_retention_ms, cfg.local_retention_bytes)
            if len(start_breached) > len(breached):
                breached = start_breached
            below = {s.base_offset for s in start_breached}
            for seg in breached:
                nxt = seg.read_next_offset()
                if nxt - 1 > highest:
                    break  # not copied yet: it and everything after it stay (deletion is from the start)
                if checkpoint is not None and nxt > checkpoint and seg.base_offset not in below:
                    break  # not cleaned yet (cleanup.policy=compact)
                deletable.append(seg)
            return log.delete_segments(deletable) if deletable else []

    def apply_remote_retention(self, tp: TopicPartition, now: int | None = None) -> list[str]:
        """Delete remote segments wholly below the log start offset DeleteRecords set and, for
        cleanup.policy containing delete, those past retention.ms / beyond retention.bytes
        (plus the local copies they cover); returns deleted ids."""
        with self._lock(tp):
            log = self._log(tp)
            cfg = log.config
            floor = log.deleted_records_offset
            if not cfg.remote_storage_enable or not (cfg.delete or floor):
                return []
            now = self.clock.milliseconds() if now is None else now
            epoch = self.leader_epoch(tp)
            segs = self.metadata.list_remote_log_segments(tp)
            # Kafka's isSegmentBreachByLogStartOffset: a remote segment goes once it ends below the start
            breached = [m for m in segs if m.end_offset < floor]
            if cfg.delete:
                retention_ms, retention_bytes = int(cfg.get("retention.ms")), int(cfg.get("retention.bytes"))
                highest = max((m.end_offset for m in segs), default=-1)
                local_only = sum(s.size for s in log.all_segments() if s.read_next_offset() - 1 > highest)
                by_retention = retention_breached(
                    segs, now, retention_ms, retention_bytes,
                    total_bytes=sum(m.segment_size_in_bytes for m in segs) + local_only,
                    size=lambda m: m.segment_size_in_bytes, max_timestamp=lambda m: m.max_timestamp_ms)
                ids = {m.id for m in breached}
                breached += [m for m in by_retention if m.id not in ids]
        deleted: list[str] = []
        for md in breached:
            self._delete_remote(md, epoch)  # the partition lock around the metadata writes only
            deleted.append(md.id)
        if breached:
            end = max(m.end_offset for m in breached)
            with self._lock(tp):
                with log.lock:
                    local = [s for s in log.all_segments()[:-1] if s.read_next_offset() - 1 <= end]
                    log.delete_segments(local)
                # the log starts at its earliest remaining data now: as Kafka's updateLogStartOffsetFromRemoteTier,
                # the leader epochs wholly below that start go (truncateFromStart), so OffsetForLeaderEpoch answers
                # for a deleted epoch the log start rather than an offset nobody can read any more (the start only
                # moves up, so one read between the two log locks is never too high)
                start = log_start_over_tiers(log, self.metadata.remote_log_segment_metadata(tp, 0))
                with log.lock:
                    log.epochs.truncate_from_start(start)
        return deleted
