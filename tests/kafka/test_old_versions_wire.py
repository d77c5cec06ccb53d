"""The API versions Kafka 4.0 removed, served through kio, on the wire against an in-process node: OffsetForLeaderEpoch
v0-v1, OffsetCommit v0-v1, OffsetFetch v0, CreateTopics v0-v1, DeleteTopics v0 and DescribeConfigs v0.

The client side is kafka-python's pre-4.0 message classes (``kafka.protocol.old``, kept by hand before its
schemas were generated), so the bytes the server reads with kio were written by another library. One request
and one answer per API are also checked byte for byte against the layout of Kafka's JSON message schemas
(``clients/src/main/resources/common/message/*.json``, the versions before KIP-896 removed them). And a
real client: kafka-python's KafkaConsumer and KafkaAdminClient told the broker is 0.8.x-0.11 speak OffsetCommit
v0-v1, OffsetFetch v0, CreateTopics v0, DeleteTopics v0 and DescribeConfigs v0 (no real client sends
OffsetForLeaderEpoch below v2: v0-v1 were the replicas').
"""

from __future__ import annotations

import random
import socket
import struct
from collections.abc import Iterator
from typing import Any

import pytest
from kafka.protocol.admin import DescribeConfigsRequest as NewDescribeConfigsRequest
from kafka.protocol.consumer import OffsetFetchRequest as NewOffsetFetchRequest
from kafka.protocol.consumer import OffsetForLeaderEpochRequest as NewOffsetForLeaderEpochRequest
from kafka.protocol.metadata import ApiVersionsRequest
from kafka.protocol.old import admin as old_admin
from kafka.protocol.old import commit as old_commit
from kafka.protocol.old import offset_for_leader_epoch as old_epoch

from coordinator.group import errors as E
from log.local_log import RecordSpec
from tests.kafka.wire import InProcessNode, Wire, read_frame, wait_until

CLIENT = "old-client"
NONE, UNKNOWN_TOPIC_OR_PARTITION, TOPIC_ALREADY_EXISTS = 0, 3, 36
TOPIC, DEFAULT_CONFIG = 2, 5

# ---- Kafka's primitive types (the protocol guide's BNF) -------------------------------------------------------


def i8(v: int) -> bytes:
    return struct.pack(">b", v)


def i16(v: int) -> bytes:
    return struct.pack(">h", v)


def i32(v: int) -> bytes:
    return struct.pack(">i", v)


def i64(v: int) -> bytes:
    return struct.pack(">q", v)


def string(s: str) -> bytes:
    return i16(len(s.encode())) + s.encode()


def array(items: list[bytes]) -> bytes:
    return i32(len(items)) + b"".join(items)


def header_v1(api_key: int, version: int, correlation_id: int) -> bytes:
    """RequestHeader v1 (every non-flexible request): key, version, correlation id, client id."""
    return i16(api_key) + i16(version) + i32(correlation_id) + string(CLIENT)


class OldWire:
    """One connection speaking kafka-python's pre-4.0 message classes, and raw frames."""

    def __init__(self, port: int) -> None:
        self.sock = socket.create_connection(("127.0.0.1", port), timeout=30)
        self.cid = 100

    def raw(self, request: bytes) -> bytes:
        """Send one framed request (header included); the answer's body after its correlation id."""
        self.sock.sendall(i32(len(request)) + request)
        body = read_frame(self.sock)
        assert body is not None, "connection closed"
        assert struct.unpack_from(">i", body)[0] == struct.unpack_from(">i", request, 4)[0]
        return body[4:]

    def call(self, req: Any, response_cls: Any) -> dict[str, Any]:
        """Send a ``kafka.protocol.old`` request; its answer as a dict (``Struct.to_object``)."""
        self.cid += 1
        req.with_header(correlation_id=self.cid, client_id=CLIENT)
        return response_cls.decode(self.raw(req.encode(header=True))).to_object()  # type: ignore[no-any-return]

    def close(self) -> None:
        self.sock.close()


