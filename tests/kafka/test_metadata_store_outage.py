"""Metadata and the metadata store: every partition's leader read in one query a request, and, while the store
fails, the topics, leaders, brokers and topic ids read last (as Kafka's brokers answer from their metadata cache),
against an in-process node with its cluster registry and Kafka listener."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pytest
from kafka.protocol.metadata import MetadataRequest

from log.local_log import RecordSpec
from log.types import TopicPartition
from metadata.errors import MetadataStoreError
from service.kafka import metadata_api
from tests.kafka.wire import InProcessNode, Wire, fetch_from_start, record_bulk_leader_reads


def _answer(w: Wire, names: list[str] | None = None) -> dict[str, Any]:
    topics = None if names is None else [MetadataRequest.MetadataRequestTopic(topic_id=None, name=n) for n in names]
    meta = w.call(MetadataRequest(topics=topics, allow_auto_topic_creation=False,
                                  include_topic_authorized_operations=False), 12)
    return {"brokers": sorted((b.node_id, b.port) for b in meta.brokers), "controller": meta.controller_id,
            "topics": {t.name: (t.error_code, t.topic_id, sorted((p.partition_index, p.error_code, p.leader_id,
                                                                   p.leader_epoch) for p in t.partitions))
                       for t in meta.topics}}


@pytest.fixture
def node(tmp_path: Path) -> Any:
    n = InProcessNode(tmp_path / "data", f"sqlite:///{tmp_path / 'metadata.db'}", broker_id=5, cleaner_threads=0)
    yield n
    n.stop()


def test_metadata_reads_every_partitions_leader_in_one_query(node: InProcessNode,
                                                            monkeypatch: pytest.MonkeyPatch) -> None:
    """Regression: Metadata read each partition's leadership record with a query of its own, so an answer for a
    cluster of thousands of partitions took thousands of metadata-store round trips."""
    store = node.node.metadata
    for name, count in (("many-a", 6), ("many-b", 3)):
        node.node.create_topic(name, partitions=count)
    store.become_leader(TopicPartition("many-a", 4), 2, 5)
    queries = record_bulk_leader_reads(store, monkeypatch)
    w = node.wire()
    try:
        got = _answer(w)
        assert queries == [["many-a", "many-b"]]
        assert got["topics"]["many-a"][2] == [(p, 0, 5, 2 if p == 4 else 0) for p in range(6)]
        assert got["topics"]["many-b"][2] == [(p, 0, 5, 0) for p in range(3)]
        assert _answer(w, ["many-b"])["topics"]["many-b"][2] == [(p, 0, 5, 0) for p in range(3)]
        assert queries[-1] == ["many-b"]
        # above READ_ALL_ABOVE_TOPICS topics, every partition's record is read and the others are left out
        monkeypatch.setattr(metadata_api, "READ_ALL_ABOVE_TOPICS", 1)
        assert _answer(w) == got and queries[-1] is None
        assert _answer(w, ["many-b"])["topics"]["many-b"][2] == [(p, 0, 5, 0) for p in range(3)]
    finally:
        w.close()


def test_metadata_answers_what_it_read_last_while_the_store_fails(node: InProcessNode,
                                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    """Regression: with the metadata store failing, every Metadata request failed in its handler and the node closed
    the client's connection, so no client could find any leader, and a Fetch of local data failed once its
    partition's leader was a second old: the node answered nothing of the data it holds."""
    store = node.node.metadata
    node.node.create_topic("outage", partitions=3)
    store.become_leader(TopicPartition("outage", 1), 4, 5)
    node.node.produce("outage", 0, [RecordSpec(b"k", b"v")])
    w = node.wire()
    try:
        before = _answer(w)
        assert before["topics"]["outage"][2] == [(0, 0, 5, 0), (1, 0, 5, 4), (2, 0, 5, 0)]
        ((code, size),) = fetch_from_start(w, "outage", [0])
        assert code == 0 and size > 0

        def down(*_args: Any, **_kwargs: Any) -> Any:
            raise MetadataStoreError("injected: the metadata store is unreachable", retriable=True)

        for name in ("partition_versions", "leader_state", "list_topic_configs", "brokers", "topic_id", "topic_ids"):
            monkeypatch.setattr(store, name, down)
        time.sleep(1.1)  # past the registry's cache (1 s): the next reads go to the store, and fail
        assert _answer(w) == before  # the connection stays open, and answers what was read last
        assert fetch_from_start(w, "outage", [0]) == [(code, size)]  # the local data is still served, by its last-read leader
        assert _answer(w, ["outage"]) == {**before, "topics": {"outage": before["topics"]["outage"]}}
        monkeypatch.undo()
        node.node.create_topic("after", partitions=1)
        assert set(_answer(w)["topics"]) == {"outage", "after"}  # the store is back: read again
    finally:
        w.close()
