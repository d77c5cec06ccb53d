"""Small immutable value types shared by every layer."""

from __future__ import annotations

import enum
import re
from dataclasses import dataclass

from log.errors import InvalidRequestError

#: Kafka's legal topic name: [a-zA-Z0-9._-]{1,249}, and not "." or "..". Matched with
#: fullmatch: ``$`` would also match before a trailing newline and accept "abc\n".
_TOPIC_RE = re.compile(r"[a-zA-Z0-9._-]{1,249}")


def validate_topic_name(name: str) -> str:
    """Return ``name`` if it is a legal Kafka topic name, else raise InvalidRequestError.

    This is what keeps every partition directory inside the data dir.
    """
    if not isinstance(name, str) or not _TOPIC_RE.fullmatch(name) or name in (".", ".."):
        raise InvalidRequestError(
            f"invalid topic name {name!r}: use 1-249 characters from [a-zA-Z0-9._-], not '.' or '..'"
        )
    return name


def topic_names_collide(a: str, b: str) -> bool:
    """Whether two different topic names are the same once '.' is read as '_' (Kafka's ``Topic.hasCollision``:
    a metrics system that maps one to the other could not tell the two topics apart)."""
    return a != b and a.replace(".", "_") == b.replace(".", "_")


@dataclass(frozen=True, slots=True, order=True)
class TopicPartition:
    topic: str
    partition: int

    def __post_init__(self) -> None:
        validate_topic_name(self.topic)
        if not isinstance(self.partition, int) or self.partition < 0:
            raise InvalidRequestError(f"invalid partition {self.partition!r}: must be an integer >= 0")

    @property
    def dir_name(self) -> str:
        return f"{self.topic}-{self.partition}"

    @staticmethod
    def from_dir_name(name: str) -> TopicPartition:
        topic, _, part = name.rpartition("-")
        if not topic or not part.isdigit():
            raise InvalidRequestError(f"{name!r} is not a partition directory name (<topic>-<partition>)")
        return TopicPartition(topic, int(part))

    def __str__(self) -> str:
        return self.dir_name


@dataclass(frozen=True, slots=True, order=True)
class EpochEntry:
    """One line of leader-epoch-checkpoint: the first offset written under a leader epoch."""

    epoch: int
    start_offset: int

    def __post_init__(self) -> None:
        if self.epoch < 0 or self.start_offset < 0:
            raise InvalidRequestError(f"invalid epoch entry {self.epoch} {self.start_offset}")


class TimestampType(enum.IntEnum):
    CREATE_TIME = 0
    LOG_APPEND_TIME = 1


class CleanupPolicy(enum.Enum):
    COMPACT = "compact"
    DELETE = "delete"
