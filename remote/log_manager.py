"""RemoteLogManager: tiering of rolled segments, retention on both tiers, deferred deletion,
and one read path over local and remote segments (Kafka's RemoteLogManager + seed 004).

Lifecycle of a segment of a ``remote.storage.enable`` partition:

1. **Copy** (:meth:`RemoteLogManager.copy_rolled_segments`). Every rolled segment whose end
   is below the last stable offset and that remote storage does not cover yet is copied,
   oldest first: the key bloom filter and the exact key index are built from the local
   copy in one pass -> COPY_SEGMENT_STARTED metadata (fresh segment id, the segment's leader
   epochs, the key index's size, fenced by our leader epoch) -> RemoteStorageManager upload
   of the log, its indexes (the key index included, written through to the read cache) and
   its leader-epoch checkpoint -> the key bloom filter into the metadata store
   -> COPY_SEGMENT_FINISHED. "Covered" is decided from metadata (the highest end offset of
   the referenced remote segments), never from memory, so a restart does not copy again.
   The files are hard-linked (copied across filesystems) into a staging directory under
   the log's lock first, so a concurrent clean or retention cannot pull them away mid-upload.
2. **Local retention** (:meth:`apply_local_retention`): only segments already copied, past
   ``local.retention.ms`` / beyond ``local.retention.bytes``, oldest first, never the active
   one. With ``cleanup.policy=compact`` (no delete) a segment must also lie entirely below
   the cleaner checkpoint (seed 004 "Deletion of local log segment file ... compact").
3. **Remote retention** (:meth:`apply_remote_retention`, policy containing ``delete``):
   remote segments past ``retention.ms`` / beyond ``retention.bytes`` (counting local-only
   bytes too) are deleted through DELETE_SEGMENT_STARTED -> objects -> FINISHED.
4. **Deferred deletion** (:meth:`delete_unreferenced`): segments superseded by compaction,
   abandoned uploads and unfinished deletions are deleted the same way. The tombstone step
   DELETE_SEGMENT_STARTED is a fenced write, so a zombie leader is rejected with
   FencedLeaderEpochError before it touches an object.

A failed copy abandons its segment id at once (DELETE_SEGMENT_STARTED, delete, FINISHED);
if even that fails, the COPY_SEGMENT_STARTED row is found again by the metadata store's
orphan rules (older than the grace period, or written under an older epoch) and deleted by
a later :meth:`run_once`. After a crash, :meth:`recover_orphans` deletes every unfinished
upload right away (call it at startup, before any cleaner runs: it treats every
COPY_SEGMENT_STARTED segment of the partition as abandoned), and the next copy uploads
the segment again under a new id. A local segment is only ever deleted once a
COPY_SEGMENT_FINISHED remote segment covers it.

Leadership: :meth:`become_leader` registers the epoch and its broker id in the metadata
store; when the broker id is this manager's, it also starts the epoch in the local log's
leader-epoch cache and acts as leader, otherwise it is a follower of the partition from
then on. A partition nobody registered yet is registered on first use at epoch
``max(local log epoch, 0)`` for this broker. Otherwise the manager resumes the registered
epoch the first time it touches the partition **only if that epoch is registered to this
broker id** (a restarted leader continues as the leader it was); an epoch registered to
another broker makes this manager a follower: every upload, cleaning publish and delete
raises :class:`~metadata.errors.NotLeaderForPartitionError` before touching anything (a
restarted old leader never adopts the epoch of the leader that replaced it). The epoch a
manager learnt stays cached: if another manager registers a higher epoch later, every
fenced write of the first one is rejected (it is a zombie); the rejection drops the cached
epoch, so the next use resolves the partition again (a follower, unless the new epoch was
registered to this broker id).

Segment state (KIP-405's LogSegmentData, remote/segment_state.py): every copy uploads the
producer snapshot after the segment and the leader-epoch checkpoint up to its end. Before
this broker acts as leader (first use, :meth:`become_leader`), a local log that ends at or
below the remote tier's end (a lost data dir, a new machine) is restarted after the newest
remote segment with that segment's producer state and epoch cache.

Store outages: a step that meets :class:`~remote.errors.StoreUnavailableError` (the store's
circuit breaker is open) ends :meth:`run_once`'s pass; the next pass tries again.

Thread-safety: thread-safe. Mutating operations on one partition (copy, retention,
deletion, leadership) are serialised by a per-partition lock; different partitions proceed
in parallel. That lock (``remote.partition``) is the outermost of the node's hierarchy
(log/locks.py): under it the manager calls the cleaner manager (local retention reads the
cleaner checkpoint), the log registry, the local log and the metadata store, so none of
those may call back into the manager while holding its own lock (the tiered cleaner's
selection asks for the leader epoch only after releasing the cleaner manager's lock).
Reads take no partition lock: they rely on the LocalLog's lock, the metadata
store's consistency and segment ids never being reused, and retry once if a segment
vanished under them (retention or compaction).
"""

