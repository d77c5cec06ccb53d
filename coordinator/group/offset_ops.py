"""The group coordinator's offsets and admin side: OffsetCommit/OffsetFetch, transactional offsets, List/Describe/Delete groups, OffsetDelete.

A mixin of :class:`coordinator.group.coordinator.GroupCoordinator` (the same loop, groups and
store). Offsets are committed under the group slot's coordinator epoch (Kafka's
GroupMetadataManager.storeOffsets), with Kafka's generation checks; offsets committed by a
transaction (TxnOffsetCommit) stay pending until its marker: ``complete_txn`` is the port the
transaction coordinator calls when it writes COMMIT or ABORT.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, Any, TypeVar

from coordinator.group import errors as E
from coordinator.group.consumer_protocol import subscribed_topics
from coordinator.group.errors import GroupError
from coordinator.group.model import Group, GroupState
from log.types import TopicPartition
from metadata.coordinators import CoordinatorFencedError
from metadata.group_offsets import CommittedOffset, CoordinatorFence

if TYPE_CHECKING:
    from coordinator.group.coordinator import GroupConfig
    from coordinator.ownership import CoordinatorOwnership
    from metadata.group_offsets import GroupStore

T = TypeVar("T")


class OffsetOps:
    """Offsets and group administration (see the module docstring)."""

    groups: dict[str, Group]
    store: GroupStore
    ownership: CoordinatorOwnership
    config: GroupConfig
    stats: dict[str, float]
    now_ms: Callable[[], int]

    if TYPE_CHECKING:  # provided by GroupCoordinator
        def _fence(self, group_id: str) -> CoordinatorFence: ...
        async def _run(self, fn: Callable[..., T], *args: Any) -> T: ...
        def _schedule_heartbeat(self, group: Group, member: Any) -> None: ...
        def _drop(self, group: Group, code: int) -> None: ...

    # ---- OffsetCommit ----------------------------------------------------------------
    def _commit_check(self, group_id: str, generation: int, member_id: str,
                      instance_id: str | None) -> tuple[CoordinatorFence, Group | None]:
        """Kafka's handleCommitOffsets checks: the fence, and the group (None: a simple, group-less commit)."""
        fence = self._fence(group_id)
        group = self.groups.get(group_id)
        if group is None:
            if generation < 0:
                return fence, None
            raise GroupError(E.ILLEGAL_GENERATION)
        if group.is_(GroupState.DEAD):
            raise GroupError(E.COORDINATOR_NOT_AVAILABLE)
        if instance_id is not None and group.static_members.get(instance_id, member_id) != member_id:
            raise GroupError(E.FENCED_INSTANCE_ID)
        if generation < 0 and group.is_(GroupState.EMPTY):
            return fence, group
        member = group.members.get(member_id)
        if member is None:
            raise GroupError(E.UNKNOWN_MEMBER_ID)
        if generation != group.generation:
            raise GroupError(E.ILLEGAL_GENERATION)
        if group.is_(GroupState.COMPLETING_REBALANCE):
            raise GroupError(E.REBALANCE_IN_PROGRESS)
        self._schedule_heartbeat(group, member)
        return fence, group

    def _too_large(self, offsets: dict[TopicPartition, CommittedOffset]) -> dict[TopicPartition, int]:
        limit = self.config.max_metadata_bytes
        return {tp: E.OFFSET_METADATA_TOO_LARGE for tp, o in offsets.items()
                if o.metadata is not None and len(o.metadata.encode()) > limit}

    async def commit_offsets(self, group_id: str, generation: int, member_id: str, instance_id: str | None,
                             offsets: dict[TopicPartition, CommittedOffset]) -> dict[TopicPartition, int]:
        """An error code per partition (NONE: committed)."""
        self.stats["offset_commits"] += 1
        try:
            fence, group = self._commit_check(group_id, generation, member_id, instance_id)
        except GroupError as e:
            return dict.fromkeys(offsets, e.code)
        errors = self._too_large(offsets)
        valid = {tp: o for tp, o in offsets.items() if tp not in errors}
        code = await self._store_write(self.store.commit, group_id, valid, fence)
        if code == E.NONE and group is None and group_id not in self.groups:
            self.groups[group_id] = Group(group_id, fence.slot)  # Kafka keeps an Empty group for simple commits
        return {tp: errors.get(tp, code) for tp in offsets}

    async def _store_write(self, fn: Callable[..., Any], *args: Any) -> int:
        try:
            await self._run(fn, *args)
        except CoordinatorFencedError:
            self.stats["fenced_writes"] += 1
            return E.NOT_COORDINATOR
        except Exception:  # noqa: BLE001 - the store failed: retriable for clients
            return E.COORDINATOR_NOT_AVAILABLE
        return E.NONE

    # ---- transactional offsets (the transaction coordinator's port) ------------------
    async def txn_offset_commit(self, group_id: str, producer_id: int, producer_epoch: int,
                                offsets: dict[TopicPartition, CommittedOffset], generation: int = -1,
                                member_id: str = "", instance_id: str | None = None) -> dict[TopicPartition, int]:
        """TxnOffsetCommit: the offsets wait for the transaction's marker (:meth:`complete_txn`)."""
        try:
            fence = self._fence(group_id)
            group = self.groups.get(group_id)
            if generation >= 0 or member_id:  # KIP-447: the producer names its consumer's generation
                if group is None or member_id not in group.members:
                    raise GroupError(E.UNKNOWN_MEMBER_ID)
                if instance_id is not None and group.static_members.get(instance_id, member_id) != member_id:
                    raise GroupError(E.FENCED_INSTANCE_ID)
                if generation != group.generation:
                    raise GroupError(E.ILLEGAL_GENERATION)
        except GroupError as e:
            return dict.fromkeys(offsets, e.code)
        errors = self._too_large(offsets)
        valid = {tp: o for tp, o in offsets.items() if tp not in errors}
        code = await self._store_write(self.store.add_txn_offsets, group_id, producer_id, producer_epoch, valid,
                                       fence)
        if code == E.NONE and group_id not in self.groups:
            self.groups[group_id] = Group(group_id, fence.slot)
        return {tp: errors.get(tp, code) for tp in offsets}

    def complete_txn(self, producer_id: int, commit: bool, group_ids: Iterable[str] | None = None) -> int:
        """The transaction's marker reached the groups: its pending offsets become committed (or are dropped).

        Blocking (a store transaction), callable from any thread; idempotent (a retried marker moves nothing).
        """
        return self.store.complete_txn(producer_id, commit, None if group_ids is None else list(group_ids))

    # ---- OffsetFetch -----------------------------------------------------------------
    async def fetch_offsets(self, group_id: str, tps: list[TopicPartition] | None, require_stable: bool) -> tuple[
            int, dict[TopicPartition, tuple[CommittedOffset | None, int]]]:
        """(group error, {tp: (committed or None, error)}); ``tps`` None: every committed partition."""
        self.stats["offset_fetches"] += 1
        try:
            self._fence(group_id)
        except GroupError as e:
            return e.code, {}
        try:
            found = await self._run(self.store.offsets, group_id, tps)
            pending = await self._run(self.store.pending_txn_partitions, group_id) if require_stable else set()
        except Exception:  # noqa: BLE001 - the store failed: retriable
            return E.COORDINATOR_NOT_AVAILABLE, {}
        wanted = list(found) if tps is None else tps
        out: dict[TopicPartition, tuple[CommittedOffset | None, int]] = {}
        for tp in wanted:
            if tp in pending:
                out[tp] = (None, E.UNSTABLE_OFFSET_COMMIT)
            else:
                out[tp] = (found.get(tp), E.NONE)
        return E.NONE, out

    # ---- ListGroups / DescribeGroups / DeleteGroups / OffsetDelete -------------------
    async def list_groups(self, states: set[str] | None = None) -> list[tuple[str, str, str]]:
        """(group id, protocol type, state) of every group in the slots this node holds."""
        slots = self.ownership.owned_slots()
        stored = await self._run(self.store.groups, list(slots))
        out = {}
        for gid in stored:
            if self.ownership.slot(gid) in slots:
                out[gid] = ("", GroupState.EMPTY.value)
        for gid, g in self.groups.items():
            if g.slot in slots:
                out[gid] = (g.protocol_type or "", g.state.value)
        return [(gid, pt, st) for gid, (pt, st) in sorted(out.items()) if not states or st in states]

    async def describe_group(self, group_id: str) -> dict[str, Any]:
        """Kafka's GroupSummary: state, protocol type, protocol, members (metadata and assignment when Stable)."""
        try:
            self._fence(group_id)
        except GroupError as e:
            return {"error": e.code, "group_id": group_id, "state": "", "protocol_type": "", "protocol": "",
                    "members": []}
        g = self.groups.get(group_id)
        if g is None:
            return {"error": E.NONE, "group_id": group_id, "state": GroupState.DEAD.value, "protocol_type": "",
                    "protocol": "", "members": [], "generation": -1, "leader": None}
        stable = g.is_(GroupState.STABLE)
        members = [{"member_id": m.member_id, "group_instance_id": m.group_instance_id, "client_id": m.client_id,
                    "client_host": m.client_host, "metadata": m.metadata_for(g.protocol) if stable else b"",
                    "assignment": m.assignment if stable else b"", "session_timeout_ms": m.session_timeout_ms,
                    "rebalance_timeout_ms": m.rebalance_timeout_ms, "last_heartbeat_ms": m.last_heartbeat_ms}
                   for m in g.members.values()]
        return {"error": E.NONE, "group_id": group_id, "state": g.state.value, "protocol_type": g.protocol_type or "",
                "protocol": (g.protocol or "") if stable else "", "members": members, "generation": g.generation,
                "leader": g.leader_id}

    async def delete_groups(self, group_ids: list[str]) -> dict[str, int]:
        out = {}
        for gid in group_ids:
            try:
                fence = self._fence(gid)
            except GroupError as e:
                out[gid] = e.code
                continue
            g = self.groups.get(gid)
            if g is not None:  # a write of its state still in flight would land after the delete: it goes first
                await g.writes_done()
                g = self.groups.get(gid)
            if g is not None and not g.is_(GroupState.EMPTY, GroupState.DEAD):
                out[gid] = E.NON_EMPTY_GROUP
                continue
            if g is None or g.is_(GroupState.DEAD):
                known = await self._run(self.store.offsets, gid, None)
                if not known and await self._run(self.store.group, gid) is None:
                    out[gid] = E.GROUP_ID_NOT_FOUND
                    continue
            code = await self._store_write(self.store.delete_group, gid, fence)
            if code == E.NONE and g is not None:
                g.state = GroupState.DEAD
                self._drop(g, E.COORDINATOR_NOT_AVAILABLE)
                self.groups.pop(gid, None)
            out[gid] = code
        return out

    async def delete_offsets(self, group_id: str, tps: list[TopicPartition]) -> tuple[int, dict[TopicPartition,
                                                                                                  int]]:
        """OffsetDelete: (group error, {tp: error}); partitions of topics a live consumer subscribes to are kept."""
        try:
            fence = self._fence(group_id)
        except GroupError as e:
            return e.code, {}
        g = self.groups.get(group_id)
        if g is None or g.is_(GroupState.DEAD):
            known = await self._run(self.store.offsets, group_id, None)
            if not known:
                return E.GROUP_ID_NOT_FOUND, {}
        subscribed: set[str] = set()
        if g is not None and not g.is_(GroupState.EMPTY, GroupState.DEAD):
            if g.protocol_type != "consumer":
                return E.NON_EMPTY_GROUP, {}
            for m in g.members.values():
                subscribed |= subscribed_topics(m.metadata_for(g.protocol)) or set()
        errors = {tp: E.GROUP_SUBSCRIBED_TO_TOPIC for tp in tps if tp.topic in subscribed}
        deletable = [tp for tp in tps if tp not in errors]
        code = await self._store_write(self.store.delete_offsets, group_id, deletable, fence)
        if code != E.NONE:
            return code, {}
        return E.NONE, {tp: errors.get(tp, E.NONE) for tp in tps}

    # ---- offsets.retention.minutes ---------------------------------------------------
    async def expire_offsets(self) -> int:
        """Kafka's offset expiry (KIP-211): a group without members loses its offsets ``offsets_retention_ms``
        after it became empty (a group that never had members: after each commit); a group left with no offsets
        and no members is deleted. Active groups keep theirs. How many offsets expired."""
        retention, now = self.config.offsets_retention_ms, self.now_ms()
        slots = self.ownership.owned_slots()
        stored = await self._run(self.store.groups, list(slots))
        expired_total = 0
        for gid in sorted(set(stored) | {g for g, grp in self.groups.items() if grp.slot in slots}):
            g = self.groups.get(gid)
            if g is not None and not g.is_(GroupState.EMPTY):
                continue
            try:
                fence = self._fence(gid)
            except GroupError:
                continue
            rec = stored.get(gid)
            empty_since = rec.updated_ms if rec is not None and rec.state == GroupState.EMPTY.value else 0
            offsets = await self._run(self.store.offsets, gid, None)
            expired = [tp for tp, o in offsets.items() if max(o.commit_ms, empty_since) + retention <= now]
            if expired and await self._store_write(self.store.delete_offsets, gid, expired, fence) != E.NONE:
                continue
            expired_total += len(expired)
            g = self.groups.get(gid)  # the group may have changed while the store worked
            if g is not None:  # a write of its state still in flight would land after a delete: it goes first
                await g.writes_done()
                g = self.groups.get(gid)
            if len(expired) == len(offsets) and (g is None or (g.is_(GroupState.EMPTY) and not g.members)):
                if await self._store_write(self.store.delete_group, gid, fence) == E.NONE and \
                        self.groups.get(gid) is g and g is not None:
                    g.state = GroupState.DEAD
                    del self.groups[gid]
        self.stats["expired_offsets"] += expired_total
        return expired_total

    # ---- operators (HTTP) ------------------------------------------------------------
    async def snapshot(self) -> list[dict[str, Any]]:
        """Every group this node coordinates, as :meth:`describe_group` (for the HTTP API)."""
        return [await self.describe_group(gid) for gid, _pt, _st in await self.list_groups()]
