"""Fetch, ListOffsets, OffsetForLeaderEpoch and the topic admin APIs on the wire, against an in-process
listener over a real Node: requests and responses encoded by kafka-python's generated classes,
answers as Kafka gives them (error codes, offsets, stored batch bytes from both tiers)."""

from __future__ import annotations

import socket
import struct
import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest
from kafka.protocol.admin import (
    AlterConfigsRequest,
    AlterPartitionReassignmentsRequest,
    CreateAclsRequest,
    CreatePartitionsRequest,
    CreateTopicsRequest,
    DeleteAclsRequest,
    DeleteRecordsRequest,
    DeleteTopicsRequest,
    DescribeAclsRequest,
    DescribeConfigsRequest,
    DescribeLogDirsRequest,
    DescribeProducersRequest,
    ElectLeadersRequest,
    IncrementalAlterConfigsRequest,
    ListConfigResourcesRequest,
    ListPartitionReassignmentsRequest,
)
from kafka.protocol.consumer import FetchRequest, ListOffsetsRequest, OffsetForLeaderEpochRequest

from log.local_log import RecordSpec
from log.record import iter_batches
from service.config import load_config
from service.kafka.listener import KafkaListener, KafkaListenerConfig
from service.kafka.registry import response_class_for
from service.node import Node


class Wire:
    def __init__(self, port: int) -> None:
        self.sock = socket.create_connection(("127.0.0.1", port), timeout=30)
        self.cid = 0

    def call(self, req: Any, version: int) -> Any:
        self.cid += 1
        req.with_header(correlation_id=self.cid, client_id="k3-test")
        self.sock.sendall(req.encode(version=version, header=True, framed=True))
        size = struct.unpack(">i", self._read(4))[0]
        body = self._read(size)
        cls = response_class_for(type(req))
        assert struct.unpack_from(">i", body, 0)[0] == self.cid
        return cls.decode(body, version=version, header=True)

    def _read(self, n: int) -> bytes:
        buf = b""
        while len(buf) < n:
            chunk = self.sock.recv(n - len(buf))
            assert chunk, "connection closed"
            buf += chunk
        return buf


@pytest.fixture(scope="module")
def node(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Node]:
    """One node for the module (each test uses its own topics); no background cleaner, so what was
    produced stays to be read (a clean would remove superseded records)."""
    n = Node(load_config({"data_dir": tmp_path_factory.mktemp("wire") / "data", "cleaner_threads": 0}, env={}))
    n.start()
    yield n
    n.shutdown()


@pytest.fixture(scope="module")
def wire(node: Node) -> Iterator[Wire]:
    listener = KafkaListener(node, KafkaListenerConfig(host="127.0.0.1", port=0)).start()
    w = Wire(listener.port)
    yield w
    w.sock.close()
    listener.stop()


def _create(wire: Wire, name: str, configs: dict[str, str], partitions: int = 1, rf: int = -1,
            version: int = 7, validate_only: bool = False) -> Any:
    t = CreateTopicsRequest.CreatableTopic(name=name, num_partitions=partitions, replication_factor=rf,
                                           assignments=[], configs=[
                                               CreateTopicsRequest.CreatableTopic.CreatableTopicConfig(
                                                   name=k, value=v) for k, v in configs.items()])
    resp = wire.call(CreateTopicsRequest(topics=[t], timeout_ms=5000, validate_only=validate_only), version)
    return resp.topics[0]


def _fetch(wire: Wire, topic: str, offset: int, *, version: int = 12, max_wait_ms: int = 0, min_bytes: int = 0,
           partition_max_bytes: int = 1 << 20, isolation: int = 0, leader_epoch: int = -1) -> Any:
    P = FetchRequest.FetchTopic.FetchPartition
    req = FetchRequest(replica_id=-1, max_wait_ms=max_wait_ms, min_bytes=min_bytes, max_bytes=50 << 20,
                       isolation_level=isolation, session_id=0, session_epoch=-1,
                       topics=[FetchRequest.FetchTopic(topic=topic, partitions=[P(
                           partition=0, current_leader_epoch=leader_epoch, fetch_offset=offset, log_start_offset=-1,
                           partition_max_bytes=partition_max_bytes)])], forgotten_topics_data=[], rack_id="")
    return wire.call(req, version).responses[0].partitions[0]


def _list(wire: Wire, topic: str, ts: int, version: int = 7, isolation: int = 0) -> Any:
    P = ListOffsetsRequest.ListOffsetsTopic.ListOffsetsPartition
    req = ListOffsetsRequest(replica_id=-1, isolation_level=isolation, topics=[ListOffsetsRequest.ListOffsetsTopic(
        name=topic, partitions=[P(partition_index=0, current_leader_epoch=-1, timestamp=ts)])])
    return wire.call(req, version).topics[0].partitions[0]


def _produce(node: Node, topic: str, n: int, *, ts0: int = 1_000_000, per_batch: int = 3) -> None:
    for i in range(0, n, per_batch):
        node.produce(topic, 0, [RecordSpec(b"k%d" % (j % 4), b"v%d" % j, ts0 + j)
                                for j in range(i, min(n, i + per_batch))])


def _offsets(data: bytes) -> list[int]:
    return [f[0] for _p, b in iter_batches(data) for f in b.reader_fields()]


