"""Kafka listener metrics in Prometheus form, under Kafka's RequestMetrics, BrokerTopicMetrics and SocketServer names.

Per API (``request`` label, Kafka's API name): requests by version, responses by error code
(Kafka's error names, NONE included, as ErrorsPerSec counts them), and a total-time histogram in
milliseconds; per topic: bytes and messages in (produce requests) and bytes out (fetch answers);
open connections and the connections or frames the listener refused. The listener updates
these from its event loop; a scrape reads them (under a lock, counters only grow).
"""

from __future__ import annotations

import bisect
import struct
import threading
from collections import defaultdict
from collections.abc import Iterator
from typing import Any

from kafka.errors import for_code
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily, Metric

REQUESTS_TOTAL = "kafka_network_requestmetrics_requests_total"
ERRORS_TOTAL = "kafka_network_requestmetrics_errors_total"
TOTAL_TIME_MS = "kafka_network_requestmetrics_totaltimems"
BYTES_IN_TOTAL = "kafka_server_brokertopicmetrics_bytesin_total"
BYTES_OUT_TOTAL = "kafka_server_brokertopicmetrics_bytesout_total"
MESSAGES_IN_TOTAL = "kafka_server_brokertopicmetrics_messagesin_total"
CONNECTION_COUNT = "kafka_server_socketservermetrics_connection_count"
REFUSED_TOTAL = "kafka_server_socketservermetrics_refused_total"
#: tiercompact's own: acks=-1 jobs whose partitions were fsynced one by one because too much of the page cache was dirty
#: for one syncfs (service/kafka/durability.py)
SYNCFS_DIRTY_FALLBACKS_TOTAL = "tiercompact_kafka_syncfs_dirty_fallbacks_total"

#: histogram bucket bounds, milliseconds
BUCKETS_MS = (0.5, 1, 2, 5, 10, 25, 50, 100, 250, 500, 1000, 2500, 5000, 10000, 30000)

KAFKA_METRIC_NAMES = (REQUESTS_TOTAL, ERRORS_TOTAL, TOTAL_TIME_MS, BYTES_IN_TOTAL, BYTES_OUT_TOTAL,
                      MESSAGES_IN_TOTAL, CONNECTION_COUNT, REFUSED_TOTAL)

_ERROR_NAMES: dict[int, str] = {0: "NONE"}  # Kafka's Errors.NONE (kafka-python calls it NO_ERROR)


def error_name(code: int) -> str:
    name = _ERROR_NAMES.get(code)
    if name is None:
        cls = for_code(code)
        message = getattr(cls, "message", None)
        name = _ERROR_NAMES[code] = message if isinstance(message, str) and code in (0, cls.errno) else str(code)
    return name


def error_codes(msg: Any) -> Iterator[int]:
    """Every ``error_code`` in a response message, nested ones included."""
    struct_ = getattr(msg, "_struct", None)
    if struct_ is None:
        return
    for name, kind in _plan(struct_):
        if kind == _CODE:
            code = getattr(msg, name, 0)
            if isinstance(code, int):
                yield code
        elif kind == _ARRAY:
            for child in getattr(msg, name, None) or ():
                yield from error_codes(child)
        else:
            child = getattr(msg, name, None)
            if child is not None:
                yield from error_codes(child)


_CODE, _ARRAY, _STRUCT = 0, 1, 2
#: per message schema, the fields that are or may hold an error code (computed once: the walk runs per request)
_PLANS: dict[int, list[tuple[str, int]]] = {}


def _plan(struct_: Any) -> list[tuple[str, int]]:
    plan = _PLANS.get(id(struct_))
    if plan is None:
        plan = []
        for name, field in struct_.fields.items():
            if name == "error_code":
                plan.append((name, _CODE))
            elif field.is_struct_array() or field.is_struct():
                inner = field if isinstance(getattr(field, "fields", None), dict) else None
                if inner is not None and not _may_hold_codes(inner):
                    continue  # e.g. Produce's record_errors: no error code below
                plan.append((name, _ARRAY if field.is_struct_array() else _STRUCT))
        _PLANS[id(struct_)] = plan
    return plan


def _may_hold_codes(struct_: Any) -> bool:
    for name, field in struct_.fields.items():
        if name == "error_code":
            return True
        if field.is_struct_array() or field.is_struct():
            inner = field if isinstance(getattr(field, "fields", None), dict) else None
            if inner is None or _may_hold_codes(inner):
                return True
    return False


def batch_records(data: bytes | bytearray | memoryview) -> int:
    """Records in a run of v2 batches (each batch's count field; no decoding)."""
    n, pos, end = 0, 0, len(data)
    while pos + 61 <= end:
        length = struct.unpack_from(">i", data, pos + 8)[0]
        n += max(struct.unpack_from(">i", data, pos + 57)[0], 0)
        pos += 12 + max(length, 0)
    return n


