"""The project's error hierarchy.

Every error raised by tiercompact derives from :class:`TiercompactError`. Each layer
adds its own subtree in its own ``errors`` module; third-party errors (botocore,
SQLAlchemy, OSError from object stores) are translated at the adapter and never
cross it.

    TiercompactError
    ├── InvalidConfigError            a config key/value is out of range or inconsistent
    ├── InvalidRequestError           a caller asked for something malformed
    ├── CorruptRecordError            bytes on disk / in an object are not a valid batch
    │   └── CorruptIndexError         an index file is inconsistent with its segment
    ├── OffsetOutOfRangeError         read below log start or above log end
    ├── LogSegmentOffsetOverflowError an offset does not fit a segment's 32-bit relative range
    ├── InvalidRecordError            a produced batch breaks a record rule (Kafka's INVALID_RECORD)
    │   ├── InvalidTimestampError     a record timestamp outside message.timestamp.difference.max.ms
    │   └── RecordTooLargeError       a batch above max.message.bytes
    ├── InvalidProducerEpochError / OutOfOrderSequenceError / InvalidTxnStateError  producer state
    │   (UnknownProducerIdError is an OutOfOrderSequenceError, as in Kafka)
    ├── UnknownTopicOrPartitionError  no such topic / partition
    ├── TopicExistsError
    ├── DataDirInUseError             another process holds the data dir's lock
    ├── PartitionOfflineError         a partition's files could not be loaded; it serves nothing
    ├── PartitionBusyError            a request waited its bound for a partition busy with background I/O
    └── (metadata, remote, cleaner subtrees live in their own packages)
"""

from __future__ import annotations


class TiercompactError(Exception):
    """Root of every error tiercompact raises on purpose."""

    #: whether retrying the same operation may succeed
    retriable: bool = False


class InvalidConfigError(TiercompactError):
    """A configuration value is invalid; the message names key, value and allowed range."""


class InvalidRequestError(TiercompactError):
    """A request is malformed (bad record, bad batch, bad argument)."""


class CorruptRecordError(TiercompactError):
    """Bytes that should hold a record batch do not.

    Carries the source (file path or object name) and byte position when known.
    """

    def __init__(self, message: str, *, source: str | None = None, position: int | None = None) -> None:
        self.source = source
        self.position = position
        where = ""
        if source is not None:
            where = f" in {source}"
            if position is not None:
                where += f" at byte {position}"
        elif position is not None:
            where = f" at byte {position}"
        super().__init__(f"{message}{where}")


class CorruptIndexError(CorruptRecordError):
    """An index file is inconsistent; it can be rebuilt from its segment."""


class OffsetOutOfRangeError(TiercompactError):
    """A read asked for an offset outside [log start offset, log end offset]."""


class PolicyViolationError(InvalidRequestError):
    """The topic's configuration forbids the operation (Kafka's PolicyViolationException): records
    of a topic whose cleanup.policy lacks ``delete`` cannot be deleted by offset."""


class LogSegmentOffsetOverflowError(TiercompactError):
    """An offset cannot be stored relative to its segment's base offset (> 2^31-1 apart)."""


class InvalidRecordError(InvalidRequestError):
    """A produced batch breaks a rule on its records (Kafka's InvalidRecordException).

    ``record_errors`` lists ``(batch_index, message)`` of the records at fault, what Kafka's
    ProduceResponse v8+ returns per record; empty when the whole batch is at fault.
    """

    def __init__(self, message: str, record_errors: list[tuple[int, str]] | None = None) -> None:
        super().__init__(message)
        self.record_errors = list(record_errors or [])


class InvalidTimestampError(InvalidRecordError):
    """A record's timestamp is too far from the broker clock (Kafka's InvalidTimestampException)."""


class RecordTooLargeError(InvalidRecordError):
    """A batch is larger than the topic's max.message.bytes (Kafka's RecordBatchTooLargeException)."""


class InvalidProducerEpochError(TiercompactError):
    """A producer wrote with an epoch older than the one the log knows (a fenced producer)."""


class OutOfOrderSequenceError(TiercompactError):
    """A producer batch's sequence number does not follow the last one written."""


class UnknownProducerIdError(OutOfOrderSequenceError):
    """A producer the log does not know sent a sequence other than 0: its state was lost
    (expired or removed with its batches), Kafka's UnknownProducerIdException."""


class InvalidTxnStateError(TiercompactError):
    """A transaction marker does not match an open transaction, or similar."""


class UnknownTopicOrPartitionError(TiercompactError):
    """No such topic or partition."""


class TopicExistsError(TiercompactError):
    """A topic with this name already exists."""


class TopicCollisionError(TiercompactError):
    """The name differs from an existing topic's only by '.' against '_' (Kafka's InvalidTopicException: their
    metric names would be the same)."""

    def __init__(self, name: str, existing: str) -> None:
        super().__init__(f"Topic '{name}' collides with existing topic: {existing}")


class DataDirInUseError(TiercompactError):
    """Another process holds the data dir's lock file."""


class PartitionOfflineError(TiercompactError):
    """A partition is offline: its files could not be opened without losing data.

    The message names the file, what is wrong with it and what to do; the rest of the node
    keeps serving.
    """


class PartitionBusyError(TiercompactError):
    """A request waited ``request.timeout.ms`` for a partition that background work (a copy,
    retention, a deferred delete on a slow object store) holds: nothing was done. Always
    retriable (Kafka's REQUEST_TIMED_OUT; HTTP 503 with Retry-After)."""

    retriable = True

    def __init__(self, message: str, *, retry_after_s: int = 1) -> None:
        super().__init__(message)
        self.retry_after_s = retry_after_s


class SimulatedCrash(Exception):  # noqa: N818 - raised only by tests' crash hooks
    """Raised by a crash hook to stop an operation half-way, as a power cut would."""
