"""The transaction coordinator's metrics in Prometheus form, under Kafka's kafka.coordinator.transaction names.

Gauges: transactional ids by state, transactions waiting for their markers
(TransactionMarkerChannelManager's queue); counters: InitProducerId, AddPartitionsToTxn,
AddOffsetsToTxn, commits, aborts, expired transactions, fenced producers, state writes refused
because another node coordinates the id now, transactions recovered at a slot load, markers
written, marker retries and transactional ids removed after
transactional.id.expiration.ms.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric

from coordinator.txn.state import TxnState

PREFIX = "kafka_coordinator_transaction_"
COUNTERS = {
    "init_producer_id": "InitProducerId requests with a transactional id answered with an epoch",
    "add_partitions": "AddPartitionsToTxn requests that added partitions",
    "add_offsets": "AddOffsetsToTxn requests",
    "commits": "Transactions ended with a commit",
    "aborts": "Transactions ended with an abort (by the producer, a new epoch or expiry)",
    "expired": "Transactions aborted after transaction.timeout.ms",
    "fenced_producers": "Requests refused because the producer's epoch is not the current one",
    "fenced_writes": "State writes refused because another node coordinates the transactional id now",
    "recovered": "Prepared transactions whose markers a slot load finished",
    "markers_written": "COMMIT/ABORT markers written to partitions",
    "marker_retries": "Rounds of marker writes that had to be retried",
    "expired_ids": "Transactional ids removed after transactional.id.expiration.ms without a transaction",
}


class TxnMetrics:
    """``collect()`` for the node's /metrics; yields nothing once the coordinator is closed."""

    def __init__(self, coordinator: Any) -> None:
        self.coordinator = coordinator

    def collect(self) -> Iterator[Metric]:
        tc = self.coordinator
        if tc._stop.is_set():
            return
        snap = tc.snapshot()
        states = GaugeMetricFamily(PREFIX + "transactional_ids", "Transactional ids this node coordinates, by state",
                                   labels=["state"])
        for s in TxnState:
            states.add_metric([s.value], float(snap["by_state"].get(s.value, 0)))
        yield states
        pending = GaugeMetricFamily(PREFIX + "transactionmarkerchannelmanager_pending",
                                    "Prepared transactions whose markers are being written")
        pending.add_metric([], float(snap["pending_markers"]))
        yield pending
        for key, doc in COUNTERS.items():
            m = CounterMetricFamily(PREFIX + key + "_total", doc)
            m.add_metric([], float(snap["stats"].get(key, 0)))
            yield m
