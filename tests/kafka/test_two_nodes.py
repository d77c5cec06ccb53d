"""Two ``tiercompact serve`` nodes sharing one metadata store (a SQLite file; PostgreSQL when
TIERCOMPACT_TEST_POSTGRES_URL is set) and one object store: a client bootstrapped at node A sees both brokers,
produces to and consumes from the partition node B leads; a node that does not lead a partition answers
NOT_LEADER_OR_FOLLOWER; after ``POST .../leadership`` moves a partition, a client follows it with nothing lost and
nothing duplicated; DeleteRecords sent at A reaches B, and the next leader starts where it left the partition;
once B stops, its partition shows LEADER_NOT_AVAILABLE."""

from __future__ import annotations

import base64
import os
import socket
import struct
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from kafka.protocol.admin import DescribeClusterRequest, DescribeClusterResponse
from kafka.protocol.producer import ProduceRequest, ProduceResponse
from kafka.record.default_records import DefaultRecordBatchBuilder

from tests.kafka.conftest import KafkaServe, run_client


def _metadata_url(shared: Path) -> str:
    return os.environ.get("TIERCOMPACT_TEST_POSTGRES_URL") or f"sqlite:///{shared / 'metadata.db'}"


@pytest.fixture(scope="module")
def two_nodes(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[KafkaServe, KafkaServe]]:
    shared = tmp_path_factory.mktemp("cluster")
    common = ["--metadata", _metadata_url(shared), "--remote", (shared / "remote").as_uri(), "--cleaner-threads", "0",
              "--broker-heartbeat-interval-ms", "200", "--broker-session-timeout-ms", "1500"]
    a = KafkaServe(shared / "a", ["--broker-id", "1", *common], output=shared / "a.log")
    b = KafkaServe(shared / "b", ["--broker-id", "2", *common], output=shared / "b.log")
    a.spawn()
    b.spawn()
    try:
        yield a.wait_ready(), b.wait_ready()
    finally:
        a.terminate()  # both stop at once
        b.stop()
        a.stop()


def _produce_raw(port: int, topic: str, partition: int) -> int:
    """One acks=1 Produce v7 for ``partition`` straight to ``port``; the partition's error code."""
    builder = DefaultRecordBatchBuilder(2, 0, False, -1, -1, -1, 1 << 20)
    builder.append(0, int(time.time() * 1000), b"raw", b"value", [])
    req = ProduceRequest(transactional_id=None, acks=1, timeout_ms=5000, topic_data=[
        ProduceRequest.TopicProduceData(name=topic, partition_data=[
            ProduceRequest.TopicProduceData.PartitionProduceData(index=partition, records=bytes(builder.build()))])])
    req.with_header(correlation_id=1, client_id="two-nodes")
    with socket.create_connection(("127.0.0.1", port), timeout=10) as s:
        s.sendall(bytes(req.encode(version=7, header=True, framed=True)))
        head = s.recv(4, socket.MSG_WAITALL)
        body = s.recv(struct.unpack(">i", head)[0], socket.MSG_WAITALL)
    resp = ProduceResponse.decode(body[4:], version=7)
    return int(resp.responses[0].partition_responses[0].error_code)


def _cluster_id(port: int) -> str:
    """DescribeCluster v0 at ``port``: the cluster id the node answers."""
    req = DescribeClusterRequest(include_cluster_authorized_operations=False)
    req.with_header(correlation_id=1, client_id="two-nodes")
    with socket.create_connection(("127.0.0.1", port), timeout=10) as s:
        s.sendall(bytes(req.encode(version=0, header=True, framed=True)))
        size = struct.unpack(">i", s.recv(4, socket.MSG_WAITALL))[0]
        body = s.recv(size, socket.MSG_WAITALL)
    return str(DescribeClusterResponse.decode(body, version=0, header=True).cluster_id)


