"""The transaction state contract: one durable record per transactional id (Kafka's __transaction_state), written under a coordinator epoch.

A record holds what Kafka's ``TransactionMetadata`` persists: the producer id and epoch (and the
previous ones, for a retried InitProducerId), the timeout, the state, the partitions and consumer
groups of the open transaction and its start time. Every write carries the writer's
(broker id, coordinator epoch) of the key's slot and is fenced against the slot's claim in the
same store transaction (:class:`metadata.coordinators.CoordinatorFencedError`), so a superseded
coordinator can never overwrite the state its successor loaded.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass, field

from log.types import TopicPartition


@dataclass
class TxnRecord:
    """The stored state of one transactional id (states are Kafka's names: Empty, Ongoing, PrepareCommit, ...)."""

    transactional_id: str
    producer_id: int
    producer_epoch: int
    timeout_ms: int
    state: str
    last_producer_id: int = -1
    last_producer_epoch: int = -1
    partitions: set[TopicPartition] = field(default_factory=set)
    groups: set[str] = field(default_factory=set)
    txn_start_ms: int = -1
    update_ms: int = -1

    def copy(self) -> TxnRecord:
        return TxnRecord(self.transactional_id, self.producer_id, self.producer_epoch, self.timeout_ms, self.state,
                         self.last_producer_id, self.last_producer_epoch, set(self.partitions), set(self.groups),
                         self.txn_start_ms, self.update_ms)


class TxnStateStore(ABC):
    """Transactional ids' records shared by every node on the metadata store (SQL: metadata/sql_txn_state.py)."""

    @abstractmethod
    def load_slot(self, slot: int) -> list[TxnRecord]:
        """Every record whose transactional id hashes to ``slot`` (a coordinator loading the slot)."""

    @abstractmethod
    def all(self) -> list[TxnRecord]:
        """Every record (operators' listing; any node may read)."""

    @abstractmethod
    def get(self, transactional_id: str) -> TxnRecord | None:
        """One record, or None."""

    @abstractmethod
    def put(self, record: TxnRecord, *, slot: int, broker_id: int, coordinator_epoch: int) -> None:
        """Write ``record`` if ``broker_id`` still holds ``slot`` at ``coordinator_epoch`` (else CoordinatorFencedError)."""

    @abstractmethod
    def delete(self, transactional_id: str, *, slot: int, broker_id: int, coordinator_epoch: int) -> None:
        """Forget a transactional id (Kafka's transactional.id.expiration.ms), fenced like :meth:`put`."""

    def close(self) -> None:  # noqa: B027 - optional
        """Release connections."""