def test_topic_admin_answers_as_kafka(wire: Wire, node: Node) -> None:
    ok = _create(wire, "cdc", {"cleanup.policy": "compact", "remote.storage.enable": "true"}, partitions=2)
    assert (ok.error_code, ok.num_partitions, ok.replication_factor) == (0, 2, 1)
    assert {c.name: c.value for c in ok.configs}["remote.storage.enable"] == "true"
    assert _create(wire, "cdc", {}).error_code == 36  # TOPIC_ALREADY_EXISTS
    assert _create(wire, "bad", {"segment.bytes": "tiny"}).error_code == 40  # INVALID_CONFIG
    assert _create(wire, "bad", {"no.such.config": "1"}).error_code == 40
    refused = _create(wire, "bad", {}, rf=3)
    assert refused.error_code == 38  # INVALID_REPLICATION_FACTOR
    assert refused.error_message.startswith("Replication factor: 3")  # our words alone, no class name
    assert _create(wire, "bad/name", {}).error_code == 17  # INVALID_TOPIC_EXCEPTION
    assert _create(wire, "checked", {}, validate_only=True).error_code == 0
    assert "checked" not in [t.name for t in node.topics()]

    R = DescribeConfigsRequest.DescribeConfigsResource
    desc = wire.call(DescribeConfigsRequest(resources=[R(resource_type=2, resource_name="cdc",
                                                         configuration_keys=None)],
                                            include_synonyms=True, include_documentation=True), 4).results[0]
    entries = {c.name: c for c in desc.configs}
    assert desc.error_code == 0 and entries["cleanup.policy"].value == "compact"
    assert entries["cleanup.policy"].config_source == 1 and entries["segment.bytes"].config_source == 5
    missing = wire.call(DescribeConfigsRequest(resources=[R(resource_type=2, resource_name="nope",
                                                            configuration_keys=None)]), 4).results[0]
    assert missing.error_code == 3

    IR = IncrementalAlterConfigsRequest.AlterConfigsResource
    IC = IR.AlterableConfig

    def incr(*ops: tuple[str, int, str | None]) -> int:
        r = IR(resource_type=2, resource_name="cdc", configs=[IC(name=n, config_operation=o, value=v)
                                                              for n, o, v in ops])
        return wire.call(IncrementalAlterConfigsRequest(resources=[r], validate_only=False), 1).responses[0].error_code

    assert incr(("min.cleanable.dirty.ratio", 0, "0.2")) == 0
    assert node.topic("cdc").config.get("min.cleanable.dirty.ratio") == 0.2
    assert incr(("min.cleanable.dirty.ratio", 0, "7")) == 40
    assert incr(("cleanup.policy", 2, "delete")) == 0
    assert node.topic("cdc").config.get("cleanup.policy") == "compact,delete"
    assert incr(("segment.bytes", 2, "5")) == 42  # append only to list keys: INVALID_REQUEST
    assert incr(("remote.storage.enable", 0, "false")) == 40  # Kafka refuses turning tiering off

    AR = AlterConfigsRequest.AlterConfigsResource
    alter = AlterConfigsRequest(resources=[AR(resource_type=2, resource_name="cdc", configs=[
        AR.AlterableConfig(name="remote.storage.enable", value="true")])], validate_only=False)
    assert wire.call(alter, 2).responses[0].error_code == 0
    assert dict(node.topic("cdc").config.overrides) == {"remote.storage.enable": True}  # a replacement

    CP = CreatePartitionsRequest.CreatePartitionsTopic

    def grow(count: int) -> int:
        req = CreatePartitionsRequest(topics=[CP(name="cdc", count=count, assignments=None)], timeout_ms=5000,
                                      validate_only=False)
        return wire.call(req, 3).results[0].error_code

    assert grow(3) == 0 and node.topic("cdc").partitions == 3
    assert grow(2) == 37 and grow(3) == 37  # INVALID_PARTITIONS

    resp = wire.call(DeleteTopicsRequest(topic_names=["cdc", "nope"], timeout_ms=5000), 5)
    assert [(r.name, r.error_code) for r in resp.responses] == [("cdc", 0), ("nope", 3)]
    assert "cdc" not in [t.name for t in node.topics()]


def test_topic_admin_refuses_duplicates_collisions_and_null_values_as_kafka(wire: Wire, node: Node) -> None:
    """Kafka's controller answers a name listed twice once, with INVALID_REQUEST, and acts on neither entry; a name
    that differs from an existing topic's only by '.' against '_' is INVALID_TOPIC_EXCEPTION; a null config value is
    INVALID_CONFIG at creation and INVALID_REQUEST in AlterConfigs and in a non-DELETE IncrementalAlterConfigs."""
    CT = CreateTopicsRequest.CreatableTopic
    twice = [CT(name="dup.t", num_partitions=1, replication_factor=-1, assignments=[], configs=[]),
             CT(name="dup.t", num_partitions=2, replication_factor=-1, assignments=[], configs=[]),
             CT(name="once.t", num_partitions=1, replication_factor=-1, assignments=[], configs=[])]
    resp = wire.call(CreateTopicsRequest(topics=twice, timeout_ms=5000, validate_only=False), 7)
    assert [(t.name, t.error_code) for t in resp.topics] == [("dup.t", 42), ("once.t", 0)]
    assert "dup.t" not in [t.name for t in node.topics()] and node.metadata.get_topic_config("dup.t") is None

    collides = _create(wire, "once_t", {})
    assert collides.error_code == 17 and "collides with existing topic: once.t" in collides.error_message
    assert _create(wire, "once_t", {}, validate_only=True).error_code == 17
    assert "once_t" not in [t.name for t in node.topics()] and node.metadata.get_topic_config("once_t") is None

    CP = CreatePartitionsRequest.CreatePartitionsTopic
    grow = wire.call(CreatePartitionsRequest(topics=[CP(name="once.t", count=2, assignments=None)] * 2,
                                             timeout_ms=5000, validate_only=False), 3)
    assert [(r.name, r.error_code) for r in grow.results] == [("once.t", 42)] and node.topic("once.t").partitions == 1

    null = CT(name="nulls", num_partitions=1, replication_factor=-1, assignments=[],
              configs=[CT.CreatableTopicConfig(name="retention.ms", value=None)])
    made = wire.call(CreateTopicsRequest(topics=[null], timeout_ms=5000, validate_only=False), 7).topics[0]
    assert made.error_code == 40 and "Null value not supported" in made.error_message

    AR = AlterConfigsRequest.AlterConfigsResource
    alter = AlterConfigsRequest(resources=[AR(resource_type=2, resource_name="once.t", configs=[
        AR.AlterableConfig(name="retention.ms", value=None)])], validate_only=False)
    answer = wire.call(alter, 2).responses[0]
    assert answer.error_code == 42 and "Null value not supported for : retention.ms" in answer.error_message
    IR = IncrementalAlterConfigsRequest.AlterConfigsResource
    for op, code in ((0, 42), (2, 42), (3, 42), (1, 0)):  # SET, APPEND, SUBTRACT: refused; DELETE takes no value
        r = IR(resource_type=2, resource_name="once.t",
               configs=[IR.AlterableConfig(name="cleanup.policy", config_operation=op, value=None)])
        assert wire.call(IncrementalAlterConfigsRequest(resources=[r], validate_only=False),
                         1).responses[0].error_code == code, op

    deleted = wire.call(DeleteTopicsRequest(topic_names=["once.t", "once.t"], timeout_ms=5000), 5)
    assert [(r.name, r.error_code) for r in deleted.responses] == [("once.t", 42)]
    assert "once.t" in [t.name for t in node.topics()]
    node.delete_topic("once.t")


