"""LogStartOffsetStore: the log start offset DeleteRecords set for a tiered partition, shared by the nodes.

The leader writes it fenced by its leader epoch (a zombie moves nothing); a node taking the lead
reads it before it serves the partition, so a client never reads again below a start another
node moved. Partitions that are not tiered keep theirs only in their local log.
"""

from __future__ import annotations

from typing import Protocol

from log.types import TopicPartition


class LogStartOffsetStore(Protocol):
    """Per partition, the offset records below which DeleteRecords deleted."""

    def advance_log_start_offset(self, tp: TopicPartition, offset: int, *, leader_epoch: int) -> int:
        """Raise ``tp``'s log start offset over both tiers to ``offset`` (never lower it), fenced
        by ``leader_epoch``; returns the stored one.

        Raises:
            FencedLeaderEpochError: ``leader_epoch`` is not the registered one.
            InvalidRequestError: ``offset`` is negative.
        """

    def log_start_offset(self, tp: TopicPartition) -> int:
        """The log start offset DeleteRecords set for ``tp`` (0 when never)."""
