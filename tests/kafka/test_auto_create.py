"""Topics a Metadata request names are auto-created as Kafka's broker creates them (auto.create.topics.enable,
num.partitions): on the wire against an in-process listener over a real Node, and by real clients that produce to a
topic nobody created."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from kafka.protocol.admin import CreateTopicsRequest, DescribeConfigsRequest
from kafka.protocol.metadata import MetadataRequest

from service.config import load_config
from service.kafka.listener import KafkaListener, KafkaListenerConfig
from service.node import Node
from tests.kafka.conftest import CLIENTS, KafkaServe, run_clients
from tests.kafka.test_read_admin_wire import Wire

UNKNOWN_TOPIC_OR_PARTITION, LEADER_NOT_AVAILABLE, INVALID_TOPIC_EXCEPTION = 3, 5, 17
T = MetadataRequest.MetadataRequestTopic


def _start(tmp: Path, **options: Any) -> tuple[Node, KafkaListener]:
    node = Node(load_config({"data_dir": tmp / "data", "cleaner_threads": 0, **options}, env={}))
    node.start()
    return node, KafkaListener(node, KafkaListenerConfig(host="127.0.0.1", port=0)).start()


@pytest.fixture()
def three(tmp_path: Path) -> Iterator[tuple[Node, Wire]]:
    """A node whose auto-created topics get 3 partitions."""
    node, listener = _start(tmp_path, num_partitions=3)
    wire = Wire(listener.port)
    yield node, wire
    wire.sock.close()
    listener.stop()
    node.shutdown()


def _metadata(wire: Wire, name: str, version: int = 12, allow: bool = True) -> Any:
    if version >= 10:
        req = MetadataRequest(topics=[T(topic_id=None, name=name)], allow_auto_topic_creation=allow,
                              include_topic_authorized_operations=False)
    elif version >= 4:
        req = MetadataRequest(topics=[T(name=name)], allow_auto_topic_creation=allow)
    else:
        req = MetadataRequest(topics=[T(name=name)])
    (topic,) = wire.call(req, version).topics
    return topic


def test_metadata_creates_an_unknown_topic_when_the_request_allows_it(three: tuple[Node, Wire]) -> None:
    node, wire = three
    refused = _metadata(wire, "not-asked", allow=False)
    assert refused.error_code == UNKNOWN_TOPIC_OR_PARTITION and refused.partitions == []
    assert "not-asked" not in {t.name for t in node.topics()}

    created = _metadata(wire, "asked")
    assert created.error_code == 0
    assert [(p.partition_index, p.leader_id, p.error_code) for p in created.partitions] == \
        [(i, node.broker_id, 0) for i in range(3)]
    topic = node.topic("asked")
    assert topic.partitions == 3 and topic.config.get("cleanup.policy") == "compact"  # the default topic configs
    assert node.metadata.get_topic_config("asked") is not None  # the cluster's, as a CreateTopics one
    again = _metadata(wire, "asked")
    assert again.error_code == 0 and again.topic_id == created.topic_id and len(again.partitions) == 3

    for version in (1, 3):  # before v4 a Metadata request has no flag: Kafka always creates
        assert _metadata(wire, f"old-v{version}", version).error_code == 0
        assert node.topic(f"old-v{version}").partitions == 3
    assert _metadata(wire, "v4-not-asked", 4, allow=False).error_code == UNKNOWN_TOPIC_OR_PARTITION


def test_a_bad_or_colliding_name_is_refused_and_nothing_is_created(three: tuple[Node, Wire]) -> None:
    node, wire = three
    for bad in ("bad name!", "..", "x" * 250):
        assert _metadata(wire, bad).error_code == INVALID_TOPIC_EXCEPTION, bad
    node.create_topic("orders.v1")
    assert _metadata(wire, "orders_v1").error_code == INVALID_TOPIC_EXCEPTION  # '.' and '_' collide, as in Kafka
    assert sorted(t.name for t in node.topics()) == ["orders.v1"]


def test_one_request_creates_a_bounded_number_of_topics_and_the_next_creates_the_rest(
        three: tuple[Node, Wire], monkeypatch: pytest.MonkeyPatch) -> None:
    """A Metadata request naming many new topics creates AUTO_CREATE_PER_REQUEST of them and answers the rest
    LEADER_NOT_AVAILABLE (retriable, as Kafka answers a topic being created), so its answer comes within a bound;
    the client's next request creates those."""
    import service.kafka.metadata_api as metadata_api

    node, wire = three
    monkeypatch.setattr(metadata_api, "AUTO_CREATE_PER_REQUEST", 3)
    names = [f"many-{i}" for i in range(5)]
    req = MetadataRequest(topics=[T(topic_id=None, name=n) for n in names], allow_auto_topic_creation=True,
                          include_topic_authorized_operations=False)
    first = wire.call(req, 12).topics
    assert [(t.name, t.error_code) for t in first] == [(n, 0) for n in names[:3]] + [(n, LEADER_NOT_AVAILABLE)
                                                                                      for n in names[3:]]
    assert sorted(t.name for t in node.topics()) == names[:3]
    again = wire.call(req, 12).topics
    assert [t.error_code for t in again] == [0] * 5 and sorted(t.name for t in node.topics()) == names


