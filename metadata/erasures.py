"""Erasure receipts: the state of an on-demand key erasure, kept in the metadata store.

An erasure covers some keys of one topic on some of its partitions. Its receipt has one
:class:`ErasureRecord` (what was asked, when, by which deadline) and one
:class:`ErasurePartition` per partition, each written only by that partition's leader (the
tiered ones fenced by its leader epoch), so two nodes never overwrite each other's
progress. The overall state is derived from the partitions' (:func:`overall_state`).
``detail`` is a JSON-able dict the service layer owns (per key: segments that held older
records, rounds, deleted objects and files, verification); this layer only stores it.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

PENDING = "pending"
VALUES_REMOVED = "values_removed"
COMPLETE = "complete"
FAILED = "failed"
STATES: tuple[str, ...] = (PENDING, VALUES_REMOVED, COMPLETE, FAILED)
#: progress order of the non-failed states
_ORDER = {PENDING: 0, VALUES_REMOVED: 1, COMPLETE: 2}


@dataclass(frozen=True, slots=True)
class ErasurePartition:
    """One partition's part of an erasure receipt."""

    partition: int
    state: str
    updated_ms: int
    detail: dict[str, Any] = field(default_factory=dict)
    error: str | None = None


@dataclass(frozen=True, slots=True)
class ErasureRecord:
    """An erasure as asked for, with its partitions' progress."""

    erasure_id: str
    topic: str
    created_ms: int
    deadline_ms: int
    keys: tuple[str, ...]  # as given in the request
    encoding: str
    partitions: tuple[ErasurePartition, ...] = ()

    @property
    def state(self) -> str:
        return overall_state([p.state for p in self.partitions])

    @property
    def error(self) -> str | None:
        errors = [f"partition {p.partition}: {p.error}" for p in self.partitions if p.error]
        return "; ".join(errors) or None


@dataclass(frozen=True, slots=True)
class ErasureConfirmation:
    """One node's word, under its own broker id, that it holds no local copy of a partition's
    listed segments and serves none (a receipt reaches values_removed once every registered node
    confirmed)."""

    partition: int
    broker_id: int
    confirmed_ms: int
    detail: dict[str, Any] = field(default_factory=dict)


def overall_state(states: list[str]) -> str:
    """failed if any partition failed, else the least advanced partition's state."""
    if not states:
        return PENDING
    if FAILED in states:
        return FAILED
    return min(states, key=lambda s: _ORDER.get(s, 0))


class ErasureReceiptStore(Protocol):
    """Where erasure receipts are kept: one record per erasure, one part per partition of it."""

    def create_erasure(self, record: ErasureRecord) -> None:
        """Store a new erasure with its partitions' initial parts, in one transaction."""

    def get_erasure(self, erasure_id: str) -> ErasureRecord | None:
        """The erasure with its partitions' parts, or None if there is none."""

    def list_erasures(self, *, topic: str | None = None, states: Sequence[str] | None = None,
                      limit: int = 1000) -> list[ErasureRecord]:
        """Erasures, newest first; ``states`` filters by any partition's state."""

    def update_erasure_partition(self, erasure_id: str, topic: str, part: ErasurePartition, *,
                                 leader_epoch: int | None = None) -> None:
        """Replace one partition's part of an erasure receipt.

        With ``leader_epoch`` the write is fenced in its transaction like any other write of
        the partition (a superseded leader's progress is rejected); ``None`` for partitions
        without remote storage, which only their own node writes.

        Raises:
            FencedLeaderEpochError: ``leader_epoch`` is not the partition's registered epoch.
        """
