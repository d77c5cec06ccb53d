"""MetadataFollower: a node follows what others publish about the tiered partitions it holds (leaders, cleaner checkpoints, segments, deletions, erasures).

Every ``metadata_sync_interval_ms`` one query reads each held partition's change token
(:meth:`~metadata.manager.RemoteLogMetadataManager.partition_versions`: the fence token the
metadata store renews in the transaction of every write of the partition, with its leader). Only a
partition whose token changed since the last pass is looked at again:

* its cached metadata is dropped, and a cached leadership that is no longer this broker's is
  forgotten (so the produce path refuses writes at a deposed leader within the interval);
* the published cleaner checkpoint is adopted when it is ahead of the local one, and the local
  copies wholly below it are dropped (the leader's or a standalone Spark job's compaction): reads
  below it come from the published remote segments;
* a partition whose metadata disappeared (its topic deleted by the leader) is reported and
  skipped;
* erasures of its topic are looked at: a node that does not lead the partition drops its local
  copies of the segments an erasure listed and confirms so under its own broker id (the leader's
  receipt waits for every registered node, :mod:`cleaner.erasure_workflow`).

At start (:meth:`start_pass`) every erasure this node has not confirmed is handled before the
node serves anything, so a node that was down during an erasure drops its copies first.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

from cleaner.manager import CleaningStateKind
from log.errors import TiercompactError
from log.local_log import LocalLog
from log.segment import DELETED_SUFFIX
from log.types import TopicPartition
from metadata.erasures import COMPLETE, PENDING, VALUES_REMOVED, ErasureConfirmation, ErasureRecord
from metadata.types import PartitionVersion

logger = logging.getLogger(__name__)


class MetadataFollower:
    """Follows the metadata store for one node (see the module docstring). ``node`` gives the
    log manager, metadata store, RemoteLogManager, cleaner and broker id."""

    def __init__(self, node: Any, *, interval_ms: int) -> None:
        self.node = node
        self.interval_ms = interval_ms
        self._seen: dict[TopicPartition, str] = {}
        #: the leader each held partition had at the last pass (for reads at a follower)
        self.leaders: dict[TopicPartition, PartitionVersion] = {}
        self.passes = 0
        self.dropped_segments = 0
        self.last_pass_ms: int | None = None

    # ---- one pass ----------------------------------------------------------------------------
    def run_once(self) -> None:
        node = self.node
        logs = {tp: log for tp, log in node.log_manager.all_logs().items() if log.config.remote_storage_enable}
        if not logs:
            return
        versions = node.metadata.partition_versions(sorted({tp.topic for tp in logs}))
        changed_topics: set[str] = set()
        for tp, log in sorted(logs.items()):
            v = versions.get(tp)
            prev = self._seen.get(tp)
            if v is None:
                if prev is not None:
                    logger.warning("%s: its metadata was deleted (the topic was deleted by its leader); this "
                                   "node's local copy is stale: delete it with DELETE /v1/topics/%s?scope=local",
                                   tp, tp.topic)
                    self._seen.pop(tp, None)
                    self.leaders.pop(tp, None)
                continue
            self.leaders[tp] = v
            if prev == v.token:
                continue
            try:
                if self._apply(tp, log, v):
                    self._seen[tp] = v.token
                changed_topics.add(tp.topic)
            except TiercompactError as e:
                logger.warning("%s: following the published metadata failed (retried next pass): %s", tp, e)
        if changed_topics:
            self.confirm_erasures(changed_topics)
        self.passes += 1
        self.last_pass_ms = node.clock.milliseconds()

    def start_pass(self) -> None:
        """Before serving: follow once, then confirm every erasure this node has not confirmed."""
        try:
            self.run_once()
            self.confirm_erasures(None)
        except TiercompactError as e:
            logger.warning("the first metadata sync failed (retried every %d ms): %s", self.interval_ms, e)

    def _apply(self, tp: TopicPartition, log: LocalLog, v: PartitionVersion) -> bool:
        """React to a changed partition; False to look again at the next pass."""
        node = self.node
        node.metadata.invalidate_caches(tp)
        me = node.broker_id
        cached = node.remote.cached_leader_state(tp)
        if v.leader_epoch >= 0 and cached is not None:
            if v.broker_id != me or cached.leader_epoch != v.leader_epoch:
                node.remote.forget_leader(tp)
                logger.info("%s: leadership moved to broker %d at epoch %d; broker %d stops acting as leader",
                            tp, v.broker_id, v.leader_epoch, me)
        cp = node.metadata.resolve_cleaner_checkpoint(tp)
        if cp is None:
            return True
        local = node.cleaner.manager.all_cleaner_checkpoints().get(tp)
        stale = [s for s in log.all_segments() if s is not log.active_segment and s.read_next_offset() <= cp]
        if (local is not None and local >= cp) and not stale:
            return True
        state = node.cleaner.manager.state(tp)
        if state is not None and state.kind is CleaningStateKind.IN_PROGRESS:
            return False  # this node's own round is finishing: it adopts its own publish
        if node.cleaner.tiered is None:
            with log.lock:
                dropped = log.delete_segments(stale)
        else:
            before = len(log.all_segments())
            node.cleaner.adopt_remote_checkpoint(tp, log)
            dropped = list(range(max(before - len(log.all_segments()), 0)))
        if dropped:
            self.dropped_segments += len(dropped)
            logger.info("%s: adopted the published cleaner checkpoint %d; dropped %d stale local segments",
                        tp, cp, len(dropped))
        return True

    # ---- erasures ----------------------------------------------------------------------------
    def confirm_erasures(self, topics: set[str] | None) -> None:
        """Confirm every erasure of ``topics`` (None: all) whose values the leader removed, for
        the tiered partitions this node holds but does not lead: drop the local copies of the
        listed segments first."""
        node = self.node
        states = None if topics is None else [PENDING, VALUES_REMOVED]
        for rec in node.metadata.list_erasures(states=states):
            if topics is not None and rec.topic not in topics:
                continue
            try:
                self._confirm(rec)
            except TiercompactError as e:
                logger.warning("erasure %s: confirming failed (retried): %s", rec.erasure_id, e)

    def _confirm(self, rec: ErasureRecord) -> None:
        node = self.node
        mine = {c.partition: c.confirmed_ms for c in node.metadata.erasure_confirmations(rec.erasure_id)
                if c.broker_id == node.broker_id}
        for part in rec.partitions:
            removed = part.detail.get("leader_removed_ms")
            if removed is None and part.state in (VALUES_REMOVED, COMPLETE):
                removed = part.detail.get("values_removed_ms", 0)
            if removed is None or mine.get(part.partition, -1) >= removed:
                continue
            tp = TopicPartition(rec.topic, part.partition)
            log = node.log_manager.get_log(tp) if tp in node.log_manager.all_logs() else None
            if log is not None and not log.config.remote_storage_enable:
                continue  # a local topic of this node: not the erased partition
            leader = node.metadata.leader_state(tp)
            if leader is not None and leader.broker_id == node.broker_id:
                continue  # the leader confirms its own removal in the workflow
            dropped = self.drop_listed_copies(log, part.detail) if log is not None else []
            node.metadata.confirm_erasure(rec.erasure_id, ErasureConfirmation(
                part.partition, node.broker_id, node.clock.milliseconds(),
                {"dropped": dropped, "serves": False, "held_partition": log is not None}))
            logger.info("erasure %s partition %d: broker %d holds and serves no copy of the listed segments "
                        "(dropped %d files)", rec.erasure_id, part.partition, node.broker_id, len(dropped))

    def drop_listed_copies(self, log: LocalLog, detail: dict[str, Any]) -> list[str]:
        """Delete the local segments overlapping any segment the erasure listed; their files."""
        ranges = [(int(s["base_offset"]), int(s["end_offset"])) for k in detail.get("keys", [])
                  for s in k.get("segments", [])]
        if not ranges:
            return []
        with log.lock:
            hit = [s for s in log.all_segments() if s.size and any(
                b <= s.read_next_offset() - 1 and s.base_offset <= e for b, e in ranges)]
            paths = [s.log_path for s in hit]
            log.delete_segments(hit)
        # the renamed files too (of these segments, or of earlier drops waiting for their delayed
        # deletion): nothing of the value stays on this disk
        top = max(e for _b, e in ranges)
        for f in sorted(log.dir.glob(f"*{DELETED_SUFFIX}")):
            base = f.name.split(".")[0]
            if base.isdigit() and int(base) <= top:
                f.unlink(missing_ok=True)
                paths.append(f)
        for sid in {s.get("segment_id") for k in detail.get("keys", []) for s in k.get("segments", [])}:
            if sid:  # chunks of the replaced remote segments this node's reads cached
                self.node.remote.cache.invalidate_segment(sid)
        self.dropped_segments += len(hit)
        return [str(p) for p in paths]

    def registered_brokers(self) -> list[int]:
        """The broker ids in the cluster registry (none when it cannot be read)."""
        try:
            return [r.broker_id for r in self.node.metadata.brokers()]
        except Exception as e:  # noqa: BLE001 - an unreadable registry: the receipt waits on nobody new
            logger.warning("cluster registry unreadable: %s", e)
            return []

    def close(self) -> None:
        """Nothing to release: the registry is the node's metadata store, which the node closes."""


def follower_for(node: Any, interval_ms: int) -> tuple[MetadataFollower, Callable[[], None]]:
    """The follower of ``node`` and its periodic pass."""
    f = MetadataFollower(node, interval_ms=interval_ms)
    return f, f.run_once