from __future__ import annotations

import dataclasses
import functools
import logging
import os
import shutil
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from log.clock import Clock
from log.errors import TiercompactError
from log.index.bloom import KeyBloomFilter
from log.index.key_index import build_segment_indexes
from log.local_log import LocalLog, retention_breached
from log.locks import RANK_LEAF, RANK_RLM_PARTITION, ordered_lock, ordered_rlock
from log.log_manager import LogManager
from log.segment import LogSegment
from log.types import TopicPartition
from metadata.errors import FencedLeaderEpochError, NotLeaderForPartitionError
from metadata.manager import RemoteLogMetadataManager
from metadata.types import LeaderState, RemoteLogSegmentId, RemoteLogSegmentMetadata
from metadata.types import RemoteLogSegmentState as S
from remote.errors import StoreUnavailableError
from remote.orphans import sweep_orphan_objects
from remote.read_cache import MiB, RemoteReadCache
from remote.remote_reader import RemoteSegmentReader
from remote.segment_deletion import SegmentDeleter
from remote.segment_state import producer_snapshot_for, render_epoch_checkpoint, restore_from_remote
from remote.storage_manager import LogSegmentData, RemoteStorageManager
from remote.tiered_read import ReadResult, TieredReadPath

logger = logging.getLogger(__name__)

DEFAULT_CACHE_BYTES = 256 * MiB
#: set on a FencedLeaderEpochError once it was counted in fenced_operations (the service's
#: error handler counts the ones nobody counted yet)
COUNTED_BY_RLM = "_tiercompact_counted_by_rlm"


@dataclass(frozen=True, slots=True)
class TierResult:
    copied: list[int]
    deleted_local: list[int]


@dataclass(frozen=True, slots=True)
class SegmentView:
    """One row of GET /v1/topics/{t}/partitions/{p} "segments"."""

    base_offset: int
    end_offset: int
    size_bytes: int
    tier: str
    max_timestamp: int
    segment_id: str | None = None
    state: str | None = None

    def __post_init__(self) -> None:
        if self.tier not in ("local", "remote", "both"):
            raise ValueError(f"tier must be local, remote or both, got {self.tier!r}")


@dataclass(slots=True)
class PartitionRunResult:
    """What :meth:`RemoteLogManager.run_once` did for one partition."""

    copied: list[int] = field(default_factory=list)
    deleted_local: list[int] = field(default_factory=list)
    deleted_remote: list[str] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)


@dataclass(frozen=True, slots=True)
class RemoteLogManagerStats:
    bytes_uploaded: int
    bytes_downloaded: int
    segments_copied: int
    segments_deleted: int
    copy_failures: int
    fenced_operations: int