def test_create_topics_answers_topic_already_exists_for_a_topic_another_node_stored(wire: Wire, node: Node) -> None:
    """A topic is the cluster's: one that another node created (in the shared metadata store, not yet learned here)
    already exists for Kafka's CreateTopics, whatever its config (the HTTP API's create joins it instead)."""
    from metadata.topic_configs import StoredTopic

    node.metadata.put_topic_config(StoredTopic("elsewhere", 1, {}))
    try:
        assert _create(wire, "elsewhere", {}).error_code == 36
        assert "elsewhere" not in [t.name for t in node.topics()]
        assert _create(wire, "elsewhere", {}, validate_only=True).error_code == 36
    finally:
        node.metadata.record_topic_deletion("elsewhere", broker_id=node.broker_id)


def test_authorized_operations_are_every_supported_one_when_asked(wire: Wire, node: Node) -> None:
    """No authorizer: Metadata and DescribeCluster answer every operation Kafka supports on a topic and on the
    cluster when the request asks (AuthHelper.authorizedOperations), Integer.MIN_VALUE when it does not."""
    from kafka.protocol.admin import DescribeClusterRequest
    from kafka.protocol.metadata import MetadataRequest

    node.create_topic("ops")
    topic_ops = {3, 4, 5, 6, 7, 8, 10, 11}  # kafka-python decodes a bitfield as its set bits, MIN_VALUE as None
    cluster_ops = {5, 7, 8, 9, 10, 11, 12}
    T = MetadataRequest.MetadataRequestTopic
    for asked in (True, False):
        meta = wire.call(MetadataRequest(topics=[T(topic_id=None, name="ops")], allow_auto_topic_creation=False,
                                         include_cluster_authorized_operations=asked,
                                         include_topic_authorized_operations=asked), 10)
        # (kafka-python's name for TopicAuthorizedOperations and ClusterAuthorizedOperations)
        assert meta.topics[0].authorized_operations == (topic_ops if asked else None)
        assert meta.authorized_operations == (cluster_ops if asked else None)
        described = wire.call(DescribeClusterRequest(include_cluster_authorized_operations=asked, endpoint_type=1), 1)
        assert described.authorized_operations == (cluster_ops if asked else None)
    node.delete_topic("ops")


def test_a_deleted_topic_gets_a_new_id_when_created_again(node: Node) -> None:
    """The node's metadata store is the cluster registry; deleting a topic (HTTP DELETE and DeleteTopics
    both run Node.delete_topic) forgets its stored id and the listener's cached one."""
    from service.kafka.cluster import ClusterMembership
    from service.kafka.registry import BrokerInfo

    membership = ClusterMembership(node.metadata, BrokerInfo(node.broker_id, "127.0.0.1", 9092), clock=node.clock)
    node.topic_deleted_listeners.append(membership.drop_cached_topic_id)
    try:
        node.create_topic("reborn")
        first = membership.topic_id("reborn")
        assert node.metadata.topic_ids()["reborn"] == first
        node.delete_topic("reborn")
        assert "reborn" not in node.metadata.topic_ids()
        node.create_topic("reborn")
        assert membership.topic_id("reborn") != first
    finally:
        node.topic_deleted_listeners.remove(membership.drop_cached_topic_id)


def test_fetch_list_offsets_and_epochs(wire: Wire, node: Node) -> None:
    assert _create(wire, "t", {"cleanup.policy": "compact"}).error_code == 0
    _produce(node, "t", 10)
    log = node.log("t", 0)
    part = _fetch(wire, "t", 4)  # offset 4 is inside the batch [3, 5]: the whole batch comes
    assert part.error_code == 0 and part.high_watermark == 10 and part.log_start_offset == 0
    assert _offsets(part.records) == list(range(3, 10))
    assert part.aborted_transactions is None
    committed = _fetch(wire, "t", 0, isolation=1)
    assert committed.aborted_transactions == [] and committed.last_stable_offset == 10
    small = _fetch(wire, "t", 0, partition_max_bytes=1)  # at least one whole batch
    assert _offsets(small.records) == [0, 1, 2]
    assert _fetch(wire, "t", 11).error_code == 1  # OFFSET_OUT_OF_RANGE
    assert _fetch(wire, "nope", 0).error_code == 3
    assert _fetch(wire, "t", 10).records in (b"", None)
    for v in (4, 7, 11):
        assert _offsets(_fetch(wire, "t", 0, version=v).records) == list(range(10))

    started = time.monotonic()  # nothing to read: the poll ends at max_wait_ms, empty
    assert _fetch(wire, "t", 10, max_wait_ms=300, min_bytes=1).records in (b"", None)
    assert time.monotonic() - started >= 0.25
    # the long poll wakes on an append
    threading.Timer(0.3, _produce, args=(node, "t", 2)).start()
    started = time.monotonic()
    polled = _fetch(wire, "t", 10, max_wait_ms=5000, min_bytes=1)
    assert _offsets(polled.records) == [10, 11] and time.monotonic() - started < 4

    assert (_list(wire, "t", -2).offset, _list(wire, "t", -1).offset) == (0, 12)
    by_ts = _list(wire, "t", 1_000_004)
    assert (by_ts.offset, by_ts.timestamp) == (4, 1_000_004)
    assert _list(wire, "t", 9_999_999).offset == -1
    top = _list(wire, "t", -3)
    assert (top.offset, top.timestamp) == (9, 1_000_009)
    for v in (1, 4):
        assert _list(wire, "t", -1, version=v).offset == 12

    epoch = log.leader_epoch
    # a partition no leadership was registered for is at epoch 0, as Metadata says: ListOffsets and the batches agree
    assert epoch == 0 and (_list(wire, "t", -1).leader_epoch, _list(wire, "t", -2).leader_epoch) == (0, 0)
    assert {b.partition_leader_epoch for _p, b in iter_batches(_fetch(wire, "t", 0).records)} == {0}
    P = OffsetForLeaderEpochRequest.OffsetForLeaderTopic.OffsetForLeaderPartition
    req = OffsetForLeaderEpochRequest(replica_id=-1, topics=[OffsetForLeaderEpochRequest.OffsetForLeaderTopic(
        topic="t", partitions=[P(partition=0, current_leader_epoch=-1, leader_epoch=max(epoch, 0))])])
    got = wire.call(req, 4).topics[0].partitions[0]
    if epoch >= 0:
        assert (got.error_code, got.leader_epoch, got.end_offset) == (0, epoch, 12)
    else:
        assert (got.error_code, got.end_offset) == (0, -1)


