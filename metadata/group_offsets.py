"""The group store contract: committed offsets, pending transactional offsets and group metadata, written under a coordinator epoch.

This is what Kafka keeps in __consumer_offsets: every write names the coordinator slot and the
(owner, epoch) that makes it (:class:`CoordinatorFence`) and fails with
``metadata.coordinators.CoordinatorFencedError`` when that coordinator was superseded. Offsets
committed inside a transaction (TxnOffsetCommit) stay pending per producer id until the
transaction's marker: a commit makes them the group's committed offsets, an abort drops them.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from log.types import TopicPartition


@dataclass(frozen=True, slots=True)
class CoordinatorFence:
    """The coordinator a write comes from: slot, owner broker and its epoch."""

    slot: int
    broker_id: int
    epoch: int


@dataclass(frozen=True, slots=True)
class CommittedOffset:
    """One partition's committed position (Kafka's OffsetAndMetadata)."""

    offset: int
    leader_epoch: int = -1
    metadata: str | None = ""
    commit_ms: int = 0


@dataclass
class GroupRecord:
    """A group's metadata as the coordinator persists it after each generation (Kafka's GroupMetadata value)."""

    group_id: str
    slot: int
    state: str
    protocol_type: str | None
    protocol: str | None
    generation: int
    leader: str | None
    #: one dict per member: member_id, group_instance_id, client_id, client_host, session_timeout_ms,
    #: rebalance_timeout_ms, protocols [[name, metadata hex]], assignment (hex)
    members: list[dict[str, Any]] = field(default_factory=list)
    updated_ms: int = 0


class GroupStore(ABC):
    """Group offsets and metadata on the metadata store (SQL: metadata/sql_group_offsets.py)."""

    @abstractmethod
    def commit(self, group_id: str, offsets: Mapping[TopicPartition, CommittedOffset],
               fence: CoordinatorFence) -> None:
        """Store the group's committed offsets (all or none)."""

    @abstractmethod
    def offsets(self, group_id: str, tps: Iterable[TopicPartition] | None = None) -> dict[TopicPartition,
                                                                                          CommittedOffset]:
        """The committed offsets of ``tps`` (None: every partition the group committed)."""

    @abstractmethod
    def delete_offsets(self, group_id: str, tps: Iterable[TopicPartition], fence: CoordinatorFence) -> None:
        """Forget the committed offsets of ``tps`` (OffsetDelete)."""

    @abstractmethod
    def save_group(self, record: GroupRecord, fence: CoordinatorFence) -> None:
        """Replace the group's metadata."""

    @abstractmethod
    def delete_group(self, group_id: str, fence: CoordinatorFence) -> None:
        """Forget the group: metadata, committed and pending offsets (DeleteGroups)."""

    @abstractmethod
    def groups(self, slots: Iterable[int] | None = None) -> dict[str, GroupRecord | None]:
        """Every group known in ``slots`` (None: all): its metadata, or None for a group with offsets only."""

    @abstractmethod
    def group(self, group_id: str) -> GroupRecord | None:
        """One group's metadata (None: none stored)."""

    @abstractmethod
    def add_txn_offsets(self, group_id: str, producer_id: int, producer_epoch: int,
                        offsets: Mapping[TopicPartition, CommittedOffset], fence: CoordinatorFence) -> None:
        """Offsets committed by an ongoing transaction: pending until :meth:`complete_txn`."""

    @abstractmethod
    def complete_txn(self, producer_id: int, commit: bool, group_ids: Iterable[str] | None = None) -> int:
        """The transaction's marker: commit makes its pending offsets committed, abort drops them; how many moved."""

    @abstractmethod
    def pending_txn_partitions(self, group_id: str) -> set[TopicPartition]:
        """Partitions of the group with offsets pending in an open transaction (OffsetFetch's require_stable)."""

    def close(self) -> None:  # noqa: B027 - optional
        """Release connections."""
