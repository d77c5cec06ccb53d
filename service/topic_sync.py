"""Keeps a node's topic registry (the data dir's topics.json, a cache) consistent with the topic
configs in the metadata store, which every node and Spark job shares, and to its topic deletions; and
words the refusal of a topic deletion a node that does not lead the topic was asked for."""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Mapping
from typing import Any, Protocol

from log.errors import TiercompactError, TopicCollisionError, TopicExistsError
from log.log_manager import LogManager, Topic
from log.types import topic_names_collide
from metadata.cluster import ClusterRegistry
from metadata.errors import FencedLeaderEpochError
from metadata.topic_configs import StoredTopic, TopicConfigStore, TopicDeletionStore
from remote.log_manager import COUNTED_BY_RLM

logger = logging.getLogger(__name__)


def stored(topic: Topic) -> StoredTopic:
    return StoredTopic(topic.name, topic.partitions, dict(topic.config.overrides))


class SharedTopics(TopicConfigStore, TopicDeletionStore, Protocol):
    """The topic configs and the topic deletions of the metadata store."""


def sync_at_start(log_manager: LogManager, topics: SharedTopics) -> dict[str, list[str]]:
    """At node start: learn the store's topics this node lacks, publish this node's topics the
    store lacks (a data dir from before the store kept topic configs), and take the store's config
    where both have the topic and they differ (another node's PATCH). A local topic the store
    records as deleted (deleted on another node while this one was down or followed it) is a
    stale copy: it is dropped, never published again. Returns what changed, by kind."""
    out: dict[str, list[str]] = {"learned": [], "published": [], "updated": [], "dropped": []}
    shared = {t.name: t for t in topics.list_topic_configs()}
    deleted = topics.deleted_topics()
    local = {t.name: t for t in log_manager.topics()}
    for name in [n for n in local if n in deleted and n not in shared]:
        log_manager.delete_topic(name)
        del local[name]
        out["dropped"].append(name)
        logger.warning("topic %s was deleted at %d (the metadata store records it): this node's stale copy was "
                       "dropped", name, deleted[name])
    for name, s in shared.items():
        mine = local.get(name)
        try:
            if mine is None:
                log_manager.create_topic(name, s.partitions, s.config)
                out["learned"].append(name)
            elif dict(mine.config.overrides) != s.config:
                changes: dict[str, Any] = {k: None for k in mine.config.overrides if k not in s.config}
                changes.update(s.config)
                log_manager.alter_config(name, changes)
                out["updated"].append(name)
            if mine is not None and mine.partitions != s.partitions:
                logger.warning("topic %s has %d partitions here and %d in the metadata store; the local count is "
                               "used", name, mine.partitions, s.partitions)
        except TiercompactError as e:
            logger.warning("topic %s from the metadata store could not be applied here: %s", name, e)
    for name, mine in local.items():
        if name not in shared:
            topics.put_topic_config(stored(mine))
            out["published"].append(name)
    if any(out.values()):
        logger.info("topic configs synced with the metadata store: %s", {k: v for k, v in out.items() if v})
    return out


def check_no_collision(log_manager: LogManager, name: str) -> None:
    """TopicCollisionError if ``name`` collides with a topic this node has ('.' against '_', as Kafka)."""
    for other in log_manager.topics():
        if topic_names_collide(other.name, name):
            raise TopicCollisionError(name, other.name)


def create_topic(log_manager: LogManager, topics: TopicConfigStore, name: str, partitions: int,
                 config: Mapping[str, Any] | None, *, join: bool = True) -> Topic:
    """Create locally, then store (atomically across nodes: TopicCollisionError for a name that differs from an
    existing topic's only by '.' against '_', as Kafka). A topic another node already stored is joined (``join``,
    the HTTP API's create on each node) only with the same partition count and config (its data is shared);
    otherwise, or without ``join`` (Kafka's CreateTopics: a topic is the cluster's), it already exists."""
    check_no_collision(log_manager, name)
    if not join and topics.get_topic_config(name) is not None:
        raise TopicExistsError(f"Topic '{name}' already exists.")
    topic = log_manager.create_topic(name, partitions, config)
    try:
        existing = topics.create_topic_config(stored(topic))
    except BaseException:
        log_manager.delete_topic(name)  # not half created: the store is the shared truth
        raise
    if existing is not None:
        if not join:
            log_manager.delete_topic(name)
            raise TopicExistsError(f"Topic '{name}' already exists.")
        if existing.partitions != topic.partitions or existing.config != dict(topic.config.overrides):
            log_manager.delete_topic(name)
            raise TopicExistsError(f"topic {name!r} already exists in the shared metadata store with "
                                   f"{existing.partitions} partitions and config {existing.config}; create it with "
                                   f"the same, or restart this node to learn it")
    return topic


def alter_config(log_manager: LogManager, topics: TopicConfigStore, name: str,
                 changes: Mapping[str, Any]) -> Topic:
    """PATCH: both copies get the merged overrides (the store's write after the local one, which
    validates; a failed store write puts the local copy back)."""
    before = dict(log_manager.topic(name).config.overrides)
    topic = log_manager.alter_config(name, changes)
    try:
        topics.put_topic_config(stored(topic))
    except BaseException:
        undo: dict[str, Any] = {k: None for k in topic.config.overrides if k not in before}
        undo.update(before)
        log_manager.alter_config(name, undo)
        raise
    return topic


def add_partitions(log_manager: LogManager, topics: TopicConfigStore, name: str, count: int) -> Topic:
    """Grow a topic locally, then store the new count (Kafka's CreatePartitions)."""
    topic = log_manager.add_partitions(name, count)
    topics.put_topic_config(stored(topic))
    return topic


def not_deleted(e: FencedLeaderEpochError, topic: str) -> FencedLeaderEpochError:
    """The refusal of a topic deletion, saying that nothing was deleted and what to do."""
    leader = f"broker {e.current_broker}" if e.current_broker is not None else "the leader"
    out = FencedLeaderEpochError(
        e.topic_partition, e.attempted_epoch, e.current_epoch, e.current_broker, f"deletion of topic {topic!r}",
        detail=f"{e} -- topic {topic!r} was NOT deleted: nothing changed, locally or remotely. Send "
               f"DELETE /v1/topics/{topic} to {leader}, which deletes the remote data and metadata; to drop "
               f"only this node's local copy (remote data and metadata stay with the leader) send "
               f"DELETE /v1/topics/{topic}?scope=local")
    setattr(out, COUNTED_BY_RLM, getattr(e, COUNTED_BY_RLM, False))
    return out


def forget_topic(topics: TopicDeletionStore, cluster: ClusterRegistry, name: str, broker_id: int,
                 listeners: Iterable[Callable[[str], None]] = ()) -> None:
    """After a topic's deletion everywhere (by ``broker_id``): record it, which drops its shared config and the
    groups' offsets of it and keeps it deleted on every node; drop its Kafka topic id (a topic created again under
    the name is another topic, with a new id); then tell ``listeners``."""
    topics.record_topic_deletion(name, broker_id=broker_id)
    cluster.forget_topic_id(name)
    for fn in list(listeners):
        fn(name)
