"""The classic group coordinator's membership protocol: JoinGroup, SyncGroup, Heartbeat and LeaveGroup on its own event loop.

This is Kafka's GroupCoordinator (the classic protocol): groups move Empty -> PreparingRebalance
-> CompletingRebalance -> Stable (and Dead when deleted); a rebalance completes when every known
member rejoined (or the rebalance timeout drops those that did not), the first rejoined member
leads and gets everyone's metadata, its SyncGroup hands out the assignments. Session timeouts
expire silent members, ``group.initial.rebalance.delay.ms`` holds the first join of an Empty
group for more members, KIP-394 answers a v4+ join without member id MEMBER_ID_REQUIRED, KIP-345
static members (group.instance.id) keep their place across restarts and fence an older instance
(FENCED_INSTANCE_ID). Generation fencing answers ILLEGAL_GENERATION / UNKNOWN_MEMBER_ID /
REBALANCE_IN_PROGRESS as Kafka does.

Every group lives on the coordinator's own thread and event loop (timers are ``call_later``);
callers on other threads or loops use :meth:`GroupCoordinator.submit`. A group belongs to the
coordinator slot of its id (coordinator.ownership): requests for a group whose slot this node
does not hold answer NOT_COORDINATOR (COORDINATOR_LOAD_IN_PROGRESS while loading), groups are
loaded from the store when a slot is claimed and dropped when it is handed off, and every store
write carries the slot's epoch (a superseded coordinator's writes are refused).
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import logging
import threading
import time
import uuid
from collections.abc import Callable, Coroutine
from dataclasses import dataclass
from typing import Any, TypeVar

from coordinator.group import errors as E
from coordinator.group.errors import GroupError
from coordinator.group.model import Group, GroupState, JoinResult, Member
from coordinator.group.offset_ops import OffsetOps
from coordinator.ownership import CoordinatorOwnership, SlotStatus
from metadata.coordinators import CoordinatorFencedError
from metadata.group_offsets import CoordinatorFence, GroupStore

logger = logging.getLogger(__name__)

T = TypeVar("T")


@dataclass
class GroupConfig:
    """The broker's group settings (Kafka's names)."""

    min_session_timeout_ms: int = 6_000           # group.min.session.timeout.ms
    max_session_timeout_ms: int = 1_800_000       # group.max.session.timeout.ms
    initial_rebalance_delay_ms: int = 3_000       # group.initial.rebalance.delay.ms
    max_size: int = 2**31 - 1                     # group.max.size
    max_metadata_bytes: int = 4096                # offset.metadata.max.bytes
    new_member_join_timeout_ms: int = 300_000     # GroupCoordinator.NewMemberJoinTimeoutMs
    offsets_retention_ms: int = 7 * 24 * 3600 * 1000  # offsets.retention.minutes
    offsets_retention_check_interval_ms: int = 600_000  # offsets.retention.check.interval.ms


class GroupCoordinator(OffsetOps):
    """Groups of the slots this node holds; ``start()`` runs its loop, ``close()`` stops it."""

    def __init__(self, store: GroupStore, ownership: CoordinatorOwnership, *, config: GroupConfig | None = None,
                 now_ms: Callable[[], int] | None = None) -> None:
        self.store = store
        self.ownership = ownership
        self.config = config or GroupConfig()
        self.now_ms = now_ms or (lambda: int(time.time() * 1000))
        self.groups: dict[str, Group] = {}
        self.loop = asyncio.new_event_loop()
        self._pool = concurrent.futures.ThreadPoolExecutor(max_workers=4, thread_name_prefix="tiercompact-groups")
        self._thread = threading.Thread(target=self.loop.run_forever, name="tiercompact-group-coordinator",
                                        daemon=True)
        self.stats: dict[str, float] = {"rebalances": 0, "joins": 0, "syncs": 0, "heartbeats": 0, "leaves": 0,
                                        "expired_members": 0, "offset_commits": 0, "offset_fetches": 0,
                                        "fenced_writes": 0, "expired_offsets": 0,
                                        "last_rebalance_s": 0.0}
        ownership.add_listener(self._on_load, self._on_unload)

    # ---- lifecycle and threads -------------------------------------------------------
    def start(self) -> GroupCoordinator:
        self._thread.start()
        self.loop.call_soon_threadsafe(self._schedule_expiry)
        return self

    def _schedule_expiry(self) -> None:
        def done(task: asyncio.Task[int]) -> None:
            if not task.cancelled() and task.exception() is not None:
                logger.warning("expiring group offsets failed: %s", task.exception())

        def tick() -> None:
            asyncio.ensure_future(self.expire_offsets()).add_done_callback(done)
            self._schedule_expiry()
        self.loop.call_later(self.config.offsets_retention_check_interval_ms / 1000, tick)

    def close(self) -> None:
        if self._thread.is_alive():
            self.loop.call_soon_threadsafe(self.loop.stop)
            self._thread.join(5)
        self._pool.shutdown(wait=False, cancel_futures=True)
        if not self._thread.is_alive():
            self.loop.close()

    def submit(self, coro: Coroutine[Any, Any, T]) -> concurrent.futures.Future[T]:
        """Run ``coro`` (one of this class's coroutines) on the coordinator's loop; from any other thread."""
        return asyncio.run_coroutine_threadsafe(coro, self.loop)

    async def call(self, coro: Coroutine[Any, Any, T]) -> T:
        """Await ``coro`` on the coordinator's loop from another event loop (a Kafka handler)."""
        return await asyncio.wrap_future(self.submit(coro))

    def call_blocking(self, coro: Coroutine[Any, Any, T], timeout: float = 30.0) -> T:
        return self.submit(coro).result(timeout)

    async def _run(self, fn: Callable[..., T], *args: Any) -> T:
        """Blocking store work off the coordinator's loop."""
        return await self.loop.run_in_executor(self._pool, lambda: fn(*args))

    # ---- ownership -------------------------------------------------------------------
    def _fence(self, group_id: str) -> CoordinatorFence:
        """This node's fence for the group's slot, or GroupError(NOT_COORDINATOR / COORDINATOR_LOAD_IN_PROGRESS)."""
        own = self.ownership.lookup(group_id)
        if own.status is SlotStatus.LOADING:
            raise GroupError(E.COORDINATOR_LOAD_IN_PROGRESS)
        if own.status is not SlotStatus.OWNED:
            raise GroupError(E.NOT_COORDINATOR)
        return CoordinatorFence(own.slot, self.ownership.broker_id, own.epoch)

    def _on_load(self, slot: int, epoch: int) -> None:
        """Ownership thread: read the slot's groups, install them on the loop (before the slot answers as owned)."""
        records = [r for r in self.store.groups([slot]).values() if r is not None]
        self.submit(self._install(slot, records)).result(30)

    async def _install(self, slot: int, records: list[Any]) -> None:
        for rec in records:
            old = self.groups.pop(rec.group_id, None)
            if old is not None:
                self._drop(old, E.NOT_COORDINATOR)
            group = Group.from_record(rec)
            self.groups[group.group_id] = group
            for m in group.members.values():
                self._schedule_heartbeat(group, m)
        # an empty slot's load is routine (50 of them at every start): only a slot that brought groups is news
        logger.log(logging.INFO if records else logging.DEBUG, "group coordinator slot %d loaded (%d groups)", slot,
                   len(records))

    def _on_unload(self, slot: int) -> None:
        if self._thread.is_alive():
            self.submit(self._uninstall(slot)).result(30)

    async def _uninstall(self, slot: int) -> None:
        for gid in [g for g, grp in self.groups.items() if grp.slot == slot]:
            self._drop(self.groups.pop(gid), E.NOT_COORDINATOR)

    def _drop(self, group: Group, code: int) -> None:
        """Forget a group in memory: waiting joins and syncs get ``code``, timers stop."""
        if group.join_timer is not None:
            group.join_timer.cancel()
        for handle in group.pending_members.values():
            if handle is not None:
                handle.cancel()
        for m in group.members.values():
            if m.heartbeat is not None:
                m.heartbeat.cancel()
            self._answer_join(m, JoinResult(code, m.member_id))
            self._answer_sync(m, code, b"")

    # ---- helpers ---------------------------------------------------------------------
    @staticmethod
    def _answer_join(member: Member, result: JoinResult) -> None:
        fut, member.awaiting_join = member.awaiting_join, None
        if fut is not None and not fut.done():
            fut.set_result(result)

    @staticmethod
    def _answer_sync(member: Member, code: int, assignment: bytes) -> None:
        fut, member.awaiting_sync = member.awaiting_sync, None
        if fut is not None and not fut.done():
            fut.set_result((code, assignment))

    def _schedule_heartbeat(self, group: Group, member: Member) -> None:
        if member.heartbeat is not None:
            member.heartbeat.cancel()
        member.last_heartbeat_ms = self.now_ms()
        timeout = (self.config.new_member_join_timeout_ms if member.is_new and member.awaiting_join is not None
                   else member.session_timeout_ms)
        member.heartbeat = self.loop.call_later(timeout / 1000, self._heartbeat_expired, group, member)

    def _heartbeat_expired(self, group: Group, member: Member) -> None:
        if group.members.get(member.member_id) is not member or self.groups.get(group.group_id) is not group:
            return
        if (member.awaiting_join is not None and not member.is_new) or member.awaiting_sync is not None:
            self._schedule_heartbeat(group, member)  # kept alive while it waits for the rebalance
            return
        logger.info("group %s: member %s expired (session timeout %d ms)", group.group_id, member.member_id,
                    member.session_timeout_ms)
        self.stats["expired_members"] += 1
        self._remove_member(group, member)

    def _remove_member(self, group: Group, member: Member) -> None:
        if member.heartbeat is not None:
            member.heartbeat.cancel()
        self._answer_join(member, JoinResult(E.UNKNOWN_MEMBER_ID, member.member_id))
        self._answer_sync(member, E.UNKNOWN_MEMBER_ID, b"")
        group.remove(member.member_id)
        if group.is_(GroupState.STABLE, GroupState.COMPLETING_REBALANCE):
            self._prepare_rebalance(group)
        self._try_complete_join(group)

    def _persist(self, group: Group, state: GroupState | None = None) -> asyncio.Future[None]:
        """Write the group's metadata as it is now under its slot's epoch (a task: callers await it or let it run).

        A group's writes reach the store in the order they were made, as Kafka's records of a group follow each
        other in its __consumer_offsets partition: each waits for the one before (whatever that one's outcome,
        which is its own caller's), since the pool's threads would otherwise let an older state land last (an Empty
        group stored after the Stable generation that followed it, and loaded so by the next coordinator)."""
        try:
            fence = self._fence(group.group_id)
        except GroupError as e:
            fut: asyncio.Future[None] = self.loop.create_future()
            fut.set_exception(e)
            return fut
        rec = group.to_record(self.now_ms(), state)
        before = group.last_write

        async def write() -> None:
            if before is not None and not before.done():
                await asyncio.wait([before])
            await self._run(self.store.save_group, rec, fence)

        group.last_write = asyncio.ensure_future(write())
        return group.last_write

    def _persist_quietly(self, group: Group) -> None:
        def done(f: asyncio.Future[None]) -> None:
            if not f.cancelled() and f.exception() is not None:
                logger.warning("group %s: storing its metadata failed: %s", group.group_id, f.exception())
        self._persist(group).add_done_callback(done)

    # ---- rebalance -------------------------------------------------------------------
    def _prepare_rebalance(self, group: Group) -> None:
        if group.is_(GroupState.COMPLETING_REBALANCE):
            for m in group.members.values():
                m.assignment = b""
                self._answer_sync(m, E.REBALANCE_IN_PROGRESS, b"")
        initial = group.is_(GroupState.EMPTY)
        group.state = GroupState.PREPARING_REBALANCE
        group.rebalance_started = time.monotonic()
        self.stats["rebalances"] += 1
        if group.join_timer is not None:
            group.join_timer.cancel()
        if initial:
            delay = self.config.initial_rebalance_delay_ms
            remaining = max(group.max_rebalance_timeout_ms() - delay, 0)
            group.initial_delay = True
            group.new_member_added = False
            group.join_timer = self.loop.call_later(delay / 1000, self._initial_join_expired, group, delay, remaining)
        else:
            group.initial_delay = False
            group.join_timer = self.loop.call_later(group.max_rebalance_timeout_ms() / 1000, self._complete_join,
                                                    group)

    def _initial_join_expired(self, group: Group, delay: int, remaining: int) -> None:
        if group.new_member_added and remaining > 0:
            group.new_member_added = False
            step = min(delay, remaining)
            group.join_timer = self.loop.call_later(step / 1000, self._initial_join_expired, group, delay,
                                                    remaining - step)
            return
        group.initial_delay = False
        self._complete_join(group)

    def _try_complete_join(self, group: Group) -> None:
        if group.is_(GroupState.PREPARING_REBALANCE) and not group.initial_delay and group.all_joined():
            self._complete_join(group)

    def _complete_join(self, group: Group) -> None:
        if group.join_timer is not None:
            group.join_timer.cancel()
            group.join_timer = None
        group.initial_delay = False
        if not group.is_(GroupState.PREPARING_REBALANCE) or self.groups.get(group.group_id) is not group:
            return
        for m in list(group.members.values()):  # dynamic members that did not rejoin in time leave
            if m.awaiting_join is None and m.group_instance_id is None:
                if m.heartbeat is not None:
                    m.heartbeat.cancel()
                group.remove(m.member_id)
        group.generation += 1
        if not group.members:
            group.state = GroupState.EMPTY
            group.protocol = None
            group.leader_id = None
            self._persist_quietly(group)
            return
        group.protocol = group.select_protocol()
        group.state = GroupState.COMPLETING_REBALANCE
        leader = group.members.get(group.leader_id or "")
        if leader is None or leader.awaiting_join is None:
            group.leader_id = next((m.member_id for m in group.members.values() if m.awaiting_join is not None),
                                   next(iter(group.members)))
        everyone = [(m.member_id, m.group_instance_id, m.metadata_for(group.protocol))
                    for m in group.members.values()]
        for m in group.members.values():
            if m.awaiting_join is None:
                continue
            self._answer_join(m, self._current(group, m.member_id, everyone))
            m.is_new = False
            self._schedule_heartbeat(group, m)

    def _current(self, group: Group, member_id: str,
                 everyone: list[tuple[str, str | None, bytes]] | None = None) -> JoinResult:
        if everyone is None:
            everyone = [(m.member_id, m.group_instance_id, m.metadata_for(group.protocol))
                        for m in group.members.values()]
        return JoinResult(E.NONE, member_id, group.generation, group.protocol_type, group.protocol,
                          group.leader_id or "", everyone if member_id == group.leader_id else [])

    # ---- JoinGroup -------------------------------------------------------------------
    async def join_group(self, group_id: str, member_id: str, group_instance_id: str | None, client_id: str,
                         client_host: str, session_timeout_ms: int, rebalance_timeout_ms: int, protocol_type: str,
                         protocols: list[tuple[str, bytes]], require_known_member_id: bool) -> JoinResult:
        self.stats["joins"] += 1
        if not group_id:
            return JoinResult(E.INVALID_GROUP_ID, member_id)
        try:
            fence = self._fence(group_id)
        except GroupError as e:
            return JoinResult(e.code, member_id)
        if not self.config.min_session_timeout_ms <= session_timeout_ms <= self.config.max_session_timeout_ms:
            return JoinResult(E.INVALID_SESSION_TIMEOUT, member_id)
        if rebalance_timeout_ms < 0:
            rebalance_timeout_ms = session_timeout_ms
        group = self.groups.get(group_id)
        if group is None:
            if member_id:
                return JoinResult(E.UNKNOWN_MEMBER_ID, member_id)
            group = self.groups[group_id] = Group(group_id, fence.slot)
        args = (group_instance_id, client_id, client_host, session_timeout_ms, rebalance_timeout_ms, protocol_type,
                protocols)
        if group.is_(GroupState.DEAD):
            return JoinResult(E.COORDINATOR_NOT_AVAILABLE, member_id)
        if not group.supports(protocol_type, [n for n, _ in protocols]):
            return JoinResult(E.INCONSISTENT_GROUP_PROTOCOL, member_id)
        if not member_id:
            answer = self._join_new(group, require_known_member_id, *args)
        else:
            answer = self._join_known(group, member_id, *args)
        if isinstance(answer, JoinResult):
            return answer
        return await answer

    def _join_new(self, group: Group, require_known: bool, instance_id: str | None, client_id: str,
                  client_host: str, session_ms: int, rebalance_ms: int, protocol_type: str,
                  protocols: list[tuple[str, bytes]]) -> JoinResult | asyncio.Future[JoinResult]:
        new_id = f"{client_id}-{uuid.uuid4()}"
        if instance_id is not None:
            old_id = group.static_members.get(instance_id)
            if old_id is not None and old_id in group.members:
                return self._replace_static(group, old_id, new_id, session_ms, rebalance_ms, protocols)
        elif require_known:
            if len(group.members) + len(group.pending_members) >= self.config.max_size:
                return JoinResult(E.GROUP_MAX_SIZE_REACHED, "")
            group.pending_members[new_id] = self.loop.call_later(session_ms / 1000, self._expire_pending, group,
                                                                 new_id)
            return JoinResult(E.MEMBER_ID_REQUIRED, new_id)
        if len(group.members) >= self.config.max_size:
            return JoinResult(E.GROUP_MAX_SIZE_REACHED, "")
        member = Member(new_id, instance_id, client_id, client_host, rebalance_ms, session_ms, protocol_type,
                        [(n, bytes(m)) for n, m in protocols])
        return self._add_and_rebalance(group, member)

    def _expire_pending(self, group: Group, member_id: str) -> None:
        if member_id in group.pending_members:
            del group.pending_members[member_id]
            self._try_complete_join(group)

    def _add_and_rebalance(self, group: Group, member: Member) -> asyncio.Future[JoinResult]:
        member.is_new = True
        group.add(member)
        group.new_member_added = True
        return self._await_rebalance(group, member)

    def _await_rebalance(self, group: Group, member: Member) -> asyncio.Future[JoinResult]:
        """``member`` waits for the join's answer; a group not already rebalancing starts to."""
        fut: asyncio.Future[JoinResult] = self.loop.create_future()
        member.awaiting_join = fut
        self._schedule_heartbeat(group, member)
        if group.is_(GroupState.STABLE, GroupState.COMPLETING_REBALANCE, GroupState.EMPTY):
            self._prepare_rebalance(group)
        self._try_complete_join(group)
        return fut

    def _replace_static(self, group: Group, old_id: str, new_id: str, session_ms: int, rebalance_ms: int,
                        protocols: list[tuple[str, bytes]]) -> JoinResult | asyncio.Future[JoinResult]:
        """KIP-345: a static member rejoining without its member id takes the old one's place (the old is fenced)."""
        old = group.members.pop(old_id)
        self._answer_join(old, JoinResult(E.FENCED_INSTANCE_ID, old_id))
        self._answer_sync(old, E.FENCED_INSTANCE_ID, b"")
        same = old.same_protocols(protocols)
        old.member_id = new_id
        old.session_timeout_ms, old.rebalance_timeout_ms = session_ms, rebalance_ms
        old.protocols = [(n, bytes(m)) for n, m in protocols]
        group.members[new_id] = old
        assert old.group_instance_id is not None
        group.static_members[old.group_instance_id] = new_id
        if group.leader_id == old_id:
            group.leader_id = new_id
        self._schedule_heartbeat(group, old)
        if group.is_(GroupState.STABLE) and same and group.leader_id != new_id:
            self._persist_quietly(group)
            return self._current(group, new_id)
        return self._update_and_rebalance(group, old, session_ms, rebalance_ms, protocols)

    def _join_known(self, group: Group, member_id: str, instance_id: str | None, client_id: str, client_host: str,
                    session_ms: int, rebalance_ms: int, protocol_type: str,
                    protocols: list[tuple[str, bytes]]) -> JoinResult | asyncio.Future[JoinResult]:
        if member_id in group.pending_members:
            handle = group.pending_members.pop(member_id)
            if handle is not None:
                handle.cancel()
            joining = Member(member_id, instance_id, client_id, client_host, rebalance_ms, session_ms,
                             protocol_type, [(n, bytes(m)) for n, m in protocols])
            return self._add_and_rebalance(group, joining)
        if instance_id is not None and group.static_members.get(instance_id, member_id) != member_id:
            return JoinResult(E.FENCED_INSTANCE_ID, member_id)
        member = group.members.get(member_id)
        if member is None or group.is_(GroupState.EMPTY):
            return JoinResult(E.UNKNOWN_MEMBER_ID, member_id)
        if group.is_(GroupState.PREPARING_REBALANCE):
            return self._update_and_rebalance(group, member, session_ms, rebalance_ms, protocols)
        if group.is_(GroupState.COMPLETING_REBALANCE):
            if member.same_protocols(protocols):
                self._schedule_heartbeat(group, member)
                return self._current(group, member_id)
            return self._update_and_rebalance(group, member, session_ms, rebalance_ms, protocols)
        # Stable: the leader's rejoin or changed metadata starts a rebalance; a follower just gets the generation
        if member_id == group.leader_id or not member.same_protocols(protocols):
            return self._update_and_rebalance(group, member, session_ms, rebalance_ms, protocols)
        self._schedule_heartbeat(group, member)
        return self._current(group, member_id)

    def _update_and_rebalance(self, group: Group, member: Member, session_ms: int, rebalance_ms: int,
                              protocols: list[tuple[str, bytes]]) -> asyncio.Future[JoinResult]:
        member.session_timeout_ms, member.rebalance_timeout_ms = session_ms, rebalance_ms
        member.protocols = [(n, bytes(m)) for n, m in protocols]
        self._answer_join(member, JoinResult(E.REBALANCE_IN_PROGRESS, member.member_id))  # a duplicate join
        return self._await_rebalance(group, member)

    # ---- SyncGroup / Heartbeat / LeaveGroup ------------------------------------------
    def _member(self, group_id: str, member_id: str, instance_id: str | None, generation: int | None) -> tuple[
            Group, Member]:
        self._fence(group_id)
        group = self.groups.get(group_id)
        if group is None:
            raise GroupError(E.UNKNOWN_MEMBER_ID)
        if group.is_(GroupState.DEAD):
            raise GroupError(E.COORDINATOR_NOT_AVAILABLE)
        if instance_id is not None and group.static_members.get(instance_id, member_id) != member_id:
            raise GroupError(E.FENCED_INSTANCE_ID)
        member = group.members.get(member_id)
        if member is None or group.is_(GroupState.EMPTY):
            raise GroupError(E.UNKNOWN_MEMBER_ID)
        if generation is not None and generation != group.generation:
            raise GroupError(E.ILLEGAL_GENERATION)
        return group, member

    async def sync_group(self, group_id: str, generation: int, member_id: str, instance_id: str | None,
                         protocol_type: str | None, protocol: str | None,
                         assignments: dict[str, bytes]) -> tuple[int, str | None, str | None, bytes]:
        self.stats["syncs"] += 1
        try:
            group, member = self._member(group_id, member_id, instance_id, generation)
        except GroupError as e:
            return e.code, None, None, b""
        if (protocol_type is not None and protocol_type != group.protocol_type) or \
                (protocol is not None and protocol != group.protocol):
            return E.INCONSISTENT_GROUP_PROTOCOL, None, None, b""
        if group.is_(GroupState.PREPARING_REBALANCE):
            return E.REBALANCE_IN_PROGRESS, None, None, b""
        self._schedule_heartbeat(group, member)
        if group.is_(GroupState.STABLE):
            return E.NONE, group.protocol_type, group.protocol, member.assignment
        fut: asyncio.Future[tuple[int, bytes]] = self.loop.create_future()
        self._answer_sync(member, E.REBALANCE_IN_PROGRESS, b"")
        member.awaiting_sync = fut
        if member_id == group.leader_id:
            await self._leader_sync(group, assignments)
        code, assignment = await fut
        return code, group.protocol_type, group.protocol, assignment

    async def _leader_sync(self, group: Group, assignments: dict[str, bytes]) -> None:
        generation = group.generation
        for m in group.members.values():
            m.assignment = bytes(assignments.get(m.member_id, b""))
        code = E.NONE
        try:
            await self._persist(group, GroupState.STABLE)
        except GroupError as e:
            code = e.code
        except CoordinatorFencedError:
            self.stats["fenced_writes"] += 1
            code = E.NOT_COORDINATOR
        except Exception as e:  # noqa: BLE001 - the store failed: clients retry the rebalance
            logger.warning("group %s: storing generation %d failed: %s", group.group_id, generation, e)
            code = E.COORDINATOR_NOT_AVAILABLE
        if not group.is_(GroupState.COMPLETING_REBALANCE) or group.generation != generation:
            return
        if code != E.NONE:
            for m in group.members.values():
                m.assignment = b""
                self._answer_sync(m, code, b"")
            self._prepare_rebalance(group)
            return
        group.state = GroupState.STABLE
        if group.rebalance_started is not None:
            self.stats["last_rebalance_s"] = time.monotonic() - group.rebalance_started
            group.rebalance_started = None
        for m in group.members.values():
            self._answer_sync(m, E.NONE, m.assignment)

    async def heartbeat(self, group_id: str, generation: int, member_id: str, instance_id: str | None) -> int:
        self.stats["heartbeats"] += 1
        try:
            group, member = self._member(group_id, member_id, instance_id, generation)
        except GroupError as e:
            return e.code
        self._schedule_heartbeat(group, member)
        return E.REBALANCE_IN_PROGRESS if group.is_(GroupState.PREPARING_REBALANCE) else E.NONE

    async def leave_group(self, group_id: str, members: list[tuple[str, str | None]]) -> tuple[
            int, list[tuple[str, str | None, int]]]:
        """(group error, [(member_id, group_instance_id, error)]) for each leaving member."""
        self.stats["leaves"] += 1
        try:
            self._fence(group_id)
        except GroupError as e:
            return e.code, [(m, i, e.code) for m, i in members]
        group = self.groups.get(group_id)
        if group is None:
            return E.UNKNOWN_MEMBER_ID, [(m, i, E.UNKNOWN_MEMBER_ID) for m, i in members]
        if group.is_(GroupState.DEAD):
            return E.COORDINATOR_NOT_AVAILABLE, [(m, i, E.COORDINATOR_NOT_AVAILABLE) for m, i in members]
        out = []
        for member_id, instance_id in members:
            out.append((member_id, instance_id, self._leave_one(group, member_id, instance_id)))
        return E.NONE, out

    def _leave_one(self, group: Group, member_id: str, instance_id: str | None) -> int:
        if instance_id is not None:
            found = group.static_members.get(instance_id)
            if found is None:
                return E.UNKNOWN_MEMBER_ID
            if member_id and member_id != found:
                return E.FENCED_INSTANCE_ID
            member_id = found
        if member_id in group.pending_members:
            handle = group.pending_members.pop(member_id)
            if handle is not None:
                handle.cancel()
            self._try_complete_join(group)
            return E.NONE
        member = group.members.get(member_id)
        if member is None:
            return E.UNKNOWN_MEMBER_ID
        logger.info("group %s: member %s leaves", group.group_id, member_id)
        self._remove_member(group, member)
        return E.NONE