def test_fetch_and_timestamps_from_the_remote_tier(wire: Wire, node: Node) -> None:
    assert _create(wire, "tiered", {"cleanup.policy": "compact,delete", "remote.storage.enable": "true",
                                    "local.retention.ms": "0", "retention.ms": "-1"}).error_code == 0
    _produce(node, "tiered", 12)
    node.roll("tiered", 0)
    _produce(node, "tiered", 3, ts0=2_000_000)
    node.tier("tiered", 0)
    log = node.log("tiered", 0)
    assert log.log_start_offset == 12  # the local copies of [0, 11] are gone
    part = _fetch(wire, "tiered", 4)
    assert part.error_code == 0 and part.log_start_offset == 0 and part.high_watermark == 15
    assert _offsets(part.records)[0] == 3
    seen, off = [], 0
    while off < 15:
        data = _fetch(wire, "tiered", off).records
        batches = [b for _p, b in iter_batches(data)]
        seen += [f[0] for b in batches for f in b.reader_fields() if f[0] >= off]
        off = batches[-1].next_offset
    assert seen == list(range(15))
    assert _list(wire, "tiered", -2).offset == 0
    assert _list(wire, "tiered", 1_000_007).offset == 7
    assert _list(wire, "tiered", 1_500_000).offset == 12


def test_max_timestamp_names_the_record_that_holds_it_in_both_tiers(wire: Wire, node: Node) -> None:
    """KIP-734's MAX_TIMESTAMP answers the offset of the record with the largest timestamp, not its batch's last
    offset (KAFKA-16310): a batch whose largest timestamp is in its middle, read locally, then from the remote tier."""
    assert _create(wire, "maxts", {"cleanup.policy": "delete", "remote.storage.enable": "true",
                                   "local.retention.ms": "0", "retention.ms": "-1"}).error_code == 0
    node.produce("maxts", 0, [RecordSpec(b"a", b"0", 3_000_000), RecordSpec(b"b", b"1", 3_050_000),
                              RecordSpec(b"c", b"2", 3_020_000)])
    node.produce("maxts", 0, [RecordSpec(b"d", b"3", 3_010_000)])
    top = _list(wire, "maxts", -3)
    assert (top.offset, top.timestamp) == (1, 3_050_000)
    node.roll("maxts", 0)
    node.tier("maxts", 0)
    assert node.log("maxts", 0).log_start_offset == 4  # only the remote tier holds offsets 0-3 now
    node.produce("maxts", 0, [RecordSpec(b"e", b"4", 3_001_000)])
    top = _list(wire, "maxts", -3)
    assert (top.offset, top.timestamp) == (1, 3_050_000)


def test_spliced_records_encode_as_the_library_does() -> None:
    from kafka.protocol.consumer import FetchResponse

    from service.kafka.fetch import _response, _Want

    P = FetchResponse.FetchableTopicResponse.PartitionData
    payloads = [b"a" * 5000, b"", b"b" * 200, b"c" * 70000]
    wants = [_Want("t", i, 0, 1 << 20) for i in range(3)] + [_Want("u", 0, 0, 1 << 20)]
    for version in (4, 11, 12):
        def parts() -> list:
            return [P(partition_index=w.partition, error_code=0, high_watermark=9, last_stable_offset=9,
                      log_start_offset=0, aborted_transactions=None, records=d)
                    for w, d in zip(wants, payloads, strict=True)]
        spliced = _response(wants, parts())
        assert type(spliced).__name__ == "SplicedFetchResponse"
        plain = FetchResponse(throttle_time_ms=0, error_code=0, session_id=0, responses=[
            FetchResponse.FetchableTopicResponse(topic="t", partitions=parts()[:3]),
            FetchResponse.FetchableTopicResponse(topic="u", partitions=parts()[3:])])
        assert spliced.encode(version=version) == plain.encode(version=version), version
        # what a metrics collector reads is the response's own records, before and after encoding
        assert [len(p.records) for t in spliced.responses for p in t.partitions] == [len(d) for d in payloads]


def test_leadership_and_leader_epochs_as_kip_320(wire: Wire, node: Node) -> None:
    from service.kafka.leader_cache import leader_cache

    assert _create(wire, "moved", {"cleanup.policy": "compact", "remote.storage.enable": "true"}).error_code == 0
    _produce(node, "moved", 3)
    node.become_leader("moved", 0, 3, node.broker_id)
    leader_cache(node, None).forget()  # the leader is cached for LEADER_TTL_S
    assert _fetch(wire, "moved", 0, leader_epoch=3).error_code == 0
    assert _fetch(wire, "moved", 0, leader_epoch=2).error_code == 74  # FENCED_LEADER_EPOCH
    assert _fetch(wire, "moved", 0, leader_epoch=4).error_code == 75  # UNKNOWN_LEADER_EPOCH
    _produce(node, "moved", 2)
    P = OffsetForLeaderEpochRequest.OffsetForLeaderTopic.OffsetForLeaderPartition

    def epoch_end(epoch: int) -> tuple[int, int, int]:
        req = OffsetForLeaderEpochRequest(replica_id=-1, topics=[OffsetForLeaderEpochRequest.OffsetForLeaderTopic(
            topic="moved", partitions=[P(partition=0, current_leader_epoch=3, leader_epoch=epoch)])])
        got = wire.call(req, 4).topics[0].partitions[0]
        return got.error_code, got.leader_epoch, got.end_offset

    assert epoch_end(3) == (0, 3, 5)
    assert epoch_end(2)[2] == 3  # an older epoch ends where epoch 3 starts
    node.become_leader("moved", 0, 4, node.broker_id + 7)  # another broker (not alive here) leads now
    leader_cache(node, None).forget()
    assert _fetch(wire, "moved", 0).error_code == 5  # LEADER_NOT_AVAILABLE: its leader is not registered
    assert _list(wire, "moved", -1).error_code == 5


def test_open_transaction_bounds_read_committed_and_response_limits(wire: Wire, node: Node) -> None:
    assert _create(wire, "txn", {"cleanup.policy": "compact"}, partitions=2).error_code == 0
    _produce(node, "txn", 3)
    node.produce("txn", 0, [RecordSpec(b"t", b"open", None)], producer_id=77, producer_epoch=0, base_sequence=0,
                 transactional=True)
    _produce(node, "txn", 3)
    committed = _fetch(wire, "txn", 0, isolation=1)
    assert committed.last_stable_offset == 3 and committed.high_watermark == 7
    assert _offsets(committed.records) == [0, 1, 2]
    assert _offsets(_fetch(wire, "txn", 0).records) == list(range(7))
    assert _list(wire, "txn", -1, isolation=1).offset == 3 and _list(wire, "txn", -1).offset == 7
    node.append_marker("txn", 0, 77, 0, "abort")
    committed = _fetch(wire, "txn", 0, isolation=1)
    assert committed.last_stable_offset == 8
    assert [(t.producer_id, t.first_offset) for t in committed.aborted_transactions] == [(77, 3)]

    # the response limit: the first partition with data gets a whole batch, the next nothing
    for p in (0, 1):
        node.produce("txn", p, [RecordSpec(b"big", b"x" * 3000, None)])
    P = FetchRequest.FetchTopic.FetchPartition
    req = FetchRequest(replica_id=-1, max_wait_ms=0, min_bytes=0, max_bytes=100, isolation_level=0, session_id=0,
                       session_epoch=-1, topics=[FetchRequest.FetchTopic(topic="txn", partitions=[
                           P(partition=1, current_leader_epoch=-1, fetch_offset=0, log_start_offset=-1,
                             partition_max_bytes=1 << 20),
                           P(partition=0, current_leader_epoch=-1, fetch_offset=8, log_start_offset=-1,
                             partition_max_bytes=1 << 20)])], forgotten_topics_data=[], rack_id="")
    parts = wire.call(req, 12).responses[0].partitions
    assert [p.partition_index for p in parts] == [1, 0]
    assert _offsets(parts[0].records) == [0] and parts[1].records in (b"", None)
    assert parts[1].high_watermark == 9 and parts[1].error_code == 0


