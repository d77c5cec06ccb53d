"""Kafka error codes for tiercompact's exceptions (``kafka.errors`` classes give the numbers).

``error_code(exc)`` is what a handler puts in a partition's or topic's ``error_code`` when the
node raised ``exc``; anything unexpected is UNKNOWN_SERVER_ERROR (-1), as Kafka answers.
"""

from __future__ import annotations

import kafka.errors as ke

from log.errors import (
    CorruptRecordError,
    InvalidConfigError,
    InvalidRequestError,
    OffsetOutOfRangeError,
    PartitionBusyError,
    PartitionOfflineError,
    PolicyViolationError,
    TiercompactError,
    TopicCollisionError,
    TopicExistsError,
    UnknownTopicOrPartitionError,
)
from metadata.errors import FencedLeaderEpochError, MetadataStoreError
from remote.errors import RemoteStorageError

NONE = 0
UNKNOWN_SERVER_ERROR = -1
OFFSET_OUT_OF_RANGE = ke.OffsetOutOfRangeError.errno
CORRUPT_MESSAGE = ke.CorruptRecordError.errno
UNKNOWN_TOPIC_OR_PARTITION = ke.UnknownTopicOrPartitionError.errno
LEADER_NOT_AVAILABLE = ke.LeaderNotAvailableError.errno
NOT_LEADER_OR_FOLLOWER = ke.NotLeaderForPartitionError.errno
REQUEST_TIMED_OUT = ke.RequestTimedOutError.errno
INVALID_TOPIC_EXCEPTION = ke.InvalidTopicError.errno
TOPIC_ALREADY_EXISTS = ke.TopicAlreadyExistsError.errno
INVALID_PARTITIONS = ke.InvalidPartitionsError.errno
INVALID_REPLICATION_FACTOR = ke.InvalidReplicationFactorError.errno
INVALID_REQUEST = ke.InvalidRequestError.errno
INVALID_CONFIG = ke.InvalidConfigurationError.errno
KAFKA_STORAGE_ERROR = ke.KafkaStorageError.errno
FENCED_LEADER_EPOCH = ke.FencedLeaderEpochError.errno
UNKNOWN_LEADER_EPOCH = ke.UnknownLeaderEpochError.errno
INVALID_RECORD = ke.InvalidRecordError.errno
POLICY_VIOLATION = ke.PolicyViolationError.errno
UNSUPPORTED_VERSION = ke.UnsupportedVersionError.errno

# most specific first: the first class ``exc`` is an instance of gives the code
_CODES: list[tuple[type[BaseException], int]] = [
    (OffsetOutOfRangeError, OFFSET_OUT_OF_RANGE),
    (UnknownTopicOrPartitionError, UNKNOWN_TOPIC_OR_PARTITION),
    (TopicExistsError, TOPIC_ALREADY_EXISTS),
    (TopicCollisionError, INVALID_TOPIC_EXCEPTION),
    (InvalidConfigError, INVALID_CONFIG),
    (PartitionOfflineError, KAFKA_STORAGE_ERROR),
    # waited request.timeout.ms for a partition busy with background I/O: retriable
    (PartitionBusyError, REQUEST_TIMED_OUT),
    # a node that does not hold the current leader epoch does not lead the partition
    (FencedLeaderEpochError, NOT_LEADER_OR_FOLLOWER),
    (CorruptRecordError, CORRUPT_MESSAGE),
    # both are retriable for Kafka clients: the read is tried again
    (RemoteStorageError, KAFKA_STORAGE_ERROR),
    (MetadataStoreError, KAFKA_STORAGE_ERROR),
    (PolicyViolationError, POLICY_VIOLATION),
    (InvalidRequestError, INVALID_REQUEST),
]


def error_code(exc: BaseException) -> int:
    """The Kafka error code answering ``exc``."""
    for cls, code in _CODES:
        if isinstance(exc, cls):
            return code
    return UNKNOWN_SERVER_ERROR


def error_message(exc: BaseException) -> str | None:
    """The message a response's ``error_message`` field carries (ours for our errors)."""
    if isinstance(exc, TiercompactError):
        return str(exc)
    return f"{type(exc).__name__}: {exc}"
