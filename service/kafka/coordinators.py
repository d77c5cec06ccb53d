"""The node's coordinators beside its Kafka listener: slot ownership for groups and transactions, and the coordinators on them.

``KafkaService`` starts a :class:`Coordinators` after the node joined the cluster registry and
stops it (handing every slot back) before leaving it. Handlers reach it as
``ctx.listener.coordinators``, the HTTP routes through :func:`for_node`.
"""

from __future__ import annotations

import logging
import weakref
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from coordinator.ownership import DEFAULT_NUM_SLOTS, CoordinatorOwnership
from metadata.coordinators import GROUP, TRANSACTION

if TYPE_CHECKING:
    from service.kafka.cluster import ClusterMembership
    from service.kafka.listener import KafkaListener
    from service.node import Node

logger = logging.getLogger(__name__)

_BY_NODE: weakref.WeakKeyDictionary[Any, Coordinators] = weakref.WeakKeyDictionary()


def for_node(node: Node) -> Coordinators | None:
    """The running coordinators of ``node`` (None: no Kafka listener)."""
    return _BY_NODE.get(node)


def live_brokers(membership: ClusterMembership) -> Callable[[], dict[int, str]]:
    """broker id -> incarnation of every node whose registry heartbeat is within the session timeout."""
    def live() -> dict[int, str]:
        now = membership.clock.milliseconds()
        return {r.broker_id: r.incarnation for r in membership.registrations()
                if r.alive(now, membership.session_timeout_ms)}
    return live


class Coordinators:
    """Ownership of the group and transaction slots on this node, and the coordinators that serve them."""

    def __init__(self, node: Node, listener: KafkaListener, membership: ClusterMembership, *,
                 group_slots: int = DEFAULT_NUM_SLOTS, txn_slots: int = DEFAULT_NUM_SLOTS,
                 interval_ms: int = 500) -> None:
        from metadata.sql_coordinators import SqlCoordinatorStore

        self.node = node
        self.listener = listener
        self.membership = membership
        config = node.config
        self.store = SqlCoordinatorStore(config.metadata_url,
                                         lock_timeout_ms=getattr(config, "metadata_lock_timeout_ms", 5_000))
        live = live_brokers(membership)
        common: dict[str, Any] = {"broker_id": node.broker_id, "incarnation": membership.incarnation,
                                  "live": live, "now_ms": node.clock.milliseconds, "interval_ms": interval_ms}
        group_slots = getattr(config, "offsets_topic_num_partitions", group_slots)
        txn_slots = getattr(config, "transaction_state_log_num_partitions", txn_slots)
        self.groups_ownership = CoordinatorOwnership(self.store, GROUP, num_slots=group_slots, **common)
        self.txn_ownership = CoordinatorOwnership(self.store, TRANSACTION, num_slots=txn_slots, **common)
        #: the group coordinator (coordinator.group), set by start()
        self.groups: Any = None
        #: the transaction coordinator, when one is wired in
        self.transactions: Any = None

    def ownership(self, key_type: int) -> CoordinatorOwnership | None:
        """FindCoordinator's key type: 0 GROUP, 1 TRANSACTION."""
        return {0: self.groups_ownership, 1: self.txn_ownership}.get(key_type)

    def start(self) -> Coordinators:
        self._start_groups()
        from service.kafka.transactions import start_transactions

        self.transactions = start_transactions(self)
        listeners = getattr(self.node, "topic_deleted_listeners", None)
        if listeners is not None:
            listeners.append(self._topic_deleted)
        self.groups_ownership.start()
        self.txn_ownership.start()
        _BY_NODE[self.node] = self
        from service.kafka.coordinator_metrics import CoordinatorMetrics

        self.metrics = CoordinatorMetrics(self)
        collectors = getattr(self.node, "metric_collectors", None)
        if collectors is not None:
            collectors.append(self.metrics)
        return self

    def _start_groups(self) -> None:
        from coordinator.group.coordinator import GroupConfig, GroupCoordinator
        from metadata.sql_group_offsets import SqlGroupStore

        config = self.node.config
        gconf = GroupConfig(
            min_session_timeout_ms=getattr(config, "group_min_session_timeout_ms", 6_000),
            max_session_timeout_ms=getattr(config, "group_max_session_timeout_ms", 1_800_000),
            initial_rebalance_delay_ms=getattr(config, "group_initial_rebalance_delay_ms", 3_000),
            offsets_retention_ms=getattr(config, "offsets_retention_minutes", 10_080) * 60_000)
        self.group_store = SqlGroupStore(engine=self.store.engine)
        self.groups = GroupCoordinator(self.group_store, self.groups_ownership, config=gconf,
                                       now_ms=self.node.clock.milliseconds).start()

    def _topic_deleted(self, _name: str) -> None:
        """The node deleted a topic (its offsets left the store with it): commits stop seeing it at once."""
        from service.kafka.group_offsets import forget_cached_topics

        forget_cached_topics(self.node)

    def stop(self) -> None:
        _BY_NODE.pop(self.node, None)
        listeners = getattr(self.node, "topic_deleted_listeners", None)
        if listeners is not None and self._topic_deleted in listeners:
            listeners.remove(self._topic_deleted)
        collectors = getattr(self.node, "metric_collectors", None)
        metrics = getattr(self, "metrics", None)
        if collectors is not None and metrics in collectors:
            collectors.remove(metrics)
        for own in (self.groups_ownership, self.txn_ownership):
            try:
                own.stop(release=True)
            except Exception as e:  # noqa: BLE001 - the claims then die with the registry heartbeat
                logger.warning("stopping the %s coordinators: %s", own.kind, e)
        if self.groups is not None:
            self.groups.close()
        if self.transactions is not None:
            self.transactions.close()
        self.store.close()