def test_nodes_sharing_a_store_answer_one_kafka_shaped_cluster_id(two_nodes: tuple[KafkaServe, KafkaServe],
                                                                  kafka_server: KafkaServe) -> None:
    """Kafka's cluster.id (a random UUID, base64url, 22 characters), one per metadata store: the two nodes answer
    the same, another cluster another (it was the constant "tiercompact" for every cluster)."""
    a, b = two_nodes
    cid = _cluster_id(a.kafka_port)
    assert len(cid) == 22 and len(base64.urlsafe_b64decode(cid + "==")) == 16
    assert _cluster_id(b.kafka_port) == cid != _cluster_id(kafka_server.kafka_port)


def test_a_client_bootstrapped_at_a_reaches_the_partition_b_leads(two_nodes: tuple[KafkaServe, KafkaServe]) -> None:
    a, b = two_nodes
    topic = f"two-{os.getpid()}"
    config = {"remote.storage.enable": True, "cleanup.policy": "compact"}
    a.create_topic(topic, 2, config)
    b.create_topic(topic, 2, config)  # joins the stored topic: B holds local logs for it too
    a.api("POST", f"/v1/topics/{topic}/partitions/0/leadership", {"leader_epoch": 1, "broker_id": 1})
    b.api("POST", f"/v1/topics/{topic}/partitions/1/leadership", {"leader_epoch": 1, "broker_id": 2})

    md = run_client("confluent", {"action": "metadata", "bootstrap": a.bootstrap})
    assert md["brokers"] == {"1": ["127.0.0.1", a.kafka_port], "2": ["127.0.0.1", b.kafka_port]}
    assert md["topics"][topic] == {"0": 1, "1": 2}
    md_b = run_client("confluent", {"action": "metadata", "bootstrap": b.bootstrap})
    assert md_b["topics"][topic] == {"0": 1, "1": 2}  # any node answers for the whole cluster

    assert _produce_raw(a.kafka_port, topic, 1) == 6  # NOT_LEADER_OR_FOLLOWER
    assert _produce_raw(b.kafka_port, topic, 0) == 6

    records = [{"key": f"k{i}", "value": f"v{i}", "partition": i % 2} for i in range(10)]
    spec = {"bootstrap": a.bootstrap, "common": {"bootstrap": a.bootstrap, "topic": topic},
            "steps": [{"action": "produce", "idempotent": True, "records": records}, {"action": "consume"}]}
    produced, consumed = run_client("confluent", spec)["steps"]
    assert sorted(map(tuple, produced["offsets"])) == [(p, o) for p in (0, 1) for o in range(5)]
    assert sorted((r["partition"], r["offset"], r["value"]) for r in consumed["records"]) == sorted(
        (i % 2, i // 2, f"v{i}") for i in range(10))
    on_b = b.api("GET", f"/v1/topics/{topic}/partitions/1/records?offset=0")
    assert [r["value"] for r in on_b["records"]] == [f"v{i}" for i in range(1, 10, 2)]  # stored at B, the leader

    # move partition 1 to A: B tiers what it has, A becomes leader at a new epoch and restores from the remote tier;
    # a client bootstrapped at B follows the move, nothing lost, nothing duplicated
    b.api("POST", f"/v1/topics/{topic}/partitions/1/roll")
    assert b.api("POST", f"/v1/topics/{topic}/partitions/1/tier")["copied"]
    a.api("POST", f"/v1/topics/{topic}/partitions/1/leadership", {"leader_epoch": 2, "broker_id": 1})
    md = run_client("confluent", {"action": "metadata", "bootstrap": b.bootstrap})
    assert md["topics"][topic] == {"0": 1, "1": 1}
    more = [{"key": f"m{i}", "value": f"moved{i}", "partition": 1} for i in range(4)]
    spec = {"bootstrap": b.bootstrap, "common": {"bootstrap": b.bootstrap, "topic": topic},
            "steps": [{"action": "produce", "idempotent": True, "records": more},
                      {"action": "consume", "partitions": [1]}]}
    produced, consumed = run_client("kafka-python", spec)["steps"]
    assert [o for _p, o in produced["offsets"]] == [5, 6, 7, 8]
    assert [(r["offset"], r["value"]) for r in consumed["records"]] == (
        [(i, f"v{2 * i + 1}") for i in range(5)] + [(5 + i, f"moved{i}") for i in range(4)])

    _moved["topic"] = topic


#: the topic whose partition 1 the first test moved from B to A (the tests below run after it, in file order)
_moved: dict[str, str] = {}


def test_the_old_leader_refuses_writes_after_a_move(two_nodes: tuple[KafkaServe, KafkaServe]) -> None:
    _a, b = two_nodes
    assert _produce_raw(b.kafka_port, _moved["topic"], 1) == 6  # NOT_LEADER_OR_FOLLOWER from the deposed leader


def test_delete_records_reaches_the_leader_and_the_next_leader_starts_there(
        two_nodes: tuple[KafkaServe, KafkaServe]) -> None:
    a, b = two_nodes
    topic = f"purge-{os.getpid()}"
    config = {"remote.storage.enable": True, "cleanup.policy": "delete", "retention.ms": -1}
    a.create_topic(topic, 1, config)
    b.create_topic(topic, 1, config)
    part = f"/v1/topics/{topic}/partitions/0"
    b.api("POST", f"{part}/leadership", {"leader_epoch": 1, "broker_id": 2})
    b.api("POST", f"{part}/records", {"records": [{"key": f"k{i}", "value": f"v{i}"} for i in range(8)]})
    b.api("POST", f"{part}/roll")
    assert b.api("POST", f"{part}/tier")["copied"]
    # bootstrapped at A, kafka-python's admin client sends DeleteRecords to B, the leader
    got = run_client("reader", {"library": "kafka-python", "action": "admin", "bootstrap": a.bootstrap,
                                "ops": [{"op": "delete_records", "topic": topic, "offset": 5}]})
    assert got["answers"] == [{"low_watermark": 5}]
    assert b.api("GET", part)["log_start_offset"] == 5
    # the partition moves to A, which restores it from the remote tier: it starts where B's DeleteRecords left it
    a.api("POST", f"{part}/leadership", {"leader_epoch": 2, "broker_id": 1})
    assert a.api("GET", part)["log_start_offset"] == 5
    read = run_client("reader", {"library": "confluent", "action": "read_all", "bootstrap": a.bootstrap,
                                 "topic": topic, "offset": 5})
    assert [(r[1], r[3]) for r in read["records"]] == [(i, f"v{i}") for i in range(5, 8)]
    times = run_client("reader", {"library": "kafka-python", "action": "offsets_for_times", "bootstrap": a.bootstrap,
                                  "topic": topic, "times": [[0, 0]]})
    assert times["offsets"] == [5]  # the first record at or after time 0 is the first one left


def test_a_dead_leader_shows_leader_not_available(two_nodes: tuple[KafkaServe, KafkaServe]) -> None:
    a, b = two_nodes
    topic = _moved["topic"]
    config = {"remote.storage.enable": True, "cleanup.policy": "compact"}
    led_by_b = f"{topic}-b"
    a.create_topic(led_by_b, 1, config)
    b.create_topic(led_by_b, 1, config)
    b.api("POST", f"/v1/topics/{led_by_b}/partitions/0/leadership", {"leader_epoch": 1, "broker_id": 2})
    b.stop()
    deadline = time.monotonic() + 10
    while True:
        md = run_client("confluent", {"action": "metadata", "bootstrap": a.bootstrap})
        if set(md["brokers"]) == {"1"}:
            break
        assert time.monotonic() < deadline, md
        time.sleep(0.3)
    assert md["topics"][topic] == {"0": 1, "1": 1}
    assert md["topics"][led_by_b] == {"0": -1}  # LEADER_NOT_AVAILABLE: no election here
