"""A classic consumer group in memory: its state (Kafka's GroupState), generation, protocol and members (MemberMetadata).

Only the group coordinator's event loop touches these objects.
"""

from __future__ import annotations

import asyncio
import enum
from dataclasses import dataclass, field
from typing import Any

from metadata.group_offsets import GroupRecord


class GroupState(enum.Enum):
    """Kafka's classic group states (the names DescribeGroups and ListGroups answer)."""

    EMPTY = "Empty"
    PREPARING_REBALANCE = "PreparingRebalance"
    COMPLETING_REBALANCE = "CompletingRebalance"
    STABLE = "Stable"
    DEAD = "Dead"


@dataclass
class JoinResult:
    """What a JoinGroup waiting for the rebalance is answered with."""

    error: int
    member_id: str
    generation: int = -1
    protocol_type: str | None = None
    protocol: str | None = None
    leader: str = ""
    #: the leader's view of every member: (member_id, group_instance_id, metadata of the chosen protocol)
    members: list[tuple[str, str | None, bytes]] = field(default_factory=list)


@dataclass
class Member:
    """One member (Kafka's MemberMetadata)."""

    member_id: str
    group_instance_id: str | None
    client_id: str
    client_host: str
    rebalance_timeout_ms: int
    session_timeout_ms: int
    protocol_type: str
    protocols: list[tuple[str, bytes]]
    assignment: bytes = b""
    awaiting_join: asyncio.Future[JoinResult] | None = None
    awaiting_sync: asyncio.Future[tuple[int, bytes]] | None = None
    is_new: bool = False
    heartbeat: asyncio.TimerHandle | None = None
    last_heartbeat_ms: int = 0

    def metadata_for(self, protocol: str | None) -> bytes:
        for name, meta in self.protocols:
            if name == protocol:
                return meta
        return b""

    def protocol_names(self) -> list[str]:
        return [name for name, _ in self.protocols]

    def same_protocols(self, protocols: list[tuple[str, bytes]]) -> bool:
        return [(n, bytes(m)) for n, m in protocols] == [(n, bytes(m)) for n, m in self.protocols]

    def to_dict(self) -> dict[str, Any]:
        return {"member_id": self.member_id, "group_instance_id": self.group_instance_id,
                "client_id": self.client_id, "client_host": self.client_host,
                "rebalance_timeout_ms": self.rebalance_timeout_ms, "session_timeout_ms": self.session_timeout_ms,
                "protocol_type": self.protocol_type, "protocols": [[n, bytes(m).hex()] for n, m in self.protocols],
                "assignment": bytes(self.assignment).hex()}

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> Member:
        return cls(d["member_id"], d.get("group_instance_id"), d.get("client_id", ""), d.get("client_host", ""),
                   int(d.get("rebalance_timeout_ms", 60_000)), int(d.get("session_timeout_ms", 10_000)),
                   d.get("protocol_type", "consumer"), [(n, bytes.fromhex(m)) for n, m in d.get("protocols", [])],
                   bytes.fromhex(d.get("assignment", "")))


@dataclass
class Group:
    """One group (Kafka's GroupMetadata)."""

    group_id: str
    slot: int
    state: GroupState = GroupState.EMPTY
    protocol_type: str | None = None
    protocol: str | None = None
    generation: int = 0
    leader_id: str | None = None
    members: dict[str, Member] = field(default_factory=dict)
    #: KIP-394: member ids handed out with MEMBER_ID_REQUIRED, not joined yet -> their expiry timer
    pending_members: dict[str, asyncio.TimerHandle | None] = field(default_factory=dict)
    #: KIP-345: group.instance.id -> member id
    static_members: dict[str, str] = field(default_factory=dict)
    join_timer: asyncio.TimerHandle | None = None
    new_member_added: bool = False
    #: group.initial.rebalance.delay.ms is running (the join of a group that was Empty waits it out)
    initial_delay: bool = False
    #: when the current rebalance started (monotonic seconds), for the settle-time metric
    rebalance_started: float | None = None
    #: the group's latest metadata write: the next one waits for it, so the store ends with the newest state
    last_write: asyncio.Future[None] | None = None

    def is_(self, *states: GroupState) -> bool:
        return self.state in states

    async def writes_done(self) -> None:
        """Wait until the group's metadata write in flight (if any) is done, whatever its outcome."""
        if self.last_write is not None and not self.last_write.done():
            await asyncio.wait([self.last_write])

    def add(self, member: Member) -> None:
        if not self.members:
            self.protocol_type = member.protocol_type
        self.members[member.member_id] = member
        if member.group_instance_id is not None:
            self.static_members[member.group_instance_id] = member.member_id
        if self.leader_id is None:
            self.leader_id = member.member_id

    def remove(self, member_id: str) -> Member | None:
        member = self.members.pop(member_id, None)
        if member is not None and member.group_instance_id is not None:
            if self.static_members.get(member.group_instance_id) == member_id:
                del self.static_members[member.group_instance_id]
        if self.leader_id == member_id:
            joined = [m for m in self.members.values() if m.awaiting_join is not None]
            pool = joined or list(self.members.values())
            self.leader_id = pool[0].member_id if pool else None
        return member

    def all_joined(self) -> bool:
        return not self.pending_members and all(m.awaiting_join is not None for m in self.members.values())

    def candidate_protocols(self) -> list[str]:
        members = list(self.members.values())
        if not members:
            return []
        common = set(members[0].protocol_names())
        for m in members[1:]:
            common &= set(m.protocol_names())
        return [p for p in members[0].protocol_names() if p in common]

    def supports(self, protocol_type: str, names: list[str]) -> bool:
        if not self.members:
            return bool(protocol_type) and bool(names)
        return protocol_type == self.protocol_type and any(n in self.candidate_protocols() for n in names)

    def select_protocol(self) -> str | None:
        """Each member votes for its most preferred candidate; the most votes wins (ties: the earliest candidate)."""
        candidates = self.candidate_protocols()
        if not candidates:
            return None
        votes = dict.fromkeys(candidates, 0)
        for m in self.members.values():
            for name in m.protocol_names():
                if name in votes:
                    votes[name] += 1
                    break
        return max(candidates, key=lambda c: (votes[c], -candidates.index(c)))

    def max_rebalance_timeout_ms(self) -> int:
        return max((m.rebalance_timeout_ms for m in self.members.values()), default=0)

    def to_record(self, now_ms: int, state: GroupState | None = None) -> GroupRecord:
        return GroupRecord(self.group_id, self.slot, (state or self.state).value, self.protocol_type, self.protocol,
                           self.generation, self.leader_id, [m.to_dict() for m in self.members.values()], now_ms)

    @classmethod
    def from_record(cls, rec: GroupRecord) -> Group:
        g = cls(rec.group_id, rec.slot, generation=rec.generation, protocol_type=rec.protocol_type,
                protocol=rec.protocol)
        for d in rec.members:
            g.add(Member.from_dict(d))
        g.leader_id = rec.leader if rec.leader in g.members else g.leader_id
        g.state = GroupState.STABLE if g.members and rec.state != GroupState.DEAD.value else GroupState.EMPTY
        if not g.members:
            g.protocol = None
        return g
