"""Real Kafka clients against a real ``tiercompact serve``: each of confluent-kafka, kafka-python and aiokafka (each in
its own process) produces keyed records with every codec, idempotent or not, and every client reads every topic back
from offset 0 to the end, at the offsets the producer was given, under both isolation levels."""

from __future__ import annotations

from typing import Any

from tests.kafka.conftest import CLIENTS, CODECS, KafkaServe, run_client, run_clients

N = 12
#: the codecs each client produces with an idempotent producer (acks=all); the others use a plain one (acks=1)
IDEMPOTENT = ("snappy", "lz4", "zstd")


def _records(client: str, codec: str) -> list[dict[str, Any]]:
    recs: list[dict[str, Any]] = [{"key": f"k{i % 5}", "value": f"{client}/{codec}/{i}", "partition": i % 2}
                                  for i in range(N)]
    recs[3]["headers"] = [["h", "x"]]
    recs[7]["value"] = None  # a tombstone
    return recs


def test_each_client_produces_and_consumes_every_codec(kafka_server: KafkaServe, topic_name: str) -> None:
    topics = {(client, codec): f"{topic_name}-{client}-{codec}" for client in CLIENTS for codec in CODECS}
    for topic in topics.values():
        kafka_server.create_topic(topic, 2)
    produced = run_clients([
        (client, {"bootstrap": kafka_server.bootstrap, "common": {"bootstrap": kafka_server.bootstrap},
                  "steps": [{"action": "produce", "topic": topics[client, codec], "codec": codec,
                             "acks": "all" if codec in IDEMPOTENT else 1, "idempotent": codec in IDEMPOTENT,
                             "records": _records(client, codec)} for codec in CODECS]})
        for client in CLIENTS])
    expected: dict[str, list[tuple[int, int, str | None, str | None]]] = {}
    refused = []  # produce failures are reported after every topic that was written is read back
    for client, answer in zip(CLIENTS, produced, strict=True):
        for codec, step in zip(CODECS, answer["steps"], strict=True):
            offsets = step["offsets"]
            if not all(isinstance(o, list) for o in offsets):
                refused.append((client, codec, [o for o in offsets if not isinstance(o, list)][:1]))
                expected[topics[client, codec]] = []
                continue
            recs = _records(client, codec)
            expected[topics[client, codec]] = sorted(
                (p, off, r["key"], r["value"]) for (p, off), r in zip(offsets, recs, strict=True))
            for p in (0, 1):  # per partition, consecutive offsets from 0 in send order
                assert [off for (pp, off) in offsets if pp == p] == list(range(N // 2)), (client, codec, offsets)
    isolation = {"confluent": "read_committed", "kafka-python": "read_uncommitted", "aiokafka": "read_committed"}
    consumed = run_clients([
        (client, {"common": {"bootstrap": kafka_server.bootstrap, "isolation": isolation[client]},
                  "steps": [{"action": "consume", "topic": t} for t in topics.values()]})
        for client in CLIENTS])
    for client, answer in zip(CLIENTS, consumed, strict=True):
        for topic, step in zip(topics.values(), answer["steps"], strict=True):
            assert step["timed_out"] == [], (client, topic)
            got = sorted((r["partition"], r["offset"], r["key"], r["value"]) for r in step["records"])
            assert got == expected[topic], (client, topic)
            with_header = [r for r in step["records"] if r["headers"]]
            assert [h for r in with_header for h in r["headers"]] == ([["h", "x"]] if got else []), (client, topic)
    assert refused == [], "producers refused (client, codec, first error)"


def test_admin_client_sees_the_cluster(kafka_server: KafkaServe, topic_name: str) -> None:
    created = run_client("confluent", {"action": "create_topic", "bootstrap": kafka_server.bootstrap,
                                       "topic": topic_name, "partitions": 3,
                                       "config": {"cleanup.policy": "compact"}})
    assert created["errors"] == {}
    md = run_client("confluent", {"action": "metadata", "bootstrap": kafka_server.bootstrap})
    assert md["brokers"] == {"0": ["127.0.0.1", kafka_server.kafka_port]}
    assert md["topics"][topic_name] == {"0": 0, "1": 0, "2": 0}
    again = run_client("confluent", {"action": "create_topic", "bootstrap": kafka_server.bootstrap,
                                     "topic": topic_name, "partitions": 3})
    assert again["errors"] == {topic_name: "TOPIC_ALREADY_EXISTS"}
