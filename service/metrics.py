"""Prometheus metrics, pulled from node state at scrape time (Kafka's gauges read ``lastStats``).

Nothing pushes into counters on the hot path: :class:`NodeCollector` asks the node (and
through it the cleaner, the counting object store and the metadata layer) for current
values whenever ``/metrics`` is scraped. The names are Kafka's log-cleaner gauges plus
the tiered counters of shared/API.md, declared once here so tests can check them.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING

from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily, Metric
from prometheus_client.registry import Collector

from log.flush import FLUSH_TIME_BUCKETS_MS
from service.flush_policy import flush_tracker_for

if TYPE_CHECKING:
    from service.node import Node

MAX_COMPACTION_DELAY_SECS = "max_compaction_delay_secs"
MAX_CLEAN_TIME_SECS = "max_clean_time_secs"
UNCLEANABLE_PARTITIONS_COUNT = "uncleanable_partitions_count"
UNCLEANABLE_BYTES = "uncleanable_bytes"
DEAD_THREAD_COUNT = "dead_thread_count"
MAX_BUFFER_UTILIZATION_PERCENT = "max_buffer_utilization_percent"
CLEANER_RECOPY_PERCENT = "cleaner_recopy_percent"
TIME_SINCE_LAST_RUN_MS = "time_since_last_run_ms"
REMOTE_BYTES_DOWNLOADED_TOTAL = "remote_bytes_downloaded_total"
REMOTE_BYTES_UPLOADED_TOTAL = "remote_bytes_uploaded_total"
REMOTE_SEGMENTS_SKIPPED_BY_BLOOM_TOTAL = "remote_segments_skipped_by_bloom_total"
FENCED_OPERATIONS_TOTAL = "fenced_operations_total"
OFFLINE_PARTITIONS_COUNT = "offline_partitions_count"
CORRUPT_CHECKPOINTS_REBUILT_TOTAL = "corrupt_checkpoints_rebuilt_total"
REMOTE_STORE_UNAVAILABLE = "remote_store_unavailable"
REMOTE_STORE_OUTAGES_TOTAL = "remote_store_outages_total"
ERASURES_PENDING_COUNT = "erasures_pending_count"
ERASURES_AT_RISK_COUNT = "erasures_at_risk_count"
ERASURES_OVERDUE_COUNT = "erasures_overdue_count"
ERASURE_MIN_TIME_LEFT_SECS = "erasure_min_time_left_secs"
#: Kafka's kafka.log:type=LogFlushStats,name=LogFlushRateAndTimeMs, as the JMX exporter names it
LOG_FLUSH_TIME_MS = "kafka_log_logflushstats_logflushrateandtimems"

#: gauge name -> help text (Kafka's LogCleaner / LogCleanerManager gauges)
GAUGES: dict[str, str] = {
    MAX_COMPACTION_DELAY_SECS: "Largest delay, over all partitions, between a record becoming due for "
                               "compaction (max.compaction.lag.ms) and its cleaning, in seconds (KIP-354).",
    MAX_CLEAN_TIME_SECS: "Duration of the longest of the last cleaning runs, in seconds.",
    UNCLEANABLE_PARTITIONS_COUNT: "Partitions the cleaner gave up on after an error.",
    UNCLEANABLE_BYTES: "Bytes of the uncleanable partitions' dirty sections.",
    DEAD_THREAD_COUNT: "Cleaner threads that died.",
    MAX_BUFFER_UTILIZATION_PERCENT: "Highest offset-map (dedupe buffer) fill in the last runs, percent.",
    CLEANER_RECOPY_PERCENT: "Bytes written / bytes read by the last cleaning runs, percent.",
    TIME_SINCE_LAST_RUN_MS: "Milliseconds since a cleaner thread last finished a run.",
    OFFLINE_PARTITIONS_COUNT: "Partitions whose files could not be loaded (corrupt, truncated or emptied segment, "
                              "malformed leader-epoch-checkpoint); GET .../partitions/{p} shows why (Kafka's "
                              "OfflinePartitionsCount).",
    REMOTE_STORE_UNAVAILABLE: "1 while the object store is treated as down (its circuit breaker is open: calls "
                              "fail at once with 503 and Retry-After), else 0.",
    ERASURES_PENDING_COUNT: "Key erasures whose older values are not yet all gone (state pending).",
    ERASURES_AT_RISK_COUNT: "Pending key erasures with less than a tenth of their window left, or overdue "
                            "(GET /v1/cleaner lists them).",
    ERASURES_OVERDUE_COUNT: "Pending key erasures past their deadline_ms.",
    ERASURE_MIN_TIME_LEFT_SECS: "Seconds left until the nearest deadline of a pending key erasure (negative: "
                                "overdue; 0 when none is pending).",
}

#: counter name -> help text (tiered storage)
COUNTERS: dict[str, str] = {
    REMOTE_BYTES_DOWNLOADED_TOTAL: "Bytes read from the object store (tiered reads and cleaning).",
    REMOTE_BYTES_UPLOADED_TOTAL: "Bytes written to the object store (tiering and cleaned segments).",
    REMOTE_SEGMENTS_SKIPPED_BY_BLOOM_TOTAL: "Remote segments the tiered cleaner did not download because "
                                            "their bloom filter matched no key of the offset map.",
    FENCED_OPERATIONS_TOTAL: "Publishes, uploads and deletes rejected because their leader epoch was fenced.",
    CORRUPT_CHECKPOINTS_REBUILT_TOTAL: "Corrupt cleaner-offset-checkpoint files moved aside and rebuilt (the "
                                       "partitions they covered are re-cleaned from their log start).",
    REMOTE_STORE_OUTAGES_TOTAL: "Times the object store's circuit breaker opened after consecutive failures.",
}

CLEANER_RECORDS_REMOVED_TOTAL = "cleaner_records_removed_total"
CLEANER_ROUNDS_TOTAL = "cleaner_rounds_total"
CLEANER_REPORT_WRITE_FAILURES_TOTAL = "cleaner_report_write_failures_total"

#: labelled counter name -> (labels, help text), from the round reports (cleaner/report.py)
LABELLED_COUNTERS: dict[str, tuple[tuple[str, ...], str]] = {
    CLEANER_RECORDS_REMOVED_TOTAL: (("engine", "reason"), "Records the cleaner removed, by engine (local, tiered, "
                                    "spark) and reason (superseded, tombstone, aborted, marker)."),
    CLEANER_ROUNDS_TOTAL: (("engine", "outcome"), "Cleaning rounds, by engine and outcome (completed, failed, "
                           "fenced, aborted); each left a report (GET .../compactions)."),
}
#: counter name -> help text, from the round reporter
REPORT_COUNTERS: dict[str, str] = {
    CLEANER_REPORT_WRITE_FAILURES_TOTAL: "Round reports the metadata store could not take (the rounds themselves "
                                         "were unaffected).",
}

METRIC_NAMES: tuple[str, ...] = (*GAUGES, *COUNTERS, *LABELLED_COUNTERS, *REPORT_COUNTERS, LOG_FLUSH_TIME_MS)


class NodeCollector(Collector):
    def __init__(self, node: Node) -> None:
        self.node = node

    def collect(self) -> Iterator[Metric]:
        values = self.node.metrics()
        for name, doc in GAUGES.items():
            if name in values:
                g = GaugeMetricFamily(name, doc)
                g.add_metric([], float(values[name]))
                yield g
        for name, doc in COUNTERS.items():
            if name in values:
                c = CounterMetricFamily(name, doc)
                c.add_metric([], float(values[name]))
                yield c
        yield from self._report_counters()
        yield self._flush_times()
        for extra in list(getattr(self.node, "metric_collectors", ())):  # the Kafka listener's (service/kafka/metrics.py)
            yield from extra.collect()

    def _flush_times(self) -> Metric:
        counts, total_ms = flush_tracker_for(self.node).flush_times()
        h = HistogramMetricFamily(LOG_FLUSH_TIME_MS, "Time of each sync of appended records to disk, in milliseconds "
                                                     "(Kafka's LogFlushRateAndTimeMs): an fsync of one partition, or "
                                                     "one syncfs for the partitions an acks=-1 job appended to; "
                                                     "flush.messages and flush.ms syncs too.")
        cumulative, acc = [], 0.0
        for bound, n in zip((*[f"{b:g}" for b in FLUSH_TIME_BUCKETS_MS], "+Inf"), counts, strict=True):
            acc += n
            cumulative.append((bound, acc))
        h.add_metric([], cumulative, total_ms)
        return h

    def _report_counters(self) -> Iterator[Metric]:
        reporter = self.node.cleaner.reporter
        if reporter is None:
            return
        series = {CLEANER_RECORDS_REMOVED_TOTAL: reporter.records_removed(),
                  CLEANER_ROUNDS_TOTAL: reporter.rounds()}
        for name, (labels, doc) in LABELLED_COUNTERS.items():
            c = CounterMetricFamily(name, doc, labels=list(labels))
            for key, n in sorted(series[name].items()):
                c.add_metric(list(key), float(n))
            yield c
        c = CounterMetricFamily(CLEANER_REPORT_WRITE_FAILURES_TOTAL, REPORT_COUNTERS[CLEANER_REPORT_WRITE_FAILURES_TOTAL])
        c.add_metric([], float(reporter.failed_writes))
        yield c


def make_registry(node: Node) -> CollectorRegistry:
    registry = CollectorRegistry(auto_describe=False)
    registry.register(NodeCollector(node))
    return registry


def render(registry: CollectorRegistry) -> bytes:
    return generate_latest(registry)