def test_hostile_values_get_error_codes_and_the_connection_stays(wire: Wire, node: Node) -> None:
    import random

    rng = random.Random(7)
    assert _create(wire, "hostile", {"cleanup.policy": "compact"}).error_code == 0
    _produce(node, "hostile", 5)
    weird = [-(2**63), -(2**31), -3, -1, 0, 1, 4, 5, 6, 2**31 - 1, 2**62]
    P = FetchRequest.FetchTopic.FetchPartition
    for _ in range(60):
        topic = rng.choice(["hostile", "nope", "", "a" * 249, "bad name!"])
        req = FetchRequest(replica_id=rng.choice([-1, 0, 5]), max_wait_ms=rng.choice([0, -5, 1]),
                           min_bytes=rng.choice([0, -1, 1 << 30]), max_bytes=rng.choice([0, -1, 1, 2**31 - 1]),
                           isolation_level=rng.choice([0, 1, 7]), session_id=rng.choice([0, 9]),
                           session_epoch=rng.choice([-1, 0, 3]), topics=[FetchRequest.FetchTopic(
                               topic=topic, partitions=[P(partition=rng.choice([0, 1, -1, 2**31 - 1]),
                                                          current_leader_epoch=rng.choice([-1, 0, 2**31 - 1]),
                                                          fetch_offset=rng.choice(weird), log_start_offset=-1,
                                                          partition_max_bytes=rng.choice([0, -1, 1, 2**31 - 1]))
                                                        for _ in range(rng.randint(0, 3))])],
                           forgotten_topics_data=[], rack_id="")
        resp = wire.call(req, rng.choice([4, 7, 11, 12]))
        for t in resp.responses:
            for p in t.partitions:
                assert p.error_code in (0, 1, 3, 74, 75), p
        assert _list(wire, topic or "x", rng.choice(weird)).error_code in (0, 3, 35, 42)
    assert _offsets(_fetch(wire, "hostile", 0).records) == [0, 1, 2, 3, 4]  # still served


def _delete_records(wire: Wire, topic: str, offset: int, version: int = 2, partition: int = 0) -> Any:
    T = DeleteRecordsRequest.DeleteRecordsTopic
    req = DeleteRecordsRequest(topics=[T(name=topic, partitions=[T.DeleteRecordsPartition(
        partition_index=partition, offset=offset)])], timeout_ms=5000)
    return wire.call(req, version).topics[0].partitions[0]


@pytest.mark.parametrize("version", [0, 1, 2])
def test_delete_records_moves_the_log_start_as_kafka(wire: Wire, node: Node, version: int) -> None:
    topic = f"purge-v{version}"
    assert _create(wire, topic, {"cleanup.policy": "delete", "retention.ms": "-1"}).error_code == 0
    _produce(node, topic, 6)
    node.roll(topic, 0)
    _produce(node, topic, 6, ts0=2_000_000)
    node.roll(topic, 0)
    _produce(node, topic, 3, ts0=3_000_000)  # a segment at 0, then at 6, ...
    got = _delete_records(wire, topic, 7, version)
    assert (got.error_code, got.low_watermark) == (0, 7)
    part = _fetch(wire, topic, 6)
    assert part.error_code == 1  # OFFSET_OUT_OF_RANGE
    part = _fetch(wire, topic, 7)
    assert part.error_code == 0 and part.log_start_offset == 7
    assert _offsets(part.records)[:2] == [6, 7]  # the whole batch holding offset 7, as Kafka serves it
    assert _list(wire, topic, -2).offset == 7
    assert _list(wire, topic, 1_000_001).offset == 7  # by timestamp: never below the start
    # retention removes the segment wholly below the start, keeps the one holding it
    node.log(topic, 0).delete_old_segments()
    assert node.log(topic, 0).all_segments()[0].base_offset == 6
    # never backwards; -1 is the high watermark; past it or below -1 is OFFSET_OUT_OF_RANGE
    assert _delete_records(wire, topic, 2, version).low_watermark == 7
    assert _delete_records(wire, topic, 16, version).error_code == 1
    assert _delete_records(wire, topic, -2, version).error_code == 1
    assert _delete_records(wire, topic, -1, version).low_watermark == 15
    assert _fetch(wire, topic, 15).error_code == 0 and _list(wire, topic, -2).offset == 15
    # a compacted topic's records go by tombstones, not by offset (Kafka's POLICY_VIOLATION)
    assert _create(wire, f"{topic}-c", {"cleanup.policy": "compact"}).error_code == 0
    _produce(node, f"{topic}-c", 3)
    got = _delete_records(wire, f"{topic}-c", 1, version)
    assert (got.error_code, got.low_watermark) == (44, -1)
    assert node.log(f"{topic}-c", 0).log_start_offset == 0
    assert _delete_records(wire, "no-such-topic", 1, version).error_code == 3
    assert _delete_records(wire, topic, 1, version, partition=5).error_code == 3


@pytest.mark.parametrize("version", [1, 4, 5])
def test_describe_log_dirs_gives_the_data_dir_and_local_sizes(wire: Wire, node: Node, version: int) -> None:
    topic = f"sizes-v{version}"
    assert _create(wire, topic, {"cleanup.policy": "compact"}, partitions=2).error_code == 0
    _produce(node, topic, 9)
    T = DescribeLogDirsRequest.DescribableLogDirTopic
    resp = wire.call(DescribeLogDirsRequest(topics=[T(topic=topic, partitions=[0, 1, 7]),
                                                    T(topic="no-such-topic", partitions=[0])]), version)
    (result,) = resp.results
    assert result.error_code == 0 and result.log_dir == str(node.data_dir.resolve())
    ((name, parts),) = [(t.name, t.partitions) for t in result.topics]
    assert name == topic
    sizes = {p.partition_index: (p.partition_size, p.offset_lag, p.is_future_key) for p in parts}
    assert sizes == {0: (node.log(topic, 0).size_in_bytes(), 0, False), 1: (0, 0, False)}
    assert sizes[0][0] > 0
    if version >= 4:
        assert result.total_bytes > result.usable_bytes > 0
    every = wire.call(DescribeLogDirsRequest(topics=None), version).results[0]
    assert topic in {t.name for t in every.topics}


