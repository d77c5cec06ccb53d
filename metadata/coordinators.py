"""The coordinator claims contract: each coordinator slot (a __consumer_offsets / __transaction_state partition) has one owner and an epoch.

A slot of a kind (``group`` or ``txn``) is claimed by compare-and-swap on its epoch: a claim
succeeds only against the epoch the claimant last read, and bumps it, so two nodes never hold
the same slot at once. Every write a coordinator makes for a key of the slot is checked against
(owner, epoch) in the same store transaction (:class:`CoordinatorFencedError` when superseded),
which is Kafka's coordinator epoch fencing of __consumer_offsets / __transaction_state writes.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass

from metadata.errors import MetadataError

GROUP = "group"
TRANSACTION = "txn"
#: the broker id of a released slot (its epoch stays: the next claim bumps it)
NO_OWNER = -1


class CoordinatorFencedError(MetadataError):
    """A coordinator write under an epoch that is no longer the slot's (another node coordinates it now)."""


@dataclass(frozen=True, slots=True)
class CoordinatorClaim:
    """Who coordinates one slot of one kind, since when, under which epoch."""

    kind: str
    slot: int
    broker_id: int
    #: the owner's process incarnation (the cluster registry's): a restarted owner's old claims are dead
    incarnation: str
    epoch: int
    claimed_ms: int

    @property
    def released(self) -> bool:
        return self.broker_id == NO_OWNER


class CoordinatorStore(ABC):
    """Slot claims shared by every node on the metadata store (SQL: metadata/sql_coordinators.py)."""

    @abstractmethod
    def claims(self, kind: str) -> dict[int, CoordinatorClaim]:
        """Every slot of ``kind`` that was ever claimed, by slot."""

    @abstractmethod
    def claim(self, kind: str, slot: int, broker_id: int, incarnation: str, now_ms: int, *,
              expected_epoch: int | None) -> CoordinatorClaim | None:
        """Take the slot if its epoch is still ``expected_epoch`` (None: it was never claimed); the new claim, or None."""

    def claim_many(self, kind: str, wanted: dict[int, int | None], broker_id: int, incarnation: str,
                   now_ms: int) -> list[CoordinatorClaim]:
        """:meth:`claim` for several slots (slot -> expected epoch) at once; the claims that succeeded."""
        out = []
        for slot, expected in wanted.items():
            c = self.claim(kind, slot, broker_id, incarnation, now_ms, expected_epoch=expected)
            if c is not None:
                out.append(c)
        return out

    @abstractmethod
    def release(self, kind: str, slot: int, broker_id: int, epoch: int) -> bool:
        """Give the slot up (a hand-off to its preferred owner) if ``broker_id`` still holds it at ``epoch``."""

    def release_all(self, kind: str, broker_id: int, incarnation: str) -> int:
        """Give up every slot of ``kind`` this incarnation holds (a clean stop); how many."""
        n = 0
        for c in self.claims(kind).values():
            if c.broker_id == broker_id and c.incarnation == incarnation:
                n += self.release(kind, c.slot, broker_id, c.epoch)
        return n

    @abstractmethod
    def holds(self, kind: str, slot: int, broker_id: int, epoch: int) -> bool:
        """Whether ``broker_id`` holds the slot at ``epoch`` right now."""

    def close(self) -> None:  # noqa: B027 - optional
        """Release connections."""