@pytest.fixture(scope="module")
def node(tmp_path_factory: pytest.TempPathFactory) -> Iterator[InProcessNode]:
    tmp_path = tmp_path_factory.mktemp("old-versions")
    n = InProcessNode(tmp_path / "data", f"sqlite:///{tmp_path / 'meta.db'}", broker_id=0,
                      group_initial_rebalance_delay_ms=0, offsets_topic_num_partitions=2,
                      transaction_state_log_num_partitions=2, cleaner_threads=0)
    wait_until(lambda: len(n.coordinators.groups_ownership.owned_slots()) == 2, what="slots loaded")
    n.node.create_topic("t", 2)
    for i in range(0, 6, 2):  # epoch 1 holds offsets 0-3, epoch 2 offsets 4-5
        if i in (0, 4):
            n.node.become_leader("t", 0, 1 + i // 4, broker_id=n.node.broker_id)
        n.node.produce("t", 0, [RecordSpec(b"k%d" % j, b"v%d" % j, 1_000 + j) for j in (i, i + 1)])
    yield n
    n.stop()


@pytest.fixture
def old(node: InProcessNode) -> Iterator[OldWire]:
    w = OldWire(node.port)
    yield w
    w.close()


@pytest.fixture
def new(node: InProcessNode) -> Iterator[Wire]:
    w = node.wire()
    yield w
    w.close()


def test_api_versions_advertises_the_old_versions(new: Wire) -> None:
    got = {k.api_key: (k.min_version, k.max_version) for k in new.call(ApiVersionsRequest(
        client_software_name="t", client_software_version="1"), 3).api_keys}
    assert got[23] == (0, 4)  # OffsetForLeaderEpoch
    assert got[8] == (0, 8)   # OffsetCommit
    assert got[9] == (0, 8)   # OffsetFetch
    assert got[19] == (0, 7)  # CreateTopics
    assert got[20] == (0, 6)  # DeleteTopics
    assert got[32] == (0, 4)  # DescribeConfigs


# ---- OffsetForLeaderEpoch v0-v1 -------------------------------------------------------------------------------


def test_offset_for_leader_epoch_v0_bytes(old: OldWire) -> None:
    # OffsetForLeaderEpochRequest v0: Topics [Topic string, Partitions [Partition int32, LeaderEpoch int32]]
    body = array([string("t") + array([i32(0) + i32(1), i32(7) + i32(1)])])
    req = old_epoch.OffsetForLeaderEpochRequest_v0(topics=[("t", [(0, 1), (7, 1)])])
    req.with_header(correlation_id=1, client_id=CLIENT)
    assert req.encode(header=True) == header_v1(23, 0, 1) + body
    # Response v0: Topics [Topic string, Partitions [ErrorCode int16, Partition int32, EndOffset int64]]:
    # epoch 1 ends where epoch 2 starts
    assert old.raw(header_v1(23, 0, 1) + body) == array([string("t") + array([
        i16(NONE) + i32(0) + i64(4), i16(UNKNOWN_TOPIC_OR_PARTITION) + i32(7) + i64(-1)])])


def test_offset_for_leader_epoch_v1_answers_as_v2(old: OldWire, new: Wire) -> None:
    asked = [(0, 1), (0, 2), (0, 0), (1, 0)]
    got = old.call(old_epoch.OffsetForLeaderEpochRequest_v1(topics=[("t", asked)]),
                   old_epoch.OffsetForLeaderEpochResponse_v1)
    P = NewOffsetForLeaderEpochRequest.OffsetForLeaderTopic.OffsetForLeaderPartition
    want = new.call(NewOffsetForLeaderEpochRequest(replica_id=-1, topics=[
        NewOffsetForLeaderEpochRequest.OffsetForLeaderTopic(topic="t", partitions=[
            P(partition=p, current_leader_epoch=-1, leader_epoch=e) for p, e in asked])]), 2)
    rows = [(p["error_code"], p["partition"], p["leader_epoch"], p["end_offset"]) for p in got["topics"][0]["partitions"]]
    assert rows == [(p.error_code, p.partition, p.leader_epoch, p.end_offset) for p in want.topics[0].partitions]
    assert rows[:2] == [(NONE, 0, 1, 4), (NONE, 0, 2, 6)]


# ---- OffsetCommit v0-v1, OffsetFetch v0 ---------------------------------------------------------------------


def test_offset_commit_v0_and_fetch_v0_bytes(old: OldWire) -> None:
    # OffsetCommitRequest v0: GroupId string, Topics [Name string, Partitions [PartitionIndex int32,
    # CommittedOffset int64, CommittedMetadata string]]
    body = string("g0") + array([string("t") + array([i32(0) + i64(4) + string("m0"),
                                                     i32(9) + i64(1) + string("")])])
    req = old_commit.OffsetCommitRequest_v0(group_id="g0", topics=[("t", [(0, 4, "m0"), (9, 1, "")])])
    req.with_header(correlation_id=2, client_id=CLIENT)
    assert req.encode(header=True) == header_v1(8, 0, 2) + body
    # Response v0: Topics [Name string, Partitions [PartitionIndex int32, ErrorCode int16]]
    assert old.raw(header_v1(8, 0, 2) + body) == array([string("t") + array([
        i32(0) + i16(NONE), i32(9) + i16(UNKNOWN_TOPIC_OR_PARTITION)])])

    # OffsetFetchRequest v0: GroupId string, Topics [Name string, PartitionIndexes [int32]]
    fetch = string("g0") + array([string("t") + array([i32(0), i32(1)])])
    req = old_commit.OffsetFetchRequest_v0(group_id="g0", topics=[("t", [0, 1])])
    req.with_header(correlation_id=3, client_id=CLIENT)
    assert req.encode(header=True) == header_v1(9, 0, 3) + fetch
    # Response v0: Topics [Name string, Partitions [PartitionIndex int32, CommittedOffset int64,
    # Metadata string, ErrorCode int16]] (no group-level error code before v2)
    assert old.raw(header_v1(9, 0, 3) + fetch) == array([string("t") + array([
        i32(0) + i64(4) + string("m0") + i16(NONE), i32(1) + i64(-1) + string("") + i16(NONE)])])


def test_offset_commit_v1_is_read_by_every_fetch_version(old: OldWire, new: Wire) -> None:
    got = old.call(old_commit.OffsetCommitRequest_v1(
        group_id="g1", generation_id_or_member_epoch=-1, member_id="",
        topics=[("t", [(0, 5, -1, "a"), (1, 2, 1_700_000_000_000, None)])]), old_commit.OffsetCommitResponse_v1)
    assert [(p["partition_index"], p["error_code"]) for p in got["topics"][0]["partitions"]] == [(0, NONE), (1, NONE)]

    old_fetch = old.call(old_commit.OffsetFetchRequest_v0(group_id="g1", topics=[("t", [0, 1])]),
                         old_commit.OffsetFetchResponse_v0)
    assert [(p["partition_index"], p["committed_offset"], p["metadata"], p["error_code"])
            for p in old_fetch["topics"][0]["partitions"]] == [(0, 5, "a", NONE), (1, 2, "", NONE)]
    new_fetch = new.call(NewOffsetFetchRequest(group_id="g1", topics=[NewOffsetFetchRequest.OffsetFetchRequestTopic(
        name="t", partition_indexes=[0, 1])], require_stable=False), 7)
    assert [(p.partition_index, p.committed_offset) for p in new_fetch.topics[0].partitions] == [(0, 5), (1, 2)]


def test_offset_commit_v1_of_a_stale_generation_is_refused(old: OldWire) -> None:
    """A v1 commit carries the member's generation: a member the group does not know is fenced as at v2+."""
    got = old.call(old_commit.OffsetCommitRequest_v1(
        group_id="g1", generation_id_or_member_epoch=3, member_id="ghost",
        topics=[("t", [(0, 9, -1, "")])]), old_commit.OffsetCommitResponse_v1)
    assert got["topics"][0]["partitions"][0]["error_code"] in (E.UNKNOWN_MEMBER_ID, E.ILLEGAL_GENERATION)
    fetched = old.call(old_commit.OffsetFetchRequest_v0(group_id="g1", topics=[("t", [0])]),
                       old_commit.OffsetFetchResponse_v0)
    assert fetched["topics"][0]["partitions"][0]["committed_offset"] == 5


# ---- CreateTopics v0-v1, DeleteTopics v0 ---------------------------------------------------------------------


def test_create_topics_v0_bytes_and_delete_topics_v0(old: OldWire, node: InProcessNode) -> None:
    # CreateTopicsRequest v0: Topics [Name string, NumPartitions int32, ReplicationFactor int16,
    # Assignments [PartitionIndex int32, BrokerIds [int32]], Configs [Name string, Value string]], TimeoutMs int32
    body = array([string("c0") + i32(3) + i16(1) + array([]) + array([string("cleanup.policy") + string("compact")])]) \
        + i32(5000)
    req = old_admin.CreateTopicsRequest_v0(create_topic_requests=[("c0", 3, 1, [], [("cleanup.policy", "compact")])],
                                           timeout=5000)
    req.with_header(correlation_id=4, client_id=CLIENT)
    assert req.encode(header=True) == header_v1(19, 0, 4) + body
    # Response v0: Topics [Name string, ErrorCode int16]
    assert old.raw(header_v1(19, 0, 4) + body) == array([string("c0") + i16(NONE)])
    assert node.node.topic("c0").partitions == 3
    assert node.node.topic("c0").config.get("cleanup.policy") == "compact"
    assert old.raw(header_v1(19, 0, 5) + body) == array([string("c0") + i16(TOPIC_ALREADY_EXISTS)])

    # DeleteTopicsRequest v0: TopicNames [string], TimeoutMs int32; response v0: Responses [Name string,
    # ErrorCode int16]
    delete = array([string("c0"), string("nope")]) + i32(5000)
    req = old_admin.DeleteTopicsRequest_v0(topic_names=["c0", "nope"], timeout_ms=5000)
    req.with_header(correlation_id=6, client_id=CLIENT)
    assert req.encode(header=True) == header_v1(20, 0, 6) + delete
    assert old.raw(header_v1(20, 0, 6) + delete) == array([
        string("c0") + i16(NONE), string("nope") + i16(UNKNOWN_TOPIC_OR_PARTITION)])
    assert "c0" not in node.node.topics()


def test_create_topics_v1_validate_only_and_error_message(old: OldWire, node: InProcessNode) -> None:
    req = old_admin.CreateTopicsRequest_v1(create_topic_requests=[("c1", 2, 1, [], []), ("t", 1, 1, [], [])],
                                           timeout=5000, validate_only=True)
    got = old.call(req, old_admin.CreateTopicsResponse_v1)
    assert [(t["name"], t["error_code"]) for t in got["topics"]] == [("c1", NONE), ("t", TOPIC_ALREADY_EXISTS)]
    assert got["topics"][1]["error_message"]
    assert "c1" not in node.node.topics()
    got = old.call(old_admin.CreateTopicsRequest_v1(create_topic_requests=[("c1", 2, 1, [], [])], timeout=5000,
                                                    validate_only=False), old_admin.CreateTopicsResponse_v1)
    assert (got["topics"][0]["error_code"], node.node.topic("c1").partitions) == (NONE, 2)


# ---- DescribeConfigs v0 --------------------------------------------------------------------------------------


def test_describe_configs_v0_bytes(old: OldWire, new: Wire, node: InProcessNode) -> None:
    node.node.create_topic("dc", 1, {"cleanup.policy": "compact"})
    # DescribeConfigsRequest v0: Resources [ResourceType int8, ResourceName string, ConfigurationKeys [string]]
    body = array([i8(TOPIC) + string("dc") + array([string("cleanup.policy"), string("segment.bytes")])])
    req = old_admin.DescribeConfigsRequest_v0(resources=[(TOPIC, "dc", ["cleanup.policy", "segment.bytes"])])
    req.with_header(correlation_id=7, client_id=CLIENT)
    assert req.encode(header=True) == header_v1(32, 0, 7) + body
    segment_bytes = str(node.node.topic("dc").config.get("segment.bytes"))
    # Response v0: ThrottleTimeMs int32, Results [ErrorCode int16, ErrorMessage nullable string, ResourceType int8,
    # ResourceName string, Configs [Name string, Value nullable string, ReadOnly bool, IsDefault bool,
    # IsSensitive bool]]
    null = i16(-1)
    assert old.raw(header_v1(32, 0, 7) + body) == i32(0) + array([
        i16(NONE) + null + i8(TOPIC) + string("dc") + array([
            string("cleanup.policy") + string("compact") + b"\x00" + b"\x00" + b"\x00",
            string("segment.bytes") + string(segment_bytes) + b"\x00" + b"\x01" + b"\x00"])])

    # every key, as v1 describes them: is_default is v1's config source DEFAULT_CONFIG
    got = old.call(old_admin.DescribeConfigsRequest_v0(resources=[(TOPIC, "dc", None)]),
                   old_admin.DescribeConfigsResponse_v0)
    R = NewDescribeConfigsRequest.DescribeConfigsResource
    want = new.call(NewDescribeConfigsRequest(resources=[R(resource_type=TOPIC, resource_name="dc",
                                                           configuration_keys=None)], include_synonyms=False), 1)
    assert [(c["name"], c["value"], c["is_default"]) for c in got["results"][0]["configs"]] == \
        [(c.name, c.value, c.config_source == DEFAULT_CONFIG) for c in want.results[0].configs]
    assert len(got["results"][0]["configs"]) > 10


# ---- a real client at the old versions ----------------------------------------------------------------------


def _answered(node: InProcessNode, api: str, version: int) -> int:
    return node.service.metrics.requests.get((api, version), 0)  # type: ignore[no-any-return]


def test_kafka_python_pinned_to_old_brokers_speaks_the_old_versions(node: InProcessNode) -> None:
    """kafka-python's own client, told the broker is 0.8.1 / 0.8.2 / 0.10.1 / 0.11.0 (``api_version``, no
    ApiVersions probe), commits and fetches offsets and administers topics at the versions Kafka 4.0 removed."""
    from kafka import KafkaAdminClient, KafkaConsumer, OffsetAndMetadata, TopicPartition
    from kafka.admin import ConfigResource, ConfigResourceType, NewTopic

    boot = f"127.0.0.1:{node.port}"
    for api_version, committed in (((0, 8, 1), 7), ((0, 8, 2), 8)):
        consumer = KafkaConsumer(bootstrap_servers=boot, group_id=f"old-{committed}", api_version=api_version,
                                 enable_auto_commit=False, request_timeout_ms=10000)
        try:
            consumer.commit({TopicPartition("t", 1): OffsetAndMetadata(committed, "", -1)})
            assert consumer.committed(TopicPartition("t", 1)) == committed
        finally:
            consumer.close()
    assert _answered(node, "OffsetCommit", 0) >= 1 and _answered(node, "OffsetFetch", 0) >= 1
    assert _answered(node, "OffsetCommit", 1) >= 1

    admin = KafkaAdminClient(bootstrap_servers=boot, api_version=(0, 10, 1), request_timeout_ms=10000)
    try:
        created = admin.create_topics([NewTopic("real0", 2, 1, topic_configs={"cleanup.policy": "compact"})])
        assert [t["error_code"] for t in created["topics"]] == [NONE]
        assert node.node.topic("real0").config.get("cleanup.policy") == "compact"
        deleted = admin.delete_topics(["real0"])
        assert [t["error_code"] for t in deleted["topics"]] == [NONE]
    finally:
        admin.close()
    assert "real0" not in node.node.topics()
    assert _answered(node, "CreateTopics", 0) >= 1 and _answered(node, "DeleteTopics", 0) >= 1

    admin = KafkaAdminClient(bootstrap_servers=boot, api_version=(0, 11, 0), request_timeout_ms=10000)
    try:
        admin.describe_configs([ConfigResource(ConfigResourceType.TOPIC, "t")])
    finally:
        admin.close()
    assert _answered(node, "DescribeConfigs", 0) >= 1


# ---- malformed frames and the registration checks ---------------------------------------------------------------


def test_a_truncated_old_version_closes_only_its_connection(node: InProcessNode, new: Wire) -> None:
    body = string("g0") + array([string("t") + array([i32(0) + i64(4) + string("m0")])])
    with socket.create_connection(("127.0.0.1", node.port), timeout=10) as sock:
        request = header_v1(8, 0, 9) + body[:-3]
        sock.sendall(i32(len(request)) + request)
        assert read_frame(sock) is None
    got = new.call(ApiVersionsRequest(client_software_name="t", client_software_version="1"), 3)
    assert got.error_code == NONE


def test_mutated_old_version_frames_never_hurt_the_node(node: InProcessNode, new: Wire) -> None:
    """Flipped and truncated bytes in frames of every kio-served version: an answer or a closed connection."""
    rng = random.Random(896)
    seeds = [header_v1(23, 1, 1) + array([string("t") + array([i32(0) + i32(1)])]),
             header_v1(8, 1, 1) + string("fz") + i32(-1) + string("") + array([string("t") + array([
                 i32(0) + i64(1) + i64(-1) + string("")])]),
             header_v1(9, 0, 1) + string("fz") + array([string("t") + array([i32(0)])]),
             header_v1(19, 1, 1) + array([string("fz") + i32(1) + i16(1) + array([]) + array([])]) + i32(1) + b"\x01",
             header_v1(20, 0, 1) + array([string("fz-nope")]) + i32(1),
             header_v1(32, 0, 1) + array([i8(TOPIC) + string("t") + i32(-1)])]
    for _ in range(240):
        data = bytearray(rng.choice(seeds))
        for _ in range(rng.randrange(1, 4)):
            pos = rng.randrange(4, len(data))  # the api key and version stay
            data[pos] = rng.randrange(256)
        if rng.random() < 0.25:
            data = data[:rng.randrange(4, len(data))]
        with socket.create_connection(("127.0.0.1", node.port), timeout=10) as sock:
            sock.sendall(i32(len(data)) + bytes(data))
            sock.shutdown(socket.SHUT_WR)
            while read_frame(sock) is not None:
                pass
    assert new.call(ApiVersionsRequest(client_software_name="t", client_software_version="1"), 3).error_code == NONE
    assert node.node.topic("t").partitions == 2


def test_every_registered_kio_version_maps_onto_kafka_pythons_classes() -> None:
    # kio is imported and the mappings are made by the first request at an old version (kio costs startup time);
    # this is the check registration used to make
    import service.kafka.server  # noqa: F401 - registers every handler
    from service.kafka import registry

    older = [spec.older for spec in registry.registered() if spec.older is not None]
    assert len(older) >= 5
    for o in older:
        o.load()
        assert o._requests and o._responses


def test_a_kio_field_without_a_counterpart_refuses_to_load() -> None:
    from kafka.protocol.consumer import OffsetFetchResponse

    from service.kafka.kio_codec import KioVersions
    from service.kafka.registry import kafka_api

    with pytest.raises(TypeError, match="no field in kafka-python's schema"):
        # OffsetCommit v0's entities against OffsetFetch's classes: topics.partitions has no counterpart
        versions = KioVersions(0, 0)
        versions.bind(8, NewOffsetFetchRequest, OffsetFetchResponse)
        versions.load()
    with pytest.raises(ValueError, match="must end just below 2"):
        kafka_api(NewOffsetForLeaderEpochRequest, min_version=2, max_version=4, older=KioVersions(0, 0))