def test_describe_producers_shows_the_active_producers_and_an_open_transaction(wire: Wire, node: Node) -> None:
    topic = "producers"
    assert _create(wire, topic, {"cleanup.policy": "compact"}).error_code == 0
    node.produce(topic, 0, [RecordSpec(b"k", b"v1"), RecordSpec(b"k", b"v2")], producer_id=7, producer_epoch=3,
                 base_sequence=0)
    node.produce(topic, 0, [RecordSpec(b"t", b"v")], producer_id=9, producer_epoch=1, base_sequence=0,
                 transactional=True)
    T = DescribeProducersRequest.TopicRequest
    resp = wire.call(DescribeProducersRequest(topics=[T(name=topic, partition_indexes=[0, 4]),
                                                      T(name="no-such-topic", partition_indexes=[0])]), 0)
    (ok, bad), (missing,) = resp.topics[0].partitions, resp.topics[1].partitions
    assert ok.error_code == 0 and bad.error_code == 3 and missing.error_code == 3
    got = [(p.producer_id, p.producer_epoch, p.last_sequence, p.current_txn_start_offset) for p in ok.active_producers]
    assert got == [(7, 3, 1, -1), (9, 1, 0, 2)]  # producer 9's transaction is open from offset 2
    assert all(p.last_timestamp > 0 for p in ok.active_producers)


@pytest.mark.parametrize("version", [1, 3])
def test_acl_apis_answer_security_disabled_as_a_broker_without_authorizer(wire: Wire, version: int) -> None:
    described = wire.call(DescribeAclsRequest(resource_type_filter=1, resource_name_filter=None, pattern_type_filter=1,
                                              principal_filter=None, host_filter=None, operation=1,
                                              permission_type=1), version)
    assert described.error_code == 54 and described.resources == []
    creation = CreateAclsRequest.AclCreation(resource_type=2, resource_name="t", resource_pattern_type=3,
                                             principal="User:alice", host="*", operation=3, permission_type=3)
    created = wire.call(CreateAclsRequest(creations=[creation, creation]), version)
    assert [r.error_code for r in created.results] == [54, 54]
    flt = DeleteAclsRequest.DeleteAclsFilter(resource_type_filter=1, resource_name_filter=None,
                                             pattern_type_filter=1, principal_filter=None, host_filter=None,
                                             operation=1, permission_type=1)
    deleted = wire.call(DeleteAclsRequest(filters=[flt]), version)
    assert [r.error_code for r in deleted.filter_results] == [54]


@pytest.mark.parametrize("version", [0, 1, 2])
def test_elect_leaders_on_partitions_whose_only_replica_leads(wire: Wire, node: Node, version: int) -> None:
    topic = f"elect-v{version}"
    assert _create(wire, topic, {"cleanup.policy": "compact"}, partitions=2).error_code == 0
    T = ElectLeadersRequest.TopicPartitions
    fields: dict[str, Any] = {"election_type": 1} if version >= 1 else {}
    resp = wire.call(ElectLeadersRequest(topic_partitions=[T(topic=topic, partitions=[0, 1, 9]),
                                                           T(topic="no-such-topic", partitions=[0])],
                                         timeout_ms=5000, **fields), version)
    codes = {(r.topic, p.partition_id): p.error_code for r in resp.replica_election_results for p in r.partition_result}
    assert codes == {(topic, 0): 84, (topic, 1): 84, (topic, 9): 3, ("no-such-topic", 0): 3}  # ELECTION_NOT_NEEDED
    # a partition whose leader (its only replica) is not alive: no election can help
    dead = f"{topic}-dead"
    assert _create(wire, dead, {"cleanup.policy": "compact", "remote.storage.enable": "true"}).error_code == 0
    node.become_leader(dead, 0, 1, node.broker_id + 77)
    not_available = 83 if version >= 1 else 80  # ELIGIBLE_ / PREFERRED_LEADER_NOT_AVAILABLE
    resp = wire.call(ElectLeadersRequest(topic_partitions=[T(topic=dead, partitions=[0])], timeout_ms=5000,
                                         **fields), version)
    assert resp.replica_election_results[0].partition_result[0].error_code == not_available
    # every partition: those that need no election are left out, as Kafka's controller answers
    every = wire.call(ElectLeadersRequest(topic_partitions=None, timeout_ms=5000, **fields), version)
    codes = {(r.topic, p.partition_id): p.error_code for r in every.replica_election_results
             for p in r.partition_result}
    assert codes[(dead, 0)] == not_available and (topic, 0) not in codes
    assert set(codes.values()) == {not_available}