class RemoteLogManager:
    """See the module docstring for the lifecycle, leadership and thread-safety."""

    def __init__(
        self,
        log_manager: LogManager,
        metadata_manager: RemoteLogMetadataManager,
        storage_manager: RemoteStorageManager,
        *,
        broker_id: int,
        clock: Clock,
        cache_dir: Path,
        cache_bytes: int = DEFAULT_CACHE_BYTES,
        cache_chunk_bytes: int = MiB,
        orphan_object_grace_ms: int = 3_600_000,
        cleaner_checkpoint: Callable[[TopicPartition], int | None] = lambda tp: None,
    ) -> None:
        self.log_manager = log_manager
        self.metadata = metadata_manager
        self.rsm = storage_manager
        self.broker_id = broker_id
        self.clock = clock
        self.cache_dir = Path(cache_dir)
        self._staging = self.cache_dir / "staging"
        shutil.rmtree(self._staging, ignore_errors=True)  # leftovers of a crashed copy
        self.cache = RemoteReadCache(self.cache_dir / "read-cache", cache_bytes, chunk_bytes=cache_chunk_bytes)
        # key index objects share the remote cache budget (the tiered cleaner reads them through the RSM)
        storage_manager.attach_index_cache(self.cache)
        self.reader = RemoteSegmentReader(storage_manager, self.cache)
        self.read_path = TieredReadPath(log_manager, metadata_manager, self.reader)
        self._cleaner_checkpoint = cleaner_checkpoint
        #: objects no metadata row and no live lease names are deleted once older than this
        #: (must exceed a Spark job's upload-to-publish time; see remote.orphans)
        self.orphan_object_grace_ms = orphan_object_grace_ms
        self._guard = ordered_lock("remote.log_manager.state", RANK_LEAF)
        self._tp_locks: dict[TopicPartition, Any] = {}
        self._leaders: dict[TopicPartition, LeaderState] = {}
        self._abandoned: dict[TopicPartition, dict[str, RemoteLogSegmentMetadata]] = {}
        self._counters = {"bytes_uploaded": 0, "segments_copied": 0, "segments_deleted": 0, "copy_failures": 0,
                          "fenced_operations": 0}
        self._closed = False
        self._deleter = SegmentDeleter(
            metadata_manager, storage_manager, broker_id, clock,
            on_fenced=lambda e, md: self._count_fenced(e, md.topic_partition),
            on_objects_deleted=lambda md: self.cache.invalidate_segment(md.id))

    # ---- plumbing ----------------------------------------------------------------------------
    def _lock(self, tp: TopicPartition) -> Any:
        with self._guard:
            lock = self._tp_locks.get(tp)
            if lock is None:
                lock = self._tp_locks[tp] = ordered_rlock("remote.partition", RANK_RLM_PARTITION, label=str(tp))
            return lock

    def _bump(self, name: str, n: int = 1) -> None:
        with self._guard:
            self._counters[name] += n

    def stats(self) -> RemoteLogManagerStats:
        with self._guard:
            c = dict(self._counters)
        return RemoteLogManagerStats(c["bytes_uploaded"], self.reader.bytes_downloaded, c["segments_copied"],
                                     c["segments_deleted"], c["copy_failures"], c["fenced_operations"])

    def _log(self, tp: TopicPartition) -> LocalLog:
        return self.log_manager.get_log(tp)

    # ---- leadership --------------------------------------------------------------------------
    def _count_fenced(self, e: FencedLeaderEpochError, tp: TopicPartition | None = None) -> None:
        """Count a rejected operation once (the node's error handler sees the same exception)
        and forget the cached epoch, so the next use resolves the partition's leader again."""
        if not getattr(e, COUNTED_BY_RLM, False):
            setattr(e, COUNTED_BY_RLM, True)
            self._bump("fenced_operations")
        if tp is not None:
            self._leaders.pop(tp, None)

    def become_leader(self, tp: TopicPartition, leader_epoch: int, broker_id: int) -> LeaderState:
        """Register ``broker_id`` as leader at ``leader_epoch`` (strictly increasing, else
        FencedLeaderEpochError). For this broker: start the epoch at the log end in the
        local log and act as leader. For another broker: this manager is a follower of
        ``tp`` from now on (its uploads, publishes and deletes are refused)."""
        with self._lock(tp):
            log = self._log(tp)
            if broker_id == self.broker_id:
                self._restore_if_behind(tp, log)
            start = log.log_end_offset
            state = self.metadata.become_leader(tp, leader_epoch, broker_id, start_offset=start)
            if broker_id != self.broker_id:
                self._leaders.pop(tp, None)
                logger.info("%s: leadership moved to broker %d at epoch %d; broker %d is a follower now",
                            tp, broker_id, leader_epoch, self.broker_id)
                return state
            if log.leader_epoch < leader_epoch:
                log.assign_epoch(leader_epoch, start)
            self._leaders[tp] = state
            return state

    def leader_state(self, tp: TopicPartition, action: str = "upload, cleaning publish or delete") -> LeaderState:
        """The leader state this manager acts under (registered on first use; see the module
        docstring).

        Raises:
            NotLeaderForPartitionError: the registered epoch belongs to another broker. Not
                counted here: the caller decides whether it was a rejected operation (the
                API's error handler counts it) or just a follower skipping work.
        """
        state, leader = self._resolve_leader(tp)
        if not leader:
            raise NotLeaderForPartitionError(tp, self.broker_id, state.leader_epoch, state.broker_id, action)
        return state

    def forget_leader(self, tp: TopicPartition) -> None:
        """Drop the cached epoch of ``tp`` (a write under it was fenced elsewhere, e.g. by the
        tiered cleaner): the next use resolves the leader from the metadata store again."""
        with self._lock(tp):
            self._leaders.pop(tp, None)

    def is_leader_cached(self, tp: TopicPartition) -> bool:
        """Whether this manager already acts as the leader of ``tp``, without any lock or
        metadata read (for the produce path; False means "resolve with is_leader")."""
        return tp in self._leaders

    def is_leader(self, tp: TopicPartition) -> bool:
        """Whether this manager acts as the leader of ``tp`` (from its cache, else the
        metadata store; a first use registers this broker). Counts nothing."""
        return self._resolve_leader(tp)[1]

    def check_current_leader(self, tp: TopicPartition, action: str) -> LeaderState | None:
        """The current registered leader state of ``tp`` read from the metadata store now
        (not the cache), provided it is this broker's; None if nobody ever registered ``tp``.

        For operations that must not trust a cached epoch (topic deletion, an operator's
        clean): a zombie whose cached epoch was superseded is refused here, and an epoch
        registered to this broker id by another node is adopted (which opens the local
        log: an offline partition raises PartitionOfflineError, see Node.delete_topic).

        Raises:
            NotLeaderForPartitionError: another broker holds the registered epoch.
        """
        with self._lock(tp):
            current = self.metadata.leader_state(tp)
            if current is None:
                return None
            if current.broker_id != self.broker_id:
                self._leaders.pop(tp, None)
                raise NotLeaderForPartitionError(tp, self.broker_id, current.leader_epoch, current.broker_id,
                                                 action)
            if self._leaders.get(tp) != current:
                self._leaders.pop(tp, None)
            return self.leader_state(tp, action)

    def _resolve_leader(self, tp: TopicPartition) -> tuple[LeaderState, bool]:
        """(the partition's leader state as known here, whether this broker is the leader)."""
        with self._lock(tp):
            cached = self._leaders.get(tp)
            if cached is not None:
                return cached, True
            log = self._log(tp)
            state = self.metadata.leader_state(tp)
            if state is None:
                epoch = max(log.leader_epoch, 0)
                start = next((e.start_offset for e in log.epoch_entries if e.epoch == epoch), log.log_start_offset)
                try:
                    state = self.metadata.become_leader(tp, epoch, self.broker_id, start_offset=start)
                except FencedLeaderEpochError:
                    state = self.metadata.leader_state(tp)  # another broker registered first
                    assert state is not None
            if state.broker_id != self.broker_id:
                return state, False  # a follower: never adopt another broker's epoch
            self._restore_if_behind(tp, log)
            if log.leader_epoch < state.leader_epoch:
                lineage = dict(self.metadata.leader_epochs(tp))
                log.assign_epoch(state.leader_epoch, lineage.get(state.leader_epoch, log.log_end_offset))
            self._leaders[tp] = state
            return state, True

    def leader_epoch(self, tp: TopicPartition, action: str = "upload, cleaning publish or delete") -> int:
        return self.leader_state(tp, action).leader_epoch

    def _restore_if_behind(self, tp: TopicPartition, log: LocalLog) -> None:
        """A local log at or below the remote tier's end (lost data dir, new node) restarts after
        the newest remote segment with its producer snapshot and epoch checkpoint
        (remote.segment_state), before this node acts as leader."""
        if log.config.remote_storage_enable:
            restore_from_remote(log, self.rsm, self.metadata.list_remote_log_segments(tp))

    # ---- copy ----------------------------------------------------------------------------------
    def _highest_remote_offset(self, tp: TopicPartition) -> int:
        segs = self.metadata.list_remote_log_segments(tp)
        return max((m.end_offset for m in segs), default=-1)

    def copy_rolled_segments(self, tp: TopicPartition) -> list[RemoteLogSegmentMetadata]:
        """Copy every rolled, stable, not yet covered segment, oldest first; returns the new
        (COPY_SEGMENT_FINISHED) metadata. A failure abandons that upload and raises."""
        with self._lock(tp):
            log = self._log(tp)
            if not log.config.remote_storage_enable:
                return []
            epoch = self.leader_epoch(tp)
            highest = self._highest_remote_offset(tp)
            copied: list[RemoteLogSegmentMetadata] = []
            for seg in log.all_segments()[:-1]:
                if seg.size == 0:
                    continue
                nxt = seg.read_next_offset()
                if nxt - 1 <= highest:
                    continue
                if nxt > log.last_stable_offset:
                    break  # later segments are above the LSO too
                md = self._copy_segment(tp, log, seg, epoch)
                if md is None:  # replaced by the cleaner meanwhile: the next run copies its successor
                    break
                copied.append(md)
                highest = md.end_offset
            return copied

    def _stage(self, log: LocalLog, seg: LogSegment, into: Path) -> tuple[LogSegmentData, int, int] | None:
        """Link the segment's files into ``into`` under the log's lock; (data, size, next offset)."""
        with log.lock:
            if seg not in log.segments:
                return None
            seg.flush()
            into.mkdir(parents=True)
            staged: dict[str, Path | None] = {}
            for name, src in (("log", seg.log_path), ("index", seg.offset_index.path),
                              ("timeindex", seg.time_index.path), ("txnindex", seg.txn_index.path)):
                dst = into / src.name
                if not src.exists():
                    if name == "txnindex":
                        staged[name] = None
                        continue
                    dst.write_bytes(b"")  # an index never written (no entries) is an empty index
                else:
                    try:
                        os.link(src, dst)
                    except OSError:
                        shutil.copyfile(src, dst)
                staged[name] = dst
            nxt = seg.read_next_offset()
            entries = [e for e in log.epoch_entries if e.start_offset < nxt]
            snapshot = producer_snapshot_for(log, nxt)
            if snapshot is None:
                logger.warning("%s: no producer state for offset %d; segment %d is copied without a snapshot",
                               log.topic_partition, nxt, seg.base_offset)
            log_path = staged["log"]
            assert log_path is not None and staged["index"] is not None and staged["timeindex"] is not None
            data = LogSegmentData(log_path, staged["index"], staged["timeindex"], staged["txnindex"],
                                  render_epoch_checkpoint(entries), snapshot)
            return data, log_path.stat().st_size, nxt

    def _copy_segment(self, tp: TopicPartition, log: LocalLog, seg: LogSegment,
                      epoch: int) -> RemoteLogSegmentMetadata | None:
        staging = self._staging / uuid.uuid4().hex
        try:
            staged = self._stage(log, seg, staging)
            if staged is None:
                return None
            data, size, nxt = staged
            bloom, key_index = self._build_indexes(tp, data.log_segment,
                                                   float(log.config.get("remote.compaction.bloom.fpp")))
            if key_index is not None:
                data = dataclasses.replace(data, key_index=key_index)
            md = RemoteLogSegmentMetadata(
                remote_log_segment_id=RemoteLogSegmentId.generate(tp), start_offset=seg.base_offset,
                end_offset=nxt - 1, max_timestamp_ms=seg.largest_timestamp, broker_id=self.broker_id, event_timestamp_ms=self.clock.milliseconds(),
                segment_size_in_bytes=size, segment_leader_epochs=log.epochs_for_range(seg.base_offset, nxt),
                key_index_bytes=None if key_index is None else len(key_index))
            try:
                self.metadata.add_remote_log_segment_metadata(md, leader_epoch=epoch)
            except FencedLeaderEpochError as e:
                self._count_fenced(e, tp)
                raise
            try:
                self.rsm.copy_log_segment_data(md, data)
                if bloom is not None:
                    self._put_bloom(md, bloom)
                done = self.metadata.update_remote_log_segment_state(
                    md.remote_log_segment_id, S.COPY_SEGMENT_FINISHED, leader_epoch=epoch,
                    event_timestamp_ms=self.clock.milliseconds(), broker_id=self.broker_id)
            except Exception as e:
                self._bump("copy_failures")
                if isinstance(e, FencedLeaderEpochError):
                    self._count_fenced(e, tp)
                logger.warning("%s: copy of segment %d as %s failed (%s); abandoning the upload",
                               tp, seg.base_offset, md.id, e)
                self._abandon(md, epoch)
                raise
            uploaded = sum(p.stat().st_size for p in (data.log_segment, data.offset_index, data.time_index,
                                                      data.transaction_index) if p is not None)
            uploaded += len(data.key_index or b"")
            self._bump("bytes_uploaded", uploaded + len(data.leader_epoch_index))
            self._bump("segments_copied")
            logger.info("%s: copied segment [%d, %d] (%d bytes) as %s", tp, md.start_offset, md.end_offset,
                        size, md.id)
            return done
        finally:
            shutil.rmtree(staging, ignore_errors=True)

    @staticmethod
    def _build_indexes(tp: TopicPartition, log_path: Path, fpp: float) -> tuple[KeyBloomFilter | None, bytes | None]:
        """The bloom filter and the serialized key index of a staged segment, from one scan. A
        missing one only costs the cleaner a download (it builds them lazily), so a failure
        here is logged, not fatal to the copy."""
        try:
            bloom, key_index = build_segment_indexes(log_path, fpp)
        except TiercompactError as e:
            logger.warning("%s: could not build the key indexes of %s: %s", tp, log_path, e)
            return None, None
        return bloom, key_index.to_bytes()

    def _put_bloom(self, md: RemoteLogSegmentMetadata, bloom: KeyBloomFilter) -> None:
        """Like a missing key index, a missing filter only costs the cleaner a download."""
        try:
            self.metadata.put_bloom_filter(md.remote_log_segment_id, bloom.to_bytes())
        except TiercompactError as e:
            logger.warning("%s: could not store the bloom filter of %s: %s", md.topic_partition, md.id, e)

    def _abandon(self, md: RemoteLogSegmentMetadata, epoch: int) -> None:
        try:
            self._delete_remote(md, epoch)
        except Exception as e:  # noqa: BLE001 - retried by run_once / the orphan rules
            logger.warning("%s: could not abandon upload %s yet (%s); will retry", md.topic_partition, md.id, e)
            with self._guard:
                self._abandoned.setdefault(md.topic_partition, {})[md.id] = md

    # ---- deletion ------------------------------------------------------------------------------
    def _delete_remote(self, md: RemoteLogSegmentMetadata, epoch: int) -> None:
        """DELETE_SEGMENT_STARTED (fenced) -> delete objects (idempotent) -> FINISHED."""
        self._deleter.delete(md, epoch)
        with self._guard:
            self._abandoned.get(md.topic_partition, {}).pop(md.id, None)
        self._bump("segments_deleted")

    def delete_unreferenced(self, tp: TopicPartition, *, orphan_grace_ms: int | None = None,
                            _all_unfinished: bool = False) -> list[str]:
        """The deferred-delete step: delete superseded segments, abandoned uploads and
        unfinished deletions; returns the deleted segment ids.

        Validation: the DELETE_SEGMENT_STARTED tombstone is written with our leader epoch in
        the same transaction as the fence check, so a zombie leader gets
        FencedLeaderEpochError before any object is touched; a segment readers still see is
        never deleted. A storage failure on one segment does not stop the others; the first
        one is raised at the end (the segment stays DELETE_SEGMENT_STARTED and is retried).
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
        erasure's replaced objects, #15); returns segment id -> time its objects were deleted.

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
                self._delete_remote(md, epoch)
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

    # ---- retention -----------------------------------------------------------------------------
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
            for seg in log.retention_breached_segments(now, cfg.local_retention_ms, cfg.local_retention_bytes):
                nxt = seg.read_next_offset()
                if nxt - 1 > highest:
                    break  # not copied yet: it and everything after it stay (deletion is from the start)
                if checkpoint is not None and nxt > checkpoint:
                    break  # not cleaned yet (cleanup.policy=compact)
                deletable.append(seg)
            return log.delete_segments(deletable) if deletable else []

    def apply_remote_retention(self, tp: TopicPartition, now: int | None = None) -> list[str]:
        """For cleanup.policy containing delete: delete remote segments past retention.ms /
        beyond retention.bytes (plus the local copies they cover); returns deleted ids."""
        with self._lock(tp):
            log = self._log(tp)
            cfg = log.config
            if not cfg.remote_storage_enable or not cfg.delete:
                return []
            now = self.clock.milliseconds() if now is None else now
            epoch = self.leader_epoch(tp)
            segs = self.metadata.list_remote_log_segments(tp)
            retention_ms, retention_bytes = int(cfg.get("retention.ms")), int(cfg.get("retention.bytes"))
            highest = max((m.end_offset for m in segs), default=-1)
            local_only = sum(s.size for s in log.all_segments() if s.read_next_offset() - 1 > highest)
            breached = retention_breached(
                segs, now, retention_ms, retention_bytes,
                total_bytes=sum(m.segment_size_in_bytes for m in segs) + local_only,
                size=lambda m: m.segment_size_in_bytes, max_timestamp=lambda m: m.max_timestamp_ms)
            deleted: list[str] = []
            for md in breached:
                self._delete_remote(md, epoch)
                deleted.append(md.id)
            if breached:
                end = max(m.end_offset for m in breached)
                with log.lock:
                    local = [s for s in log.all_segments()[:-1] if s.read_next_offset() - 1 <= end]
                    log.delete_segments(local)
            return deleted

    # ---- the background loop -----------------------------------------------------------------
    def tier(self, tp: TopicPartition) -> TierResult:
        """Copy rolled segments now, then apply local retention (POST .../tier)."""
        copied = self.copy_rolled_segments(tp)
        return TierResult([m.start_offset for m in copied], self.apply_local_retention(tp))

    def _run_copy(self, tp: TopicPartition, res: PartitionRunResult) -> None:
        res.copied.extend(m.start_offset for m in self.copy_rolled_segments(tp))

    def _run_local_retention(self, tp: TopicPartition, res: PartitionRunResult) -> None:
        res.deleted_local.extend(self.apply_local_retention(tp))

    def _run_remote_retention(self, tp: TopicPartition, res: PartitionRunResult) -> None:
        res.deleted_remote.extend(self.apply_remote_retention(tp))

    def _run_deferred_delete(self, tp: TopicPartition, res: PartitionRunResult) -> None:
        res.deleted_remote.extend(self.delete_unreferenced(tp))

    def _run_orphan_sweep(self, tp: TopicPartition, res: PartitionRunResult) -> None:
        """Objects no metadata row names: a crashed Spark driver's uploads (remote.orphans)."""
        res.deleted_remote.extend(sweep_orphan_objects(self.rsm.store, self.metadata, tp,
                                                       grace_ms=self.orphan_object_grace_ms, clock=self.clock))

    def run_once(self, stop: Callable[[], bool] = lambda: False) -> dict[TopicPartition, PartitionRunResult]:
        """One pass over every remote-storage partition: copy, local retention, remote
        retention, deferred deletion. A failing step is logged and recorded; it stops
        neither the other steps nor the other partitions. Partitions another broker leads
        are skipped: a follower uploads and deletes nothing. The pass ends early, between
        steps, once ``stop()`` is true (shutdown); every step is safe to abandon there."""
        out: dict[TopicPartition, PartitionRunResult] = {}
        for tp, log in sorted(self.log_manager.all_logs().items()):
            if stop():
                break
            if not log.config.remote_storage_enable:
                continue
            try:
                leader = self.is_leader(tp)
            except Exception as e:  # noqa: BLE001 - e.g. the metadata store is down: try again next pass
                logger.warning("%s: cannot resolve the partition's leader: %s", tp, e)
                out[tp] = PartitionRunResult(errors=[f"leadership: {e}"])
                continue
            if not leader:
                logger.debug("%s: broker %d is a follower; no tiering or remote retention", tp, self.broker_id)
                continue
            res = out[tp] = PartitionRunResult()
            steps: list[tuple[str, Callable[[], None]]] = [
                ("copy", functools.partial(self._run_copy, tp, res)),
                ("local retention", functools.partial(self._run_local_retention, tp, res)),
                ("remote retention", functools.partial(self._run_remote_retention, tp, res)),
                ("deferred delete", functools.partial(self._run_deferred_delete, tp, res)),
                ("orphan sweep", functools.partial(self._run_orphan_sweep, tp, res)),
            ]
            for name, step in steps:
                if stop():
                    break
                try:
                    step()
                except StoreUnavailableError as e:
                    # the store is known to be down (remote.breaker): every further step of this
                    # pass would fail fast too; back off until the next pass
                    logger.warning("%s: %s skipped and the pass ended: %s", tp, name, e)
                    res.errors.append(f"{name}: {e}")
                    return out
                except Exception as e:  # noqa: BLE001 - one partition's failure must not stop the loop
                    logger.warning("%s: %s failed: %s", tp, name, e)
                    res.errors.append(f"{name}: {e}")
        return out

    # ---- sizes and views -----------------------------------------------------------------------
    def remote_segments(self, tp: TopicPartition) -> list[RemoteLogSegmentMetadata]:
        """The referenced remote segments, by start offset (metadata only)."""
        return self.metadata.list_remote_log_segments(tp)

    def remote_log_size(self, tp: TopicPartition) -> int:
        """Bytes of the referenced remote segments (the metadata store's cached sum)."""
        return self.metadata.remote_log_size(tp)

    def log_start_offset(self, tp: TopicPartition) -> int:
        """min(start of the earliest referenced remote segment, local log start)."""
        return self.read_path.log_start_offset(tp)

    def segments_view(self, tp: TopicPartition) -> list[SegmentView]:
        log = self._log(tp)
        remote = self.metadata.list_remote_log_segments(tp)
        out: list[SegmentView] = []
        used: set[str] = set()
        for seg in log.all_segments():
            end = seg.read_next_offset() - 1
            cover = next((m for m in remote if seg.size and m.start_offset <= seg.base_offset
                          and m.end_offset >= end), None)
            if cover is not None:
                used.add(cover.id)
            out.append(SegmentView(seg.base_offset, end, seg.size, "both" if cover else "local",
                                   seg.largest_timestamp, cover.id if cover else None,
                                   cover.state.name if cover else None))
        for m in remote:
            if m.id not in used:
                out.append(SegmentView(m.start_offset, m.end_offset, m.segment_size_in_bytes, "remote",
                                       m.max_timestamp_ms, m.id, m.state.name))
        out.sort(key=lambda v: (v.base_offset, v.tier != "remote"))
        return out

    # ---- reading -------------------------------------------------------------------------------
    def read(self, tp: TopicPartition, offset: int, *, max_bytes: int = MiB, isolation: str = "read_uncommitted",
             max_records: int = 500) -> ReadResult:
        """Records from ``offset`` on, from whichever tier holds them (see remote/tiered_read.py).

        Raises:
            OffsetOutOfRangeError: below the log start (of both tiers) or above the log end;
                the message gives the valid range.
            RemoteStorageError / CorruptRecordError: a remote fetch failed after retries.
        """
        return self.read_path.read(tp, offset, max_bytes=max_bytes, isolation=isolation, max_records=max_records)

    def position_for(self, md: RemoteLogSegmentMetadata, offset: int) -> int:
        """Byte position in a remote segment to start reading ``offset`` at (for the tiered
        cleaner's ranged fetches), from the cached remote offset index."""
        return self.reader.position_for(md, offset)

    def close(self) -> None:
        """Close the read cache: its entries stay on disk for the next start (all immutable,
        re-adopted and checked then). Idempotent; the log, metadata and storage managers are
        the caller's to close."""
        if self._closed:
            return
        self._closed = True
        self.cache.close()
