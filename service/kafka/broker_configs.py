"""What DescribeConfigs lists for a broker resource: this node's settings and its topic defaults, under Kafka's names.

Kafka answers a broker's describe with every broker config. Here that is:

* the node's own settings under the broker names Kafka gives them (``broker.id``, ``advertised.listeners``,
  ``auto.create.topics.enable``, ``num.partitions``, ``num.io.threads``, ``socket.request.max.bytes``,
  ``max.connections``, ``connections.max.idle.ms``), and what one copy of the data fixes
  (``default.replication.factor`` and ``min.insync.replicas`` 1);
* the default of every topic config under its broker synonym (Kafka's ``LogConfig`` synonyms:
  ``segment.bytes`` is ``log.segment.bytes``, ``max.message.bytes`` is ``message.max.bytes``, ...).

Every entry is read-only: the node's settings are ``tiercompact serve`` options (AlterConfigs refuses broker
resources), so a set value is STATIC_BROKER_CONFIG and one left at its default DEFAULT_CONFIG. As Kafka's broker,
an empty resource name describes the cluster-wide dynamic defaults (none here) and another broker's id is
INVALID_REQUEST: clients send a broker's describe to that broker.
"""

from __future__ import annotations

from typing import Any

from log.errors import InvalidRequestError
from service.config import ServiceConfig

# DescribeConfigsResponse.ConfigSource
STATIC_BROKER_CONFIG = 4
DEFAULT_CONFIG = 5
# DescribeConfigsResponse.ConfigType
_BOOLEAN, _INT, _LONG, _LIST = 1, 3, 5, 7

#: topic config -> the broker config that holds its default (Kafka's LogConfig synonyms, the ones this node has)
BROKER_SYNONYMS = {
    "cleanup.policy": "log.cleanup.policy",
    "compression.type": "compression.type",
    "delete.retention.ms": "log.cleaner.delete.retention.ms",
    "file.delete.delay.ms": "log.segment.delete.delay.ms",
    "flush.messages": "log.flush.interval.messages",
    "flush.ms": "log.flush.interval.ms",
    "index.interval.bytes": "log.index.interval.bytes",
    "local.retention.bytes": "log.local.retention.bytes",
    "local.retention.ms": "log.local.retention.ms",
    "max.compaction.lag.ms": "log.cleaner.max.compaction.lag.ms",
    "max.message.bytes": "message.max.bytes",
    "message.timestamp.difference.max.ms": "log.message.timestamp.difference.max.ms",
    "message.timestamp.before.max.ms": "log.message.timestamp.before.max.ms",
    "message.timestamp.after.max.ms": "log.message.timestamp.after.max.ms",
    "segment.jitter.ms": "log.roll.jitter.ms",
    "compression.gzip.level": "compression.gzip.level",
    "compression.lz4.level": "compression.lz4.level",
    "compression.zstd.level": "compression.zstd.level",
    "preallocate": "log.preallocate",
    "unclean.leader.election.enable": "unclean.leader.election.enable",
    "message.downconversion.enable": "log.message.downconversion.enable",
    "message.timestamp.type": "log.message.timestamp.type",
    "min.cleanable.dirty.ratio": "log.cleaner.min.cleanable.ratio",
    "min.compaction.lag.ms": "log.cleaner.min.compaction.lag.ms",
    "producer.id.expiration.ms": "producer.id.expiration.ms",
    "retention.bytes": "log.retention.bytes",
    "retention.ms": "log.retention.ms",
    "segment.bytes": "log.segment.bytes",
    "segment.index.bytes": "log.index.size.max.bytes",
    "segment.ms": "log.roll.ms",
}

#: (broker config, the ServiceConfig field that holds it, its config type)
_NODE = (
    ("auto.create.topics.enable", "auto_create_topics_enable", _BOOLEAN),
    ("num.partitions", "num_partitions", _INT),
    ("num.io.threads", "num_io_threads", _INT),
    ("socket.request.max.bytes", "socket_request_max_bytes", _INT),
    ("max.connections", "max_connections", _INT),
    ("connections.max.idle.ms", "connections_max_idle_ms", _LONG),
)


def _protocol(listener_config: Any) -> str:
    """The listener's Kafka security protocol."""
    tls = getattr(listener_config, "ssl_context", None) is not None
    if getattr(listener_config, "authenticator", None) is not None:
        return "SASL_SSL" if tls else "SASL_PLAINTEXT"
    return "SSL" if tls else "PLAINTEXT"


def broker_config_entries(node: Any, cluster: Any, listener_config: Any, resource_name: str,
                          topic_defaults: list[tuple[str, str, int]]) -> list[tuple[str, str, int, int]]:
    """``(name, value, config source, config type)`` for the broker resource ``resource_name``, sorted by name;
    ``topic_defaults`` are the topic configs' ``(name, default value, config type)``, listed under their synonyms.

    Raises:
        InvalidRequestError: the name is neither empty nor this node's broker id.
    """
    if resource_name == "":
        return []  # the cluster-wide dynamic broker defaults: none (the settings are per node, static)
    if resource_name != str(cluster.broker_id):
        raise InvalidRequestError(f"Unexpected broker id, expected {cluster.broker_id} or empty string, but received "
                                  f"{resource_name}")
    defaults = ServiceConfig.model_fields
    settings = node.config
    out: list[tuple[str, str, int, int]] = [
        ("broker.id", str(cluster.broker_id), STATIC_BROKER_CONFIG, _INT),
        ("node.id", str(cluster.broker_id), STATIC_BROKER_CONFIG, _INT),
        ("advertised.listeners", f"{_protocol(listener_config)}://{cluster.host}:{cluster.port}",
         STATIC_BROKER_CONFIG, _LIST),
        ("default.replication.factor", "1", DEFAULT_CONFIG, _INT),
        ("min.insync.replicas", "1", DEFAULT_CONFIG, _INT),
    ]
    for name, field, type_ in _NODE:
        value = getattr(settings, field, defaults[field].default)
        source = DEFAULT_CONFIG if value == defaults[field].default else STATIC_BROKER_CONFIG
        out.append((name, str(value).lower() if type_ == _BOOLEAN else str(value), source, type_))
    out += [(BROKER_SYNONYMS[key], value, DEFAULT_CONFIG, type_) for key, value, type_ in topic_defaults
            if key in BROKER_SYNONYMS]
    return sorted(out)