@pytest.mark.parametrize("version", [0, 1])
def test_partition_reassignments_of_partitions_whose_only_replica_leads(wire: Wire, node: Node, version: int) -> None:
    topic = f"reassign-v{version}"
    assert _create(wire, topic, {"cleanup.policy": "compact"}, partitions=3).error_code == 0
    me = node.broker_id
    T = AlterPartitionReassignmentsRequest.ReassignableTopic
    P = T.ReassignablePartition
    fields: dict[str, Any] = {"allow_replication_factor_change": False} if version >= 1 else {}
    wanted = {0: [me], 1: None, 2: [me, me + 1], 9: [me]}
    resp = wire.call(AlterPartitionReassignmentsRequest(timeout_ms=5000, topics=[
        T(name=topic, partitions=[P(partition_index=i, replicas=r) for i, r in wanted.items()]),
        T(name="no-such-topic", partitions=[P(partition_index=0, replicas=[me])])], **fields), version)
    assert resp.error_code == 0
    got = {(t.name, p.partition_index): (p.error_code, p.error_message) for t in resp.responses for p in t.partitions}
    assert got[(topic, 0)] == (0, None)  # the replica set it has: done at once
    assert got[(topic, 1)][0] == 85  # NO_REASSIGNMENT_IN_PROGRESS: nothing to cancel
    # broker me+1 is not registered: INVALID_REPLICA_ASSIGNMENT, Kafka's message (checked before the factor, as Kafka)
    assert got[(topic, 2)] == (39, f"The manual partition assignment includes broker {me + 1}, but no such broker "
                                   "is registered.")
    assert got[(topic, 9)][0] == 3 and got[("no-such-topic", 0)][0] == 3  # UNKNOWN_TOPIC_OR_PARTITION
    bad = wire.call(AlterPartitionReassignmentsRequest(timeout_ms=5000, topics=[
        T(name=topic, partitions=[P(partition_index=0, replicas=[]), P(partition_index=1, replicas=[me, me])])]), 0)
    codes = [(p.error_code, p.error_message) for p in bad.responses[0].partitions]
    assert codes[0] == (39, "The manual partition assignment includes an empty replica list.")
    assert codes[1] == (39, f"The manual partition assignment includes the broker {me} more than once.")
    # partition 2's leadership record names broker me+5 (not alive, so not registered): that is its one replica
    node.become_leader(topic, 2, 1, me + 5)
    moved = wire.call(AlterPartitionReassignmentsRequest(timeout_ms=5000, topics=[
        T(name=topic, partitions=[P(partition_index=2, replicas=[me + 5]), P(partition_index=2, replicas=[me]),
                                  P(partition_index=2, replicas=[me + 5, me])])], **fields), version)
    answers = [(p.error_code, p.error_message) for p in moved.responses[0].partitions]
    assert answers[0] == (0, None)
    # another broker, or more replicas: refused, naming where a partition moves instead (v1 with
    # allow_replication_factor_change false: a second replica is INVALID_REPLICATION_FACTOR, as Kafka)
    assert answers[1][0] == 39 and f"POST /v1/topics/{topic}/partitions/2/leadership" in answers[1][1]
    if version >= 1:
        assert answers[2] == (38, "The replication factor is changed from 1 to 2")
    else:
        assert answers[2][0] == 39 and f"cannot be reassigned to [{me + 5}, {me}]" in answers[2][1]
    # none is ever in progress, listed for every topic or for some
    L = ListPartitionReassignmentsRequest
    for topics in (None, [L.ListPartitionReassignmentsTopics(name=topic, partition_indexes=[0, 1, 2])]):
        listed = wire.call(L(timeout_ms=5000, topics=topics), 0)
        assert (listed.error_code, listed.topics) == (0, [])


def test_describe_topic_partitions_pages_metadatas_partitions_by_cursor(wire: Wire, node: Node) -> None:
    from kafka.protocol.admin.topics import DescribeTopicPartitionsRequest as DTP
    from kafka.protocol.metadata import MetadataRequest

    assert _create(wire, "dtp-a", {"cleanup.policy": "compact"}, partitions=3).error_code == 0
    assert _create(wire, "dtp-b", {"cleanup.policy": "compact"}, partitions=2).error_code == 0

    def describe(names: list[str], limit: int = 2000, cursor: tuple[str, int] | None = None) -> Any:
        c = DTP.Cursor(topic_name=cursor[0], partition_index=cursor[1]) if cursor else None
        return wire.call(DTP(topics=[DTP.TopicRequest(name=n) for n in names], response_partition_limit=limit,
                             cursor=c), 0)

    def seen(resp: Any) -> list[tuple[str, int, int]]:
        return [(t.name, t.error_code, p.partition_index) for t in resp.topics for p in t.partitions] + \
            [(t.name, t.error_code, -1) for t in resp.topics if not t.partitions]

    whole = describe(["dtp-b", "dtp-a", "no-such-topic", "bad/name"])
    assert [t.name for t in whole.topics] == ["bad/name", "dtp-a", "dtp-b", "no-such-topic"]  # sorted by name
    assert seen(whole) == [("dtp-a", 0, 0), ("dtp-a", 0, 1), ("dtp-a", 0, 2), ("dtp-b", 0, 0), ("dtp-b", 0, 1),
                           ("bad/name", 17, -1), ("no-such-topic", 3, -1)]  # INVALID_TOPIC_EXCEPTION, UNKNOWN_TOPIC
    assert whole.next_cursor is None
    # each partition as Metadata shows it, and the topic's id
    meta = wire.call(MetadataRequest(topics=[MetadataRequest.MetadataRequestTopic(name="dtp-a", topic_id=None)],
                                     allow_auto_topic_creation=False, include_topic_authorized_operations=False), 12)
    a = next(t for t in whole.topics if t.name == "dtp-a")
    assert a.topic_id == meta.topics[0].topic_id and a.topic_authorized_operations == 3576
    for got, want in zip(a.partitions, meta.topics[0].partitions, strict=True):
        assert (got.leader_id, got.leader_epoch, list(got.replica_nodes), list(got.isr_nodes)) == \
            (want.leader_id, want.leader_epoch, list(want.replica_nodes), list(want.isr_nodes)) == \
            (node.broker_id, got.leader_epoch, [node.broker_id], [node.broker_id])
        assert list(got.eligible_leader_replicas) == [] and list(got.offline_replicas) == []
    # paging: two partitions an answer, the cursor naming where the next one starts
    pages, cursor = [], None
    while True:
        resp = describe(["dtp-a", "dtp-b"], limit=2, cursor=cursor)
        pages.append(seen(resp))
        if resp.next_cursor is None:
            break
        cursor = (resp.next_cursor.topic_name, resp.next_cursor.partition_index)
    assert pages == [[("dtp-a", 0, 0), ("dtp-a", 0, 1)], [("dtp-a", 0, 2), ("dtp-b", 0, 0)], [("dtp-b", 0, 1)]]
    # a limit filled exactly at a topic's end: the next cursor is the next topic's first partition
    assert describe(["dtp-a", "dtp-b"], limit=3).next_cursor.to_dict() == {"topic_name": "dtp-b", "partition_index": 0}
    # no topics named: every topic, from the cursor's on
    every = describe([], cursor=("dtp-a", 1))
    assert [t.name for t in every.topics][:2] == ["dtp-a", "dtp-b"] and every.topics[0].partitions[0].partition_index == 1
    assert all(t.name >= "dtp-a" and t.error_code == 0 for t in every.topics)
    # a cursor on a topic the request does not name: INVALID_REQUEST for each named topic
    bad = describe(["dtp-b"], cursor=("dtp-a", 0))
    assert [(t.name, t.error_code, len(t.partitions)) for t in bad.topics] == [("dtp-b", 42, 0)]