def test_concurrent_requests_for_one_new_topic_create_it_once(three: tuple[Node, Wire]) -> None:
    node, wire = three
    port = wire.sock.getpeername()[1]
    answers: list[Any] = []
    start = threading.Barrier(6)

    def ask() -> None:
        w = Wire(port)
        start.wait()
        answers.append(_metadata(w, "raced"))
        w.sock.close()

    threads = [threading.Thread(target=ask) for _ in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    assert [a.error_code for a in answers] == [0] * 6
    assert {len(a.partitions) for a in answers} == {3} and len({a.topic_id for a in answers}) == 1
    assert [t.name for t in node.topics()] == ["raced"]


def test_create_topics_without_a_count_uses_num_partitions(three: tuple[Node, Wire]) -> None:
    node, wire = three
    C = CreateTopicsRequest.CreatableTopic
    (result,) = wire.call(CreateTopicsRequest(topics=[C(name="sized", num_partitions=-1, replication_factor=-1,
                                                        assignments=[], configs=[])],
                                              timeout_ms=10_000, validate_only=False), 7).topics
    assert result.error_code == 0 and result.num_partitions == 3 and node.topic("sized").partitions == 3


def test_the_broker_describes_its_auto_create_settings(three: tuple[Node, Wire]) -> None:
    node, wire = three
    R = DescribeConfigsRequest.DescribeConfigsResource
    (res,) = wire.call(DescribeConfigsRequest(resources=[R(resource_type=4, resource_name=str(node.broker_id),
                                                           configuration_keys=["auto.create.topics.enable",
                                                                               "num.partitions"])],
                                              include_synonyms=False, include_documentation=False), 4).results
    assert {c.name: (c.value, c.read_only) for c in res.configs} == {
        "auto.create.topics.enable": ("true", True), "num.partitions": ("3", True)}


def test_a_node_with_auto_creation_off_answers_unknown_topic(tmp_path: Path) -> None:
    node, listener = _start(tmp_path, auto_create_topics_enable=False)
    wire = Wire(listener.port)
    try:
        for version in (1, 12):
            assert _metadata(wire, "never", version).error_code == UNKNOWN_TOPIC_OR_PARTITION
        assert node.topics() == []
    finally:
        wire.sock.close()
        listener.stop()
        node.shutdown()


def test_each_client_produces_to_a_topic_nobody_created(kafka_server: KafkaServe, topic_name: str) -> None:
    """Each library's producer sends keyed records to a new topic (as kafka-console-producer would), and its
    consumer reads them back: the producer's Metadata request created the topic with num.partitions (1)."""
    topics = {client: f"{topic_name}-{client}" for client in CLIENTS}
    records = [{"key": f"k{i}", "value": f"v{i}"} for i in range(5)]
    produced = run_clients([(client, {"action": "produce", "bootstrap": kafka_server.bootstrap,
                                      "topic": topics[client], "records": records}) for client in CLIENTS])
    for client, answer in zip(CLIENTS, produced, strict=True):
        assert answer["offsets"] == [[0, i] for i in range(5)], client
        assert kafka_server.api("GET", f"/v1/topics/{topics[client]}")["partitions"] == 1
    consumed = run_clients([(client, {"action": "consume", "bootstrap": kafka_server.bootstrap,
                                      "topic": topics[client]}) for client in CLIENTS])
    for client, answer in zip(CLIENTS, consumed, strict=True):
        assert [(r["offset"], r["key"], r["value"]) for r in answer["records"]] == \
            [(i, f"k{i}", f"v{i}") for i in range(5)], client
