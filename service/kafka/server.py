"""The Kafka front door of one node: the listener, its TLS and SASL, and the node's cluster membership, from ServiceConfig."""

from __future__ import annotations

import contextlib
import logging
import socket
import ssl
from typing import TYPE_CHECKING, Any

from service.kafka.durability import group_sync_for
from service.kafka.listener import KafkaListener, KafkaListenerConfig
from service.kafka.registry import BrokerInfo

if TYPE_CHECKING:
    from service.config import ServiceConfig
    from service.node import Node

logger = logging.getLogger(__name__)

_WILDCARDS = ("", "0.0.0.0", "::")


def tls_context(cert: Any, key: Any) -> ssl.SSLContext:
    """A server-side TLS context (TLS 1.2+) from a PEM chain and key."""
    ctx = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    ctx.minimum_version = ssl.TLSVersion.TLSv1_2
    ctx.load_cert_chain(str(cert), str(key))
    return ctx


def make_authenticator(config: ServiceConfig, store: Any = None) -> Any:
    """The SASL authenticator when the node has credentials (a users file or the HTTP token), else None; ``store``
    holds the SCRAM credentials AlterUserScramCredentials wrote (the node's metadata store)."""
    if config.sasl_users is None and config.token is None:
        return None
    from service.kafka.sasl import Authenticator

    return Authenticator.from_config(config, store)


class KafkaService:
    """``start()`` binds the listener and registers the node in the cluster registry; ``stop()`` undoes both."""

    def __init__(self, node: Node, config: ServiceConfig, *, metrics: Any = None) -> None:
        self.node = node
        self.config = config
        host = config.kafka_host or config.host
        adv_host: str | None = None
        adv_port: int | None = None
        if config.advertised_listener:
            h, _sep, p = config.advertised_listener.rpartition(":")
            adv_host, adv_port = h.strip("[]"), int(p)
        elif host not in _WILDCARDS:
            adv_host = host
        else:
            adv_host = socket.getfqdn()
        self.listener_config = KafkaListenerConfig(
            host=host, port=config.kafka_port, advertised_host=adv_host, advertised_port=adv_port,
            max_request_bytes=config.socket_request_max_bytes, max_connections=config.max_connections,
            idle_ms=config.connections_max_idle_ms, worker_threads=config.num_io_threads,
            ssl_context=tls_context(config.kafka_tls_cert, config.kafka_tls_key) if config.kafka_tls_cert else None,
            authenticator=make_authenticator(config, node.metadata))
        if metrics is None:
            from service.kafka.metrics import KafkaMetrics

            metrics = KafkaMetrics()
        self.metrics = metrics
        self.listener = KafkaListener(node, self.listener_config, metrics=metrics)
        metrics.connections_fn = lambda: self.listener.connections
        metrics.syncfs_fallbacks_fn = lambda: group_sync_for(node).dirty_fallbacks
        self.membership: Any = None

    def start(self) -> KafkaService:
        from service.kafka.cluster import ClusterMembership

        self.listener.start()
        self.node.metric_collectors.append(self.metrics)
        try:
            cluster = self.listener.cluster
            self.membership = ClusterMembership(
                self.node.metadata, BrokerInfo(cluster.broker_id, cluster.host, cluster.port),
                heartbeat_ms=self.config.broker_heartbeat_interval_ms,
                session_timeout_ms=self.config.broker_session_timeout_ms, clock=self.node.clock,
                directory_id=self.node.log_manager.directory_id).start()
            cluster.membership = self.membership
            self.node.topic_deleted_listeners.append(self.membership.drop_cached_topic_id)
            from service.kafka.coordinators import Coordinators

            self.listener.coordinators = Coordinators(self.node, self.listener, self.membership).start()
        except BaseException:
            if self.membership is not None:
                self.membership.stop()
                self.membership = None
            self.listener.stop()
            raise
        logger.info("Kafka listener of broker %d on %s:%d, advertised as %s:%d%s%s", cluster.broker_id,
                    self.listener_config.host, self.listener.port, cluster.host, cluster.port,
                    " (TLS)" if self.listener_config.ssl_context else "",
                    " (SASL required)" if self.listener_config.authenticator else "")
        return self

    @property
    def port(self) -> int:
        return self.listener.port

    def stop(self) -> None:
        coordinators = getattr(self.listener, "coordinators", None)
        if coordinators is not None:  # hand the slots back while the registry still lists this node
            coordinators.stop()
            self.listener.coordinators = None
        self.listener.stop()
        if self.metrics in self.node.metric_collectors:
            self.node.metric_collectors.remove(self.metrics)
        if self.membership is not None:
            with contextlib.suppress(ValueError):
                self.node.topic_deleted_listeners.remove(self.membership.drop_cached_topic_id)
            self.membership.stop()
            self.membership = None