def test_a_broker_describes_its_settings_and_topic_defaults_read_only_under_kafkas_names(wire: Wire,
                                                                                       node: Node) -> None:
    R = DescribeConfigsRequest.DescribeConfigsResource

    def describe(name: str, keys: list[str] | None = None) -> Any:
        return wire.call(DescribeConfigsRequest(resources=[R(resource_type=4, resource_name=name,
                                                             configuration_keys=keys)],
                                                include_synonyms=True, include_documentation=False), 4).results[0]

    mine = describe(str(node.broker_id))
    entries = {c.name: c for c in mine.configs}
    assert mine.error_code == 0
    assert entries["broker.id"].value == str(node.broker_id)
    assert entries["advertised.listeners"].value.startswith("PLAINTEXT://")
    assert entries["num.io.threads"].value == "8" and entries["num.io.threads"].config_source == 5
    # the topic defaults under their broker synonyms, as the topics describe them
    topic_default = {c.name: c.value for c in wire.call(DescribeConfigsRequest(resources=[
        R(resource_type=2, resource_name=_create(wire, "brokerdefaults", {}).name, configuration_keys=None)]),
        4).results[0].configs}
    assert entries["log.segment.bytes"].value == topic_default["segment.bytes"]
    assert entries["message.max.bytes"].value == topic_default["max.message.bytes"]
    assert entries["log.cleanup.policy"].value == topic_default["cleanup.policy"] == "compact"
    assert all(c.read_only for c in mine.configs)
    assert [c.name for c in describe(str(node.broker_id), ["log.retention.ms"]).configs] == ["log.retention.ms"]
    assert describe("").error_code == 0 and describe("").configs == []  # the cluster-wide dynamic defaults: none
    other = describe(str(node.broker_id + 1))
    assert other.error_code == 42 and "Unexpected broker id" in other.error_message  # INVALID_REQUEST


def test_list_config_resources_lists_topics_and_brokers_as_kip_1142(wire: Wire, node: Node) -> None:
    _create(wire, "lcr-a", {})
    _create(wire, "lcr-b", {})

    def listed(types: list[int] | None, version: int = 1) -> Any:
        return wire.call(ListConfigResourcesRequest(resource_types=types), version)

    every = listed([])  # an empty list: every type listed here
    assert every.error_code == 0
    named = [(r.resource_type, r.resource_name) for r in every.config_resources]
    assert (4, str(node.broker_id)) in named and {(2, "lcr-a"), (2, "lcr-b")} <= set(named)
    assert {t for t, _ in named} == {2, 4}  # no group has configs, no client-metrics subscription exists
    assert named.index((4, str(node.broker_id))) < named.index((2, "lcr-a"))  # Kafka's order: brokers, then topics
    topics = listed([2])
    assert {r.resource_type for r in topics.config_resources} == {2}
    assert [r.resource_name for r in topics.config_resources] == sorted(r.resource_name
                                                                        for r in topics.config_resources)
    assert listed([16, 32]).error_code == 0 and listed([16, 32]).config_resources == []
    # BROKER_LOGGER is not listed here, and an unknown type neither: UNSUPPORTED_VERSION, nothing listed
    for bad in ([8], [2, 8], [64]):
        refused = listed(bad)
        assert (refused.error_code, refused.config_resources) == (35, [])
    # v0 (KIP-714's ListClientMetricsResources) lists only client-metrics resources: none
    v0 = listed(None, version=0)
    assert (v0.error_code, v0.config_resources) == (0, [])


def _long_poll_fetch(topic: str, correlation_id: int, max_wait_ms: int = 30_000) -> bytes:
    P = FetchRequest.FetchTopic.FetchPartition
    req = FetchRequest(replica_id=-1, max_wait_ms=max_wait_ms, min_bytes=1, max_bytes=1 << 20, isolation_level=0,
                       session_id=0, session_epoch=-1, topics=[FetchRequest.FetchTopic(topic=topic, partitions=[
                           P(partition=0, current_leader_epoch=-1, fetch_offset=0, log_start_offset=-1,
                             partition_max_bytes=1 << 20)])], forgotten_topics_data=[], rack_id="")
    req.with_header(correlation_id=correlation_id, client_id="k3-test")
    return req.encode(version=12, header=True, framed=True)


def test_a_fetch_long_polling_for_a_client_that_went_away_is_dropped_at_once(
        node: Node, caplog: pytest.LogCaptureFixture) -> None:
    """Regression: a client that closed its connection while its Fetch waited for data left the long poll running
    until max_wait_ms, and the connection counted open for up to the 5 s the close gives owed answers; now the poll
    is cancelled when the read side ends, its waiter is gone and nothing is logged as a failure."""
    listener = KafkaListener(node, KafkaListenerConfig(host="127.0.0.1", port=0)).start()
    try:
        w = Wire(listener.port)
        assert _create(w, "gone-poll", {}).error_code == 0
        w.sock.sendall(_long_poll_fetch("gone-poll", 1))  # nothing to read: it would wait 30 s
        deadline = time.monotonic() + 10
        while not listener.notifier._waiters and time.monotonic() < deadline:
            time.sleep(0.01)
        assert listener.notifier._waiters  # the poll waits for an append
        with caplog.at_level("ERROR"):
            w.sock.close()
            closed_at = time.monotonic()
            while (listener.connections or listener.notifier._waiters) and time.monotonic() < closed_at + 10:
                time.sleep(0.01)
            assert listener.connections == 0 and not listener.notifier._waiters
            assert time.monotonic() - closed_at < 2.5  # not the 5 s wait for an answer nobody reads
        assert not [r for r in caplog.records if r.levelname == "ERROR"]
        # the listener goes on serving: a new connection's long poll is answered when its max_wait_ms runs out
        w2 = Wire(listener.port)
        w2.sock.sendall(_long_poll_fetch("gone-poll", 7, max_wait_ms=50))
        size = struct.unpack(">i", w2._read(4))[0]
        assert struct.unpack_from(">i", w2._read(size), 0)[0] == 7
        w2.sock.close()
    finally:
        listener.stop()


def test_a_fetch_long_polling_when_the_listener_stops_is_cancelled_not_left_pending(
        node: Node, caplog: pytest.LogCaptureFixture) -> None:
    """Regression: stopping the listener aborted a connection whose Fetch was waiting for data, but left the fetch's
    task pending in the closed loop ("Task was destroyed but it is pending!" at exit)."""
    import asyncio
    import gc

    listener = KafkaListener(node, KafkaListenerConfig(host="127.0.0.1", port=0)).start()
    w = Wire(listener.port)
    try:
        assert _create(w, "long-poll", {}).error_code == 0
        w.sock.sendall(_long_poll_fetch("long-poll", 1))  # nothing to read: it waits up to 30 s
        time.sleep(0.3)
        loop = listener._loop
        assert loop is not None
        with caplog.at_level("ERROR", logger="asyncio"):
            listener.stop()
            assert [t for t in asyncio.all_tasks(loop) if not t.done()] == []
            gc.collect()
        assert not [r for r in caplog.records if "pending" in r.getMessage()]
    finally:
        w.sock.close()
        listener.stop()
