"""The node's narrow ports: the few things a service running beside the cleaner may ask a node for.

A service (the erasure workflow, the Spark offload) is given these small protocols instead of
the whole node, so it names exactly what it uses and can be driven, in tests, by a stand-in.
The node implements all of them; the HTTP routes and the Kafka listener are front doors over
the same methods. The RemoteLogManager is the :class:`Leadership` port as it stands, and
:class:`LogPartitions` the :class:`Partitions` port over a LogManager.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Protocol

from log.errors import TiercompactError
from log.local_log import AppendResult, LocalLog, RecordSpec
from log.log_manager import LogManager, Topic
from log.types import TopicPartition, validate_topic_name


class Partitions(Protocol):
    """Topics and partition logs by name (unknown ones raise UnknownTopicOrPartitionError)."""

    def topic(self, name: str) -> Topic: ...

    def log(self, topic: str, partition: int) -> LocalLog: ...


class Produce(Protocol):
    """Appends through the node's produce path (leadership and request limits checked)."""

    def produce(self, topic: str, partition: int, records: Sequence[RecordSpec], *, compression: str = "none",
                producer_id: int = -1, producer_epoch: int = -1, base_sequence: int = -1,
                transactional: bool = False) -> AppendResult: ...

    def check_leader_for_produce(self, log: LocalLog) -> None: ...


class Clean(Protocol):
    """One cleaning round on a partition now (the admin API's clean)."""

    def clean(self, topic: str, partition: int) -> dict[str, Any]: ...


class Leadership(Protocol):
    """This node's leadership of tiered partitions, as the metadata store records it."""

    def is_leader(self, tp: TopicPartition) -> bool: ...

    def leader_epoch(self, tp: TopicPartition, action: str = ...) -> int: ...

    def forget_leader(self, tp: TopicPartition) -> None: ...


class ErrorSink(Protocol):
    """Where a service reports an error it handled, so metrics count it (fenced operations)."""

    def note_error(self, exc: TiercompactError) -> None: ...


class LogPartitions:
    """The :class:`Partitions` port over a LogManager (topic names validated first)."""

    #: the TopicPartitions made for :meth:`log` kept, at most this many (a name is validated once, not per request)
    MAX_NAMES = 100_000

    def __init__(self, log_manager: LogManager) -> None:
        self.log_manager = log_manager
        self._names: dict[tuple[str, int], TopicPartition] = {}

    def topic(self, name: str) -> Topic:
        validate_topic_name(name)
        return self.log_manager.topic(name)

    def log(self, topic: str, partition: int) -> LocalLog:
        tp = self._names.get((topic, partition))
        if tp is None:
            tp = TopicPartition(topic, partition)  # which validates the name
            if len(self._names) >= self.MAX_NAMES:
                self._names.clear()
            self._names[(topic, partition)] = tp
        return self.log_manager.get_log(tp)