class KafkaMetrics:
    """The listener's counters (see the module docstring); ``collect()`` yields them for the node's /metrics."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.requests: dict[tuple[str, int], int] = defaultdict(int)
        self.errors: dict[tuple[str, str], int] = defaultdict(int)
        self.latency: dict[str, list[float]] = {}
        self.bytes_in: dict[str, int] = defaultdict(int)
        self.bytes_out: dict[str, int] = defaultdict(int)
        self.messages_in: dict[str, int] = defaultdict(int)
        self.refused: dict[str, int] = defaultdict(int)
        self.connections_fn: Any = None
        #: the node's GroupSync.dirty_fallbacks (set by the Kafka service)
        self.syncfs_fallbacks_fn: Any = None

    def count(self, what: str) -> None:
        with self._lock:
            self.refused[what] += 1

    def observe_request(self, ctx: Any, response: Any, latency_s: float, request: Any = None) -> None:
        api = ctx.spec.name
        ms = latency_s * 1000
        codes = ctx.error_codes if getattr(ctx, "error_codes", None) is not None else \
            list(error_codes(response)) if response is not None else []
        with self._lock:
            self.requests[(api, ctx.api_version)] += 1
            for code in codes or [0]:
                self.errors[(api, error_name(code))] += 1
            buckets = self.latency.get(api)
            if buckets is None:
                buckets = self.latency[api] = [0.0] * (len(BUCKETS_MS) + 2)  # per bucket, +Inf, sum
            buckets[bisect.bisect_left(BUCKETS_MS, ms)] += 1
            buckets[-1] += ms
        produced = getattr(ctx, "produced", None)
        if produced is not None:
            with self._lock:
                for topic, (size, count) in produced.items():
                    self.bytes_in[topic] += size
                    self.messages_in[topic] += count
        elif ctx.spec.api_key == 0 and request is not None:
            self._produced(request)
        elif ctx.spec.api_key == 1 and response is not None:
            self._fetched(response)

    def _produced(self, request: Any) -> None:
        for topic in getattr(request, "topic_data", None) or ():
            size = count = 0
            for part in getattr(topic, "partition_data", None) or ():
                records = getattr(part, "records", None)
                if records:
                    size += len(records)
                    count += batch_records(bytes(records) if not isinstance(records, bytes | bytearray) else records)
            with self._lock:
                self.bytes_in[topic.name] += size
                self.messages_in[topic.name] += count

    def _fetched(self, response: Any) -> None:
        for topic in getattr(response, "responses", None) or ():
            size = sum(len(p.records) for p in (getattr(topic, "partitions", None) or ())
                       if getattr(p, "records", None))
            name = getattr(topic, "topic", None) or str(getattr(topic, "topic_id", ""))
            with self._lock:
                self.bytes_out[name] += size

    def collect(self) -> Iterator[Metric]:
        with self._lock:
            requests, errors = dict(self.requests), dict(self.errors)
            latency = {k: list(v) for k, v in self.latency.items()}
            bytes_in, bytes_out, messages_in = dict(self.bytes_in), dict(self.bytes_out), dict(self.messages_in)
            refused = dict(self.refused)
        c = CounterMetricFamily(REQUESTS_TOTAL, "Kafka requests answered, by API and version (RequestsPerSec).",
                                labels=["request", "version"])
        for (api, v), n in sorted(requests.items()):
            c.add_metric([api, str(v)], n)
        yield c
        c = CounterMetricFamily(ERRORS_TOTAL, "Error codes in Kafka responses, by API and error name, NONE "
                                              "included (ErrorsPerSec).", labels=["request", "error"])
        for (api, err), n in sorted(errors.items()):
            c.add_metric([api, err], n)
        yield c
        h = HistogramMetricFamily(TOTAL_TIME_MS, "Time from a request's arrival to its answer being ready, in "
                                                 "milliseconds (TotalTimeMs).", labels=["request"])
        for api, b in sorted(latency.items()):
            cumulative, acc = [], 0.0
            for bound, hits in zip((*[str(x) for x in BUCKETS_MS], "+Inf"), b[:-1], strict=True):
                acc += hits
                cumulative.append((bound, acc))
            h.add_metric([api], cumulative, b[-1])
        yield h
        for name, doc, series in ((BYTES_IN_TOTAL, "Record-batch bytes produced, by topic (BytesInPerSec).",
                                   bytes_in),
                                  (MESSAGES_IN_TOTAL, "Records produced, by topic (MessagesInPerSec).", messages_in),
                                  (BYTES_OUT_TOTAL, "Record-batch bytes fetched, by topic (BytesOutPerSec).",
                                   bytes_out)):
            c = CounterMetricFamily(name, doc, labels=["topic"])
            for topic, n in sorted(series.items()):
                c.add_metric([topic], n)
            yield c
        g = GaugeMetricFamily(CONNECTION_COUNT, "Open Kafka connections (connection-count).")
        g.add_metric([], float(self.connections_fn() if self.connections_fn is not None else 0))
        yield g
        c = CounterMetricFamily(SYNCFS_DIRTY_FALLBACKS_TOTAL, "acks=-1 syncs that fsynced each partition instead of one "
                                                              "syncfs(2) of their file system, because more than 8 "
                                                              "MiB of the page cache was dirty.")
        c.add_metric([], float(self.syncfs_fallbacks_fn() if self.syncfs_fallbacks_fn is not None else 0))
        yield c
        c = CounterMetricFamily(REFUSED_TOTAL, "Kafka connections refused or closed by the listener, by reason "
                                               "(max.connections, connections.max.idle.ms, bad frames, unauthenticated "
                                               "requests, SASL failures).", labels=["reason"])
        for reason, n in sorted(refused.items()):
            c.add_metric([reason], n)
        yield c
