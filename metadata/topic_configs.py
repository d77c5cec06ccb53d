"""Topic configs as the metadata store keeps them, shared by every node and Spark job: the
value type, the store protocol and the protocol of the topic deletions it remembers."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any, Protocol


@dataclass(frozen=True, slots=True)
class StoredTopic:
    """A topic's partition count and config overrides, as the metadata store holds them.

    ``config`` holds only the overrides (what ``POST /v1/topics`` or ``PATCH .../config`` set),
    with JSON-representable values: a reader applies them over the defaults of its own version.
    """

    name: str
    partitions: int
    config: dict[str, Any] = field(default_factory=dict)
    updated_ms: int = 0

    def config_json(self) -> str:
        return json.dumps(self.config, sort_keys=True)

    @staticmethod
    def from_row(name: str, partitions: int, config_json: str, updated_ms: int) -> StoredTopic:
        return StoredTopic(name, int(partitions), dict(json.loads(config_json)), int(updated_ms))


class TopicConfigStore(Protocol):
    """Where topic configs are shared (a node keeps a local copy as a cache)."""

    def put_topic_config(self, topic: StoredTopic) -> None:
        """Create or replace a topic's partition count and config overrides."""

    def create_topic_config(self, topic: StoredTopic) -> StoredTopic | None:
        """Store a new topic, atomically across the nodes sharing the store: None when it was stored; the stored
        row when a topic of that name is there already (nothing written); TopicCollisionError when another
        topic's name collides with it (:func:`log.types.topic_names_collide`; nothing written)."""

    def get_topic_config(self, name: str) -> StoredTopic | None:
        """The topic's stored config, or None if the store holds none."""

    def list_topic_configs(self) -> list[StoredTopic]:
        """Every stored topic, by name."""


class TopicDeletionStore(Protocol):
    """Where topic deletions are remembered, so a deleted topic stays deleted on every node."""

    def record_topic_deletion(self, name: str, *, broker_id: int) -> None:
        """The topic was deleted (by ``broker_id``): forget its config and every consumer group's
        committed offsets of it (Kafka's GroupMetadataManager.cleanupGroupMetadata), and remember the
        deletion, so a stale local copy on any node is never registered, uploaded or published again.
        Creating a topic of that name again (``put_topic_config`` of a new row) forgets it."""

    def deleted_topics(self) -> dict[str, int]:
        """Every deleted topic not created again, with the time it was deleted."""

    def topic_deleted_ms(self, name: str) -> int | None:
        """When ``name`` was deleted, or None if it was not (or was created again)."""
