"""The coordinators' metrics in Prometheus form, under Kafka's GroupMetadataManager / group-coordinator-metrics names.

Gauges: groups by state (NumGroups, NumGroupsStable, ...), coordinator slots this node holds or
is loading (per kind: ``group`` and ``transaction``, Kafka's NumPartitions), the time the last
rebalance took to settle; counters: joins, syncs, heartbeats, leaves, expired members,
rebalances, offset commits and fetches, writes refused because the coordinator was superseded,
slots moved. Read at scrape time from the coordinators (no locks: counters only grow).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric

PREFIX = "kafka_coordinator_group_groupmetadatamanager_"
COUNTERS = {
    "joins": ("kafka_coordinator_group_groupcoordinatormetrics_join_total", "JoinGroup requests"),
    "syncs": ("kafka_coordinator_group_groupcoordinatormetrics_sync_total", "SyncGroup requests"),
    "heartbeats": ("kafka_coordinator_group_groupcoordinatormetrics_heartbeat_total", "Heartbeat requests"),
    "leaves": ("kafka_coordinator_group_groupcoordinatormetrics_leave_total", "LeaveGroup requests"),
    "expired_members": ("kafka_coordinator_group_groupcoordinatormetrics_expired_members_total",
                        "Members removed after their session timeout"),
    "rebalances": ("kafka_coordinator_group_groupcoordinatormetrics_rebalance_total", "Rebalances started"),
    "offset_commits": ("kafka_coordinator_group_groupcoordinatormetrics_offset_commit_total",
                       "OffsetCommit requests"),
    "offset_fetches": ("kafka_coordinator_group_groupcoordinatormetrics_offset_fetch_total",
                       "OffsetFetch requests"),
    "expired_offsets": ("kafka_coordinator_group_groupcoordinatormetrics_offset_expired_total",
                        "Committed offsets expired (offsets.retention.minutes)"),
    "fenced_writes": ("kafka_coordinator_group_groupcoordinatormetrics_fenced_writes_total",
                      "Group writes refused because another node coordinates the group now (coordinator epoch)"),
}
STATES = ("Empty", "PreparingRebalance", "CompletingRebalance", "Stable", "Dead")


class CoordinatorMetrics:
    """``collect()`` for the node's /metrics (service.metrics calls every ``node.metric_collectors``)."""

    def __init__(self, coordinators: Any) -> None:
        self.coordinators = coordinators

    def collect(self) -> Iterator[Metric]:
        c = self.coordinators
        slots = GaugeMetricFamily("kafka_coordinator_numpartitions", "Coordinator slots (__consumer_offsets / "
                                  "__transaction_state partitions) this node holds, by kind and state",
                                  labels=["kind", "state"])
        moves = CounterMetricFamily("kafka_coordinator_moves_total", "Coordinator slots this node took over or "
                                    "handed off", labels=["kind"])
        for kind, own in (("group", c.groups_ownership), ("transaction", c.txn_ownership)):
            owned = own.owned_slots()
            slots.add_metric([kind, "active"], float(len(owned)))
            slots.add_metric([kind, "loading"], float(len(own._mine) - len(owned)))
            moves.add_metric([kind], float(own.moves))
        yield slots
        yield moves
        gc = c.groups
        if gc is None:
            return
        groups = list(gc.groups.values())
        total = GaugeMetricFamily(PREFIX + "numgroups", "Groups this node coordinates")
        total.add_metric([], float(len(groups)))
        yield total
        for state in STATES:
            g = GaugeMetricFamily(PREFIX + "numgroups" + state.lower(), f"Groups in state {state}")
            g.add_metric([], float(sum(1 for grp in groups if grp.state.value == state)))
            yield g
        members = GaugeMetricFamily(PREFIX + "nummembers", "Members of the groups this node coordinates")
        members.add_metric([], float(sum(len(grp.members) for grp in groups)))
        yield members
        settle = GaugeMetricFamily("kafka_coordinator_group_last_rebalance_seconds",
                                   "Time from the start of the last completed rebalance to its SyncGroup")
        settle.add_metric([], float(gc.stats["last_rebalance_s"]))
        yield settle
        for key, (name, doc) in COUNTERS.items():
            m = CounterMetricFamily(name, doc)
            m.add_metric([], float(gc.stats[key]))
            yield m
