"""ClusterSyncStore: what lets nodes sharing a metadata store follow each other (partition change tokens, erasure confirmations)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

from log.types import TopicPartition
from metadata.erasures import ErasureConfirmation
from metadata.types import PartitionVersion


class ClusterSyncStore(Protocol):
    """Change tokens per partition, and each node's erasure confirmations."""

    def partition_versions(self, topics: Sequence[str] | None = None) -> dict[TopicPartition, PartitionVersion]:
        """Each partition's change token (renewed in the transaction of every write of the
        partition: publishes, segment states, erasure progress, leadership) and leader, in one
        query; ``topics`` limits it to those topics. A partition whose metadata was deleted is
        absent."""

    def confirm_erasure(self, erasure_id: str, confirmation: ErasureConfirmation) -> None:
        """Store (or replace) one node's confirmation, under its broker id, for one partition of
        an erasure: it holds no local copy of the listed segments and serves none."""

    def erasure_confirmations(self, erasure_id: str) -> list[ErasureConfirmation]:
        """Every node's confirmations of the erasure, by partition and broker id."""
