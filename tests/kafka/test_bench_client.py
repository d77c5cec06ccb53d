"""``bench kafka``'s load client (bench/kafka_client.py): the split of the produce latency it reports comes from
librdkafka's own statistics, counts only the measured seconds and a real broker's rows, and a real run against a real
``tiercompact serve`` answers it."""

from __future__ import annotations

import json
import subprocess
import sys

from bench.kafka_client import _Split
from tests.kafka.conftest import ROOT, KafkaServe
from tests.support.serve import clean_env


def _document(rtt_p99_us: int, *, nodeid: int = 1) -> str:
    def window(p50: int, p99: int) -> dict[str, int]:
        return {"p50": p50, "p99": p99, "max": p99 + 1000, "cnt": 10}

    brokers = {"bootstrap": {"nodeid": -1, "rtt": window(1, 2), "int_latency": window(1, 2)},
               "node": {"nodeid": nodeid, "rtt": window(1000, rtt_p99_us), "int_latency": window(2500, 5600)}}
    return json.dumps({"brokers": brokers})


def test_the_split_counts_the_measured_seconds_of_real_brokers_only() -> None:
    split = _Split()
    split.on_stats(_document(90_000))  # the warm-up: not measured
    split.measuring = True
    for rtt_p99 in (2_000, 3_000, 40_000):
        split.on_stats(_document(rtt_p99))
    split.measuring = False
    split.on_stats(_document(90_000))
    assert split.answer() == {"client_queue_p50_ms": 2.5, "client_queue_p99_ms": 5.6, "client_queue_max_ms": 6.6,
                              "round_trip_p50_ms": 1.0, "round_trip_p99_ms": 3.0, "round_trip_max_ms": 41.0}
    assert _Split().answer() == {}


def test_a_real_run_reports_the_split(kafka_server: KafkaServe, topic_name: str) -> None:
    kafka_server.create_topic(topic_name, 2, {"cleanup.policy": "delete"})
    spec = {"action": "produce", "bootstrap": kafka_server.bootstrap, "topic": topic_name, "partitions": 2,
            "value_bytes": 84, "seconds": 2.5, "rate": 2000, "warmup": 0.3}
    out = subprocess.run([sys.executable, "-m", "bench.kafka_client", json.dumps(spec)], capture_output=True,
                         text=True, cwd=ROOT, env=clean_env(), timeout=120, check=True)
    answer = json.loads(out.stdout.strip().splitlines()[-1])
    assert answer["errors"] == 0 and answer["records"] > 1000
    for part in ("client_queue", "round_trip"):
        assert 0 < answer[f"{part}_p50_ms"] <= answer[f"{part}_p99_ms"] <= answer[f"{part}_max_ms"]
    # a record's latency holds its wait in the client's queue (linger.ms=5 at most, for the first of a batch)
    assert answer["client_queue_p99_ms"] <= answer["max_ms"]
