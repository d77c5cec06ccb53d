"""The cleaner's errors.

    TiercompactError (log.errors)
    └── LogCleaningError              cleaning a partition failed; it is marked uncleanable
        ├── LogCleaningAbortedError   the round was aborted on purpose (pause, shutdown): control flow
        ├── ThreadShutdownError       the cleaner thread is stopping (a kind of abort)
        ├── OffsetMapFullError        a new key did not fit the offset map (a bug if it escapes)
        └── CleanerStateError         an illegal cleaning-state transition (resume without pause, ...)
    ErasureNotFoundError              no such erasure
    ErasureRefusedError               an erasure that cannot be done as asked (nothing was appended)

``InvalidConfigError`` (log.errors) is raised for a bad CleanerConfig.
"""

from __future__ import annotations

from log.errors import TiercompactError
from log.types import TopicPartition


class LogCleaningError(TiercompactError):
    """Cleaning ``topic_partition`` failed; ``__cause__`` holds the original error."""

    def __init__(self, message: str, topic_partition: TopicPartition | None = None) -> None:
        self.topic_partition = topic_partition
        super().__init__(message if topic_partition is None else f"{topic_partition}: {message}")


class LogCleaningAbortedError(LogCleaningError):
    """The round stopped because the partition was paused/aborted or the cleaner is shutting down."""

    retriable = True


class ThreadShutdownError(LogCleaningAbortedError):
    """The cleaner thread was asked to stop in the middle of a round."""


class OffsetMapFullError(LogCleaningError):
    """A new key was put into an offset map whose slots are all taken."""


class CleanerStateError(LogCleaningError):
    """A cleaning-state transition that the state machine does not allow (Kafka's IllegalStateException)."""


class InsufficientDiskError(TiercompactError):
    """Free disk cannot hold one remote segment within the tiered chunk bound (free / 3).

    Retriable: the round is tried again after the backoff, once space was freed.
    """

    retriable = True


class ErasureNotFoundError(TiercompactError):
    """No erasure with that id (GET /v1/erasures/{id})."""


class ErasureRefusedError(TiercompactError):
    """An erasure that cannot be done as asked: the topic is not compacted, or its deadline
    cannot be met (min.compaction.lag.ms); nothing was appended."""
