"""The classic group protocol on the wire against an in-process node: joins (KIP-394 member ids), generations, sync,
heartbeats, leaves, static members, offsets committed and fetched under the coordinator epoch, admin APIs, offsets
dropped with their topic."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from typing import Any

import pytest
from kafka.protocol.admin import DeleteGroupsRequest, DescribeGroupsRequest, ListGroupsRequest
from kafka.protocol.consumer import (
    HeartbeatRequest,
    JoinGroupRequest,
    LeaveGroupRequest,
    OffsetCommitRequest,
    OffsetDeleteRequest,
    OffsetFetchRequest,
    SyncGroupRequest,
)

from coordinator.group import errors as E
from tests.kafka.wire import InProcessNode, Wire, wait_until

SUB = b"\x00\x00\x00\x00\x00\x01\x00\x01t\x00\x00\x00\x00"  # ConsumerProtocolSubscription v0: topics ["t"]


@pytest.fixture(scope="module")
def node(tmp_path_factory: pytest.TempPathFactory) -> Iterator[InProcessNode]:
    tmp_path = tmp_path_factory.mktemp("groups-wire")
    n = InProcessNode(tmp_path / "data", f"sqlite:///{tmp_path / 'meta.db'}", broker_id=0,
                      group_initial_rebalance_delay_ms=0, offsets_topic_num_partitions=4,
                      transaction_state_log_num_partitions=4)
    wait_until(lambda: len(n.coordinators.groups_ownership.owned_slots()) == 4, what="slots loaded")
    n.node.create_topic("t", 2)
    yield n
    n.stop()


def join(w: Wire, group: str, member: str = "", version: int = 7, instance: str | None = None,
         session_ms: int = 6000, rebalance_ms: int = 3000) -> Any:
    req = JoinGroupRequest(group_id=group, session_timeout_ms=session_ms, rebalance_timeout_ms=rebalance_ms,
                           member_id=member, group_instance_id=instance, protocol_type="consumer",
                           protocols=[JoinGroupRequest.JoinGroupRequestProtocol(name="range", metadata=SUB)])
    return w.call(req, version)


def sync(w: Wire, group: str, gen: int, member: str, assignments: dict[str, bytes] | None = None,
         version: int = 5) -> Any:
    return w.call(SyncGroupRequest(group_id=group, generation_id=gen, member_id=member, group_instance_id=None,
                                   protocol_type="consumer", protocol_name="range", assignments=[
                                       SyncGroupRequest.SyncGroupRequestAssignment(member_id=m, assignment=a)
                                       for m, a in (assignments or {}).items()]), version)


def heartbeat(w: Wire, group: str, gen: int, member: str, instance: str | None = None) -> int:
    return w.call(HeartbeatRequest(group_id=group, generation_id=gen, member_id=member,
                                   group_instance_id=instance), 4).error_code


def commit(w: Wire, group: str, gen: int, member: str, offsets: dict[tuple[str, int], int],
           version: int = 8) -> dict[tuple[str, int], int]:
    topics: dict[str, list[Any]] = {}
    for (t, p), o in offsets.items():
        topics.setdefault(t, []).append(OffsetCommitRequest.OffsetCommitRequestTopic.OffsetCommitRequestPartition(
            partition_index=p, committed_offset=o, committed_leader_epoch=-1, committed_metadata="m"))
    r = w.call(OffsetCommitRequest(group_id=group, generation_id_or_member_epoch=gen, member_id=member,
                                   group_instance_id=None, topics=[
                                       OffsetCommitRequest.OffsetCommitRequestTopic(name=t, partitions=ps)
                                       for t, ps in topics.items()]), version)
    return {(t.name, p.partition_index): p.error_code for t in r.topics for p in t.partitions}


def fetch(w: Wire, group: str, parts: list[tuple[str, int]] | None, version: int = 7,
          stable: bool = False) -> tuple[int, dict[tuple[str, int], tuple[int, int]]]:
    topics = None
    if parts is not None:
        by: dict[str, list[int]] = {}
        for t, p in parts:
            by.setdefault(t, []).append(p)
        topics = [OffsetFetchRequest.OffsetFetchRequestTopic(name=t, partition_indexes=ps) for t, ps in by.items()]
    r = w.call(OffsetFetchRequest(group_id=group, topics=topics, require_stable=stable), version)
    return r.error_code, {(t.name, p.partition_index): (p.committed_offset, p.error_code) for t in r.topics
                          for p in t.partitions}


def test_join_sync_heartbeat_commit_fetch(node: InProcessNode) -> None:
    w1, w2 = node.wire(), node.wire()
    r = join(w1, "g1")
    assert r.error_code == E.MEMBER_ID_REQUIRED and r.member_id.startswith("coord-test-")
    m1 = r.member_id
    r = join(w1, "g1", m1)
    assert (r.error_code, r.generation_id, r.leader, r.protocol_name) == (0, 1, m1, "range")
    assert [(m.member_id, bytes(m.metadata)) for m in r.members] == [(m1, SUB)]
    s = sync(w1, "g1", 1, m1, {m1: b"A1"})
    assert (s.error_code, bytes(s.assignment)) == (0, b"A1")
    assert heartbeat(w1, "g1", 1, m1) == 0
    assert heartbeat(w1, "g1", 0, m1) == E.ILLEGAL_GENERATION
    assert heartbeat(w1, "g1", 1, "nobody") == E.UNKNOWN_MEMBER_ID
    assert commit(w1, "g1", 1, m1, {("t", 0): 5, ("t", 1): 7}) == {("t", 0): 0, ("t", 1): 0}
    assert commit(w1, "g1", 1, m1, {("nope", 0): 1, ("t", 9): 1}) == {("nope", 0): 3, ("t", 9): 3}
    assert commit(w1, "g1", 2, m1, {("t", 0): 6}) == {("t", 0): E.ILLEGAL_GENERATION}
    assert fetch(w1, "g1", [("t", 0), ("t", 1)]) == (0, {("t", 0): (5, 0), ("t", 1): (7, 0)})
    assert fetch(w1, "g1", None, version=2) == (0, {("t", 0): (5, 0), ("t", 1): (7, 0)})
    assert fetch(w1, "unknown-group", [("t", 0)]) == (0, {("t", 0): (-1, 0)})
    # a second member: the first learns of the rebalance by heartbeat and rejoins
    m2 = join(w2, "g1").member_id
    joined: dict[str, Any] = {}
    t = threading.Thread(target=lambda: joined.setdefault("m2", join(w2, "g1", m2)))
    t.start()
    wait_until(lambda: heartbeat(w1, "g1", 1, m1) == E.REBALANCE_IN_PROGRESS, what="rebalance in progress")
    assert commit(w1, "g1", 1, m1, {("t", 0): 6}) == {("t", 0): 0}  # allowed while preparing
    r1 = join(w1, "g1", m1)
    t.join(10)
    r2 = joined["m2"]
    assert r1.generation_id == r2.generation_id == 2 and r1.leader == r2.leader == m1
    assert len(r1.members) == 2 and r2.members == []
    got: dict[str, Any] = {}
    t = threading.Thread(target=lambda: got.setdefault("s2", sync(w2, "g1", 2, m2)))
    t.start()
    s1 = sync(w1, "g1", 2, m1, {m1: b"P0", m2: b"P1"})
    t.join(10)
    assert bytes(s1.assignment) == b"P0" and bytes(got["s2"].assignment) == b"P1"
    _check_http(node, m1, m2)
    d = node.wire().call(DescribeGroupsRequest(groups=["g1"], include_authorized_operations=False), 5).groups[0]
    assert (d.error_code, d.group_state, d.protocol_data, len(d.members)) == (0, "Stable", "range", 2)
    assert d.authorized_operations is None  # not asked for: Integer.MIN_VALUE
    asked = node.wire().call(DescribeGroupsRequest(groups=["g1"], include_authorized_operations=True), 5).groups[0]
    assert asked.authorized_operations == {3, 6, 8}  # READ, DELETE, DESCRIBE: no authorizer
    listed = node.wire().call(ListGroupsRequest(states_filter=[]), 4).groups
    assert [(g.group_id, g.group_state) for g in listed] == [("g1", "Stable")]
    assert node.wire().call(DeleteGroupsRequest(groups_names=["g1", "zz"]), 2).results[0].error_code == \
        E.NON_EMPTY_GROUP
    # both leave (v3 batch): the group is empty, its offsets stay; then it can be deleted
    lv = w1.call(LeaveGroupRequest(group_id="g1", members=[
        LeaveGroupRequest.MemberIdentity(member_id=m1, group_instance_id=None),
        LeaveGroupRequest.MemberIdentity(member_id=m2, group_instance_id=None),
        LeaveGroupRequest.MemberIdentity(member_id="ghost", group_instance_id=None)]), 4)
    assert [m.error_code for m in lv.members] == [0, 0, E.UNKNOWN_MEMBER_ID]
    wait_until(lambda: node.wire().call(DescribeGroupsRequest(groups=["g1"]), 0).groups[0].group_state == "Empty",
               what="empty group")
    assert fetch(w1, "g1", [("t", 0)]) == (0, {("t", 0): (6, 0)})
    od = w1.call(OffsetDeleteRequest(group_id="g1", topics=[OffsetDeleteRequest.OffsetDeleteRequestTopic(
        name="t", partitions=[OffsetDeleteRequest.OffsetDeleteRequestTopic.OffsetDeleteRequestPartition(
            partition_index=1)])]), 0)
    assert od.error_code == 0 and od.topics[0].partitions[0].error_code == 0
    assert fetch(w1, "g1", [("t", 0), ("t", 1)]) == (0, {("t", 0): (6, 0), ("t", 1): (-1, 0)})
    res = node.wire().call(DeleteGroupsRequest(groups_names=["g1", "zz"]), 2).results
    assert [(r.group_id, r.error_code) for r in res] == [("g1", 0), ("zz", E.GROUP_ID_NOT_FOUND)]
    assert fetch(w1, "g1", [("t", 0)]) == (0, {("t", 0): (-1, 0)})


def _check_http(node: InProcessNode, m1: str, m2: str) -> None:
    from fastapi.testclient import TestClient

    from service.app import create_app

    with TestClient(create_app(node.node)) as http:
        g = http.get("/v1/groups/g1").json()
        assert (g["state"], g["generation"], g["protocol"], g["leader"], g["live"]) == ("Stable", 2, "range", m1,
                                                                                         True)
        assert sorted(m["member_id"] for m in g["members"]) == sorted([m1, m2])
        assert [(o["topic"], o["partition"], o["offset"]) for o in g["offsets"]] == [("t", 0, 6), ("t", 1, 7)]
        assert g["coordinator"]["broker_id"] == 0 and g["coordinator"]["local"]
        listed = http.get("/v1/groups").json()["groups"]
        assert [(x["group_id"], x["state"], x["members"]) for x in listed] == [("g1", "Stable", 2)]
        assert http.get("/v1/groups/nope").status_code == 404
        metrics = http.get("/metrics").text
        assert "kafka_coordinator_group_groupmetadatamanager_numgroupsstable 1.0" in metrics
        assert 'kafka_coordinator_numpartitions{kind="group",state="active"} 4.0' in metrics


def test_a_member_that_does_not_rejoin_is_dropped_after_the_rebalance_timeout(node: InProcessNode) -> None:
    w1, w2 = node.wire(), node.wire()
    r = join(w1, "g2", version=3)  # v3: no MEMBER_ID_REQUIRED round
    m1 = r.member_id
    assert r.error_code == 0 and r.generation_id == 1
    sync(w1, "g2", 1, m1, {m1: b"x"})
    r2 = join(w2, "g2", version=3, session_ms=6000)  # m1 never rejoins nor heartbeats: it expires
    assert r2.error_code == 0 and r2.generation_id == 2 and r2.leader == r2.member_id
    assert heartbeat(w1, "g2", 1, m1) == E.UNKNOWN_MEMBER_ID


def test_static_member_replaces_and_fences_its_old_instance(node: InProcessNode) -> None:
    w1, w2 = node.wire(), node.wire()
    r = join(w1, "g3", instance="i-1")
    assert r.error_code == 0  # static members skip MEMBER_ID_REQUIRED
    old = r.member_id
    sync(w1, "g3", 1, old, {old: b"a"})
    r = join(w2, "g3", instance="i-1")  # the same instance restarts
    assert r.error_code == 0 and r.member_id != old
    assert heartbeat(w1, "g3", r.generation_id, old, instance="i-1") == E.FENCED_INSTANCE_ID
    assert commit(w1, "g3", 1, old, {("t", 0): 1}) == {("t", 0): E.UNKNOWN_MEMBER_ID}


def test_not_coordinator_when_the_slot_is_elsewhere(node: InProcessNode) -> None:
    own = node.coordinators.groups_ownership
    slot = own.slot("g4")
    epoch = own.epoch_of(slot)
    assert own.store.release("group", slot, 0, epoch)  # as if another node took it: our writes are fenced
    w = node.wire()
    assert commit(w, "g4", -1, "", {("t", 0): 3}) == {("t", 0): E.NOT_COORDINATOR}
    own.reconcile()  # we notice, and (being the only node) claim it again at a new epoch
    assert own.epoch_of(slot) == epoch + 1
    assert commit(w, "g4", -1, "", {("t", 0): 3}) == {("t", 0): 0}


def test_transactional_offsets_wait_for_the_marker(node: InProcessNode) -> None:
    from log.types import TopicPartition
    from metadata.group_offsets import CommittedOffset

    gc = node.coordinators.groups
    w = node.wire()
    tp0, tp1 = TopicPartition("t", 0), TopicPartition("t", 1)
    assert commit(w, "g5", -1, "", {("t", 0): 2}) == {("t", 0): 0}
    got = gc.call_blocking(gc.txn_offset_commit("g5", 4242, 0, {tp0: CommittedOffset(10), tp1: CommittedOffset(11)}))
    assert got == {tp0: 0, tp1: 0}
    # pending: read_uncommitted consumers see the last committed offsets, require_stable ones are told to retry
    assert fetch(w, "g5", [("t", 0), ("t", 1)]) == (0, {("t", 0): (2, 0), ("t", 1): (-1, 0)})
    assert fetch(w, "g5", [("t", 0), ("t", 1)], stable=True) == (0, {("t", 0): (-1, E.UNSTABLE_OFFSET_COMMIT),
                                                                     ("t", 1): (-1, E.UNSTABLE_OFFSET_COMMIT)})
    assert gc.complete_txn(4242, commit=True) == 2
    assert gc.complete_txn(4242, commit=True) == 0  # a retried marker moves nothing
    assert fetch(w, "g5", [("t", 0), ("t", 1)], stable=True) == (0, {("t", 0): (10, 0), ("t", 1): (11, 0)})
    gc.call_blocking(gc.txn_offset_commit("g5", 4343, 0, {tp0: CommittedOffset(99)}))
    assert gc.complete_txn(4343, commit=False, group_ids=["g5"]) == 1
    assert fetch(w, "g5", [("t", 0)], stable=True) == (0, {("t", 0): (10, 0)})
    # KIP-447: a producer naming a stale generation of its consumer is refused
    assert gc.call_blocking(gc.txn_offset_commit("g5", 1, 0, {tp0: CommittedOffset(1)}, generation=3,
                                                 member_id="m")) == {tp0: E.UNKNOWN_MEMBER_ID}


def test_offsets_of_empty_groups_expire_and_active_groups_keep_theirs(node: InProcessNode) -> None:
    gc = node.coordinators.groups
    w = node.wire()
    assert commit(w, "g6-standalone", -1, "", {("t", 0): 4}) == {("t", 0): 0}
    m = join(w, "g6-active", version=3).member_id
    sync(w, "g6-active", 1, m, {m: b"a"})
    assert commit(w, "g6-active", 1, m, {("t", 1): 9}) == {("t", 1): 0}
    old = gc.config.offsets_retention_ms
    gc.config.offsets_retention_ms = 0
    try:
        assert gc.call_blocking(gc.expire_offsets()) >= 1
    finally:
        gc.config.offsets_retention_ms = old
    assert fetch(w, "g6-standalone", [("t", 0)]) == (0, {("t", 0): (-1, 0)})
    assert fetch(w, "g6-active", [("t", 1)]) == (0, {("t", 1): (9, 0)})  # a group with members keeps them
    listed = {g.group_id for g in node.wire().call(ListGroupsRequest(states_filter=[]), 4).groups}
    assert "g6-standalone" not in listed and "g6-active" in listed


def test_deleting_a_topic_drops_its_committed_offsets(node: InProcessNode) -> None:
    """Kafka's GroupMetadataManager.cleanupGroupMetadata: DeleteTopics or HTTP DELETE /v1/topics/{topic} drops every
    group's offsets of the topic (committed and pending); other topics keep theirs; a topic created again under the
    name starts without offsets."""
    from fastapi.testclient import TestClient
    from kafka.protocol.admin import DeleteTopicsRequest

    from log.types import TopicPartition
    from metadata.group_offsets import CommittedOffset
    from service.app import create_app

    gc = node.coordinators.groups
    w = node.wire()
    node.node.create_topic("gone-k", 2)
    node.node.create_topic("gone-h", 1)
    parts = [("t", 0), ("gone-k", 0), ("gone-k", 1), ("gone-h", 0)]
    assert commit(w, "g7", -1, "", {("t", 0): 3, ("gone-k", 0): 4, ("gone-k", 1): 5, ("gone-h", 0): 6}) == \
        dict.fromkeys(parts, 0)
    assert commit(w, "g8", -1, "", {("gone-k", 1): 7}) == {("gone-k", 1): 0}
    got = gc.call_blocking(gc.txn_offset_commit("g8", 4747, 0, {TopicPartition("gone-k", 0): CommittedOffset(8)}))
    assert got == {TopicPartition("gone-k", 0): 0}

    # the Kafka path
    resp = w.call(DeleteTopicsRequest(topic_names=["gone-k"], timeout_ms=5000), 5)
    assert [(r.name, r.error_code) for r in resp.responses] == [("gone-k", 0)]
    assert fetch(w, "g7", parts) == (0, {("t", 0): (3, 0), ("gone-k", 0): (-1, 0), ("gone-k", 1): (-1, 0),
                                         ("gone-h", 0): (6, 0)})
    assert fetch(w, "g8", None, version=2) == (0, {})
    assert fetch(w, "g8", [("gone-k", 0)], stable=True) == (0, {("gone-k", 0): (-1, 0)})  # no pending offset left
    assert gc.complete_txn(4747, commit=True) == 0
    # a commit right after the deletion is refused: the topic is gone (no stale offset comes back)
    assert commit(w, "g7", -1, "", {("gone-k", 0): 9}) == {("gone-k", 0): E.UNKNOWN_TOPIC_OR_PARTITION}

    # the HTTP path
    with TestClient(create_app(node.node)) as http:
        assert http.delete("/v1/topics/gone-h").status_code == 204
        offsets = [(o["topic"], o["partition"], o["offset"]) for o in http.get("/v1/groups/g7").json()["offsets"]]
        assert offsets == [("t", 0, 3)]
    assert fetch(w, "g7", None, version=2) == (0, {("t", 0): (3, 0)})

    # created again: another topic under the same name, without the old offsets
    node.node.create_topic("gone-k", 2)
    assert fetch(w, "g7", [("gone-k", 0), ("gone-k", 1)]) == (0, {("gone-k", 0): (-1, 0), ("gone-k", 1): (-1, 0)})
    assert commit(w, "g7", -1, "", {("gone-k", 0): 1}) == {("gone-k", 0): 0}
    assert fetch(w, "g7", [("gone-k", 0)]) == (0, {("gone-k", 0): (1, 0)})
