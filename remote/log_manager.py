"""RemoteLogManager: tiering of rolled segments, retention on both tiers, deferred deletion,
and one read path over local and remote segments (Kafka's RemoteLogManager, KIP-405).

:class:`RemoteLogManager` composes three parts: :mod:`remote.leadership` (the epoch it acts
under, and the per-partition state the parts share), :mod:`remote.tiering` (the copy path) and
:mod:`remote.retention` (retention on both tiers and every delete, through
:mod:`remote.segment_deletion`); this module adds the background loop, the views and reads.

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
   the cleaner checkpoint.
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
in parallel. The lock is never held across object-store calls of a background pass (an
upload, the deletes of a batch): it is held to plan and around each metadata write, so a
request on a slow store waits for metadata steps only, and at most ``request_timeout_ms``
(inside the service's request scope, log.locks.BoundedLock: PartitionBusyError after it).
That lock (``remote.partition``) is the outermost of the node's hierarchy (log/locks.py):
under it the manager calls the cleaner manager (local retention reads the cleaner
checkpoint), the log registry, the local log and the metadata store, so none of
those may call back into the manager while holding its own lock (the tiered cleaner's
selection asks for the leader epoch only after releasing the cleaner manager's lock).
Reads take no partition lock: they rely on the LocalLog's lock, the metadata
store's consistency and segment ids never being reused, and retry once if a segment
vanished under them (retention or compaction).
"""

from __future__ import annotations

import functools
import logging
import shutil
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from log.clock import Clock
from log.locks import RANK_LEAF, ordered_lock
from log.log_manager import LogManager
from log.types import TopicPartition
from metadata.errors import FencedLeaderEpochError
from metadata.segment_indexes import IndexedSegmentStore
from metadata.types import LeaderState, RemoteLogSegmentMetadata
from remote.errors import StoreUnavailableError
from remote.leadership import COUNTED_BY_RLM
from remote.orphans import sweep_orphan_objects
from remote.read_cache import MiB, RemoteReadCache
from remote.remote_reader import RemoteSegmentReader
from remote.retention import Retention
from remote.segment_deletion import SegmentDeleter
from remote.storage_manager import RemoteStorageManager
from remote.tiered_read import ReadResult, TieredReadPath
from remote.tiering import Tiering

logger = logging.getLogger(__name__)

__all__ = ["COUNTED_BY_RLM", "PartitionRunResult", "RemoteLogManager", "RemoteLogManagerStats", "SegmentView",
           "TierResult"]

DEFAULT_CACHE_BYTES = 256 * MiB


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


class RemoteLogManager(Tiering, Retention):
    """See the module docstring for the lifecycle, leadership and thread-safety."""

    def __init__(
        self,
        log_manager: LogManager,
        metadata_manager: IndexedSegmentStore,
        storage_manager: RemoteStorageManager,
        *,
        broker_id: int,
        clock: Clock,
        cache_dir: Path,
        cache_bytes: int = DEFAULT_CACHE_BYTES,
        cache_chunk_bytes: int = MiB,
        orphan_object_grace_ms: int = 3_600_000,
        cleaner_checkpoint: Callable[[TopicPartition], int | None] = lambda tp: None,
        request_timeout_ms: int = 30_000,
        topic_deleted: Callable[[str], bool] = lambda topic: False,
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
        self._copying: set[TopicPartition] = set()  # partitions with an upload in flight
        #: whether the metadata store records the topic's deletion (a stale copy is never registered)
        self._topic_deleted = topic_deleted
        #: a request waits at most this long for a partition lock (log.locks.BoundedLock)
        self.request_timeout_s = request_timeout_ms / 1000
        self._counters = {"bytes_uploaded": 0, "segments_copied": 0, "segments_deleted": 0, "copy_failures": 0,
                          "fenced_operations": 0}
        self._closed = False
        self._deleter = SegmentDeleter(
            metadata_manager, storage_manager, broker_id, clock,
            on_fenced=lambda e, md: self._count_fenced(e, md.topic_partition),
            on_objects_deleted=lambda md: self.cache.invalidate_segment(md.id))

    # ---- counters ----------------------------------------------------------------------------
    def stats(self) -> RemoteLogManagerStats:
        with self._guard:
            c = dict(self._counters)
        return RemoteLogManagerStats(c["bytes_uploaded"], self.reader.bytes_downloaded, c["segments_copied"],
                                     c["segments_deleted"], c["copy_failures"], c["fenced_operations"])

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
        """min(start of the earliest referenced remote segment, local log start), never below the
        log start offset DeleteRecords set."""
        return self.read_path.log_start_offset(tp)

    def delete_records(self, tp: TopicPartition, offset: int) -> int:
        """DeleteRecords on a tiered partition this node leads: the log start offset over both
        tiers moves to ``offset``, first in the metadata store (fenced by the current epoch, so a
        zombie moves nothing and the next leader starts there), then in the local log. Remote and
        local segments wholly below it go with the next retention pass. Returns the log start offset.

        Raises:
            NotLeaderForPartitionError: another broker leads ``tp`` (a zombie learns it here).
            OffsetOutOfRangeError: ``offset`` is negative or above the high watermark.
        """
        # the store's current leader, not the cache (a zombie is refused); nobody registered yet: this node
        state = self.check_current_leader(tp, "delete records") or self.leader_state(tp, "delete records")
        log = self._log(tp)
        with self._lock(tp):
            log.check_new_log_start_offset(offset)
            try:
                self.metadata.advance_log_start_offset(tp, offset, leader_epoch=state.leader_epoch)
            except FencedLeaderEpochError:
                self._leaders.pop(tp, None)
                raise
            log.advance_log_start_offset(offset)
        return self.log_start_offset(tp)

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
