"""A RemoteLogManager's shared per-partition state (locks, counters, the delete sequence) and its
leadership: registering, resuming and checking the epoch it acts under (see :mod:`remote.log_manager`)."""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

from log.clock import Clock
from log.errors import UnknownTopicOrPartitionError
from log.local_log import LocalLog
from log.locks import RANK_RLM_PARTITION, BoundedLock, ordered_rlock
from log.log_manager import LogManager
from log.types import TopicPartition
from metadata.errors import FencedLeaderEpochError, NotLeaderForPartitionError
from metadata.segment_indexes import IndexedSegmentStore
from metadata.types import LeaderState, RemoteLogSegmentMetadata
from remote.read_cache import RemoteReadCache
from remote.segment_deletion import SegmentDeleter
from remote.segment_state import restore_from_remote
from remote.storage_manager import RemoteStorageManager

logger = logging.getLogger(__name__)

#: set on a FencedLeaderEpochError once it was counted in fenced_operations (the service's
#: error handler counts the ones nobody counted yet)
COUNTED_BY_RLM = "_tiercompact_counted_by_rlm"


class RemoteLogState:
    """The per-partition state a RemoteLogManager's parts share: the partition locks, the counters,
    the cached leader epochs, the abandoned uploads and the delete sequence."""

    log_manager: LogManager
    metadata: IndexedSegmentStore
    rsm: RemoteStorageManager
    broker_id: int
    clock: Clock
    cache: RemoteReadCache
    _guard: Any
    _tp_locks: dict[TopicPartition, Any]
    _leaders: dict[TopicPartition, LeaderState]
    _abandoned: dict[TopicPartition, dict[str, RemoteLogSegmentMetadata]]
    _counters: dict[str, int]
    _deleter: SegmentDeleter
    _topic_deleted: Callable[[str], bool]
    #: how long a request waits for a partition lock background work holds (request_timeout_ms)
    request_timeout_s: float = 30.0

    def _lock(self, tp: TopicPartition) -> BoundedLock:
        """The partition's lock; a request waits for it at most ``request_timeout_s``
        (log.locks.BoundedLock), then gets PartitionBusyError."""
        with self._guard:
            lock = self._tp_locks.get(tp)
            if lock is None:
                lock = self._tp_locks[tp] = ordered_rlock("remote.partition", RANK_RLM_PARTITION, label=str(tp))
        return BoundedLock(lock, self.request_timeout_s, f"partition {tp}")

    def _bump(self, name: str, n: int = 1) -> None:
        with self._guard:
            self._counters[name] += n

    def _log(self, tp: TopicPartition) -> LocalLog:
        return self.log_manager.get_log(tp)

    def _highest_remote_offset(self, tp: TopicPartition) -> int:
        segs = self.metadata.list_remote_log_segments(tp)
        return max((m.end_offset for m in segs), default=-1)

    def _delete_remote(self, md: RemoteLogSegmentMetadata, epoch: int) -> None:
        """DELETE_SEGMENT_STARTED (fenced) -> delete objects (idempotent) -> FINISHED; the
        partition lock is held for the two metadata writes only, never across the object-store
        calls (a slow store must not keep requests waiting for the partition)."""
        self._deleter.delete(md, epoch, hold=lambda: self._lock(md.topic_partition))
        with self._guard:
            self._abandoned.get(md.topic_partition, {}).pop(md.id, None)
        self._bump("segments_deleted")


class Leadership(RemoteLogState):
    """Which epoch a RemoteLogManager acts under for each partition, and whether it leads it."""

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
            self._adopt_log_start(tp, log)
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

    def cached_leader_state(self, tp: TopicPartition) -> LeaderState | None:
        """The leader state this manager acts under for ``tp`` from its cache (None: not cached)."""
        return self._leaders.get(tp)

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
                if self._topic_deleted(tp.topic):
                    raise UnknownTopicOrPartitionError(
                        f"topic {tp.topic!r} was deleted (the metadata store records its deletion): this node's "
                        f"copy of {tp} is stale and is never registered or uploaded again; a restart drops it")
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
            self._adopt_log_start(tp, log)
            self._leaders[tp] = state
            return state, True

    def _adopt_log_start(self, tp: TopicPartition, log: LocalLog) -> None:
        """A node taking the lead starts the log where DeleteRecords left it, on whichever node that
        ran (the metadata store holds it for tiered partitions), before it serves a read."""
        if not log.config.remote_storage_enable:
            return
        floor = self.metadata.log_start_offset(tp)
        if floor <= log.deleted_records_offset:
            return
        end = log.high_watermark
        if floor > end:  # the records up to it were never tiered and this node never held them
            logger.warning("%s: the log start offset %d set by DeleteRecords is past this node's log end %d; "
                           "starting at %d", tp, floor, end, end)
        log.advance_log_start_offset(min(floor, end))

    def leader_epoch(self, tp: TopicPartition, action: str = "upload, cleaning publish or delete") -> int:
        return self.leader_state(tp, action).leader_epoch

    def _restore_if_behind(self, tp: TopicPartition, log: LocalLog) -> None:
        """A local log at or below the remote tier's end (lost data dir, new node) restarts after
        the newest remote segment with its producer snapshot and epoch checkpoint
        (remote.segment_state), before this node acts as leader."""
        if log.config.remote_storage_enable:
            restore_from_remote(log, self.rsm, self.metadata.list_remote_log_segments(tp))
