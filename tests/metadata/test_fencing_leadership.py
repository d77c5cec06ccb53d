"""Zombie leaders on in-process nodes sharing one metadata store and one object store
.

Broker A (id 0) leads a tiered compacted partition at epoch 0, cleans it ({LE-0 -> CO_a}),
then leadership moves to broker B (id 1, a replica of A's log) at epoch 1, which cleans
further ({LE-0 -> CO_a, LE-1 -> CO_b}). A is then either restarted (it must not adopt B's
epoch) or keeps running with its cached epoch 0 (a stalled zombie). Whatever A tries
(tier, clean, produce, delete the topic) is refused with 409 naming the leader, nothing
shared changes, fenced_operations_total counts it, and everything B acknowledged reads
back from B.
"""

from __future__ import annotations

import shutil
import warnings
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

with warnings.catch_warnings():
    warnings.simplefilter("ignore")
    from fastapi.testclient import TestClient

from log.types import TopicPartition
from metadata.errors import FencedLeaderEpochError, NotLeaderForPartitionError
from service.app import create_app
from service.config import load_config
from service.node import Node

TOPIC = "zombie"
TP = TopicPartition(TOPIC, 0)
P0 = f"/v1/topics/{TOPIC}/partitions/0"
CONFIG = {"cleanup.policy": "compact", "remote.storage.enable": True, "segment.bytes": 2048,
          "local.retention.ms": -1, "min.cleanable.dirty.ratio": 0.01}


class Broker:
    """One node (own data dir, shared stores) and a TestClient on its app."""

    def __init__(self, root: Path, name: str, broker_id: int) -> None:
        self.root, self.name, self.broker_id = root, name, broker_id
        self.node = Node(load_config({
            "data_dir": root / name, "broker_id": broker_id, "remote": (root / "objects").as_uri(),
            "metadata": f"sqlite:///{root / 'metadata.db'}", "cleaner_threads": 0, "tiered_cleaner_threads": 0,
            "tiering_interval_ms": 3_600_000, "roll_check_interval_ms": 3_600_000}, env={})).start()
        self.client = TestClient(create_app(self.node))

    def close(self) -> None:
        self.client.close()
        self.node.shutdown()

    def fenced_total(self) -> float:
        return self.node.metrics()["fenced_operations_total"]


@pytest.fixture
def brokers(tmp_path: Path) -> Iterator[list[Broker]]:
    opened: list[Broker] = []
    yield opened
    for b in opened:
        b.close()


def _open(brokers: list[Broker], root: Path, name: str, broker_id: int) -> Broker:
    b = Broker(root, name, broker_id)
    brokers.append(b)
    return b


def _produce(b: Broker, model: dict[int, tuple[str, str]], n: int, tag: str) -> None:
    recs = [{"key": f"k{i % 23}", "value": f"{tag}-{i}"} for i in range(n)]
    r = b.client.post(f"{P0}/records", json={"records": recs})
    assert r.status_code == 200, r.text
    base = r.json()["base_offset"]
    for i, rec in enumerate(recs):
        model[base + i] = (rec["key"], rec["value"])


def _roll_tier_clean(b: Broker) -> dict[str, Any]:
    assert b.client.post(f"{P0}/roll").status_code == 200
    r = b.client.post(f"{P0}/tier")
    assert r.status_code == 200, r.text
    r = b.client.post(f"{P0}/clean")
    assert r.status_code == 200, r.text
    return r.json()  # type: ignore[no-any-return]


def _read_all(b: Broker) -> dict[int, tuple[str, str]]:
    out: dict[int, tuple[str, str]] = {}
    offset = 0
    while True:
        r = b.client.get(f"{P0}/records", params={"offset": offset, "max_records": 1000})
        assert r.status_code == 200, r.text
        page = r.json()
        if not page["records"]:
            return out
        out.update({x["offset"]: (x["key"], x["value"]) for x in page["records"]})
        offset = page["next_offset"]


def assert_acknowledged_reads_back(b: Broker, model: dict[int, tuple[str, str]]) -> None:
    """Compaction may drop superseded values, never the latest value of a key, and never
    serves anything that was not acknowledged at that offset."""
    got = _read_all(b)
    assert all(model.get(o) == kv for o, kv in got.items()), "a record nobody acknowledged was served"
    latest: dict[str, int] = {}
    for o, (k, _v) in sorted(model.items()):
        latest[k] = o
    missing = sorted(o for o in latest.values() if o not in got)
    assert missing == [], f"acknowledged latest values lost at offsets {missing}"


def _shared_state(b: Broker) -> tuple[Any, ...]:
    md = b.node.metadata
    segs = sorted((m.id, m.state.name, m.superseded_by) for m in md.list_remote_log_segments(
        TP, include_superseded=True, states=None))
    return (md.leader_state(TP), md.cleaner_offsets(TP), segs, sorted(b.node.object_store.list("")))


def _takeover(brokers: list[Broker], root: Path, model: dict[int, tuple[str, str]]) -> tuple[Broker, int]:
    """A leads at epoch 0 and cleans; A stops; B (a replica of A's log) becomes leader at
    epoch 1, produces and cleans. Returns (B, A's cleaner offset)."""
    a = _open(brokers, root, "a", 0)
    assert a.client.post("/v1/topics", json={"name": TOPIC, "config": CONFIG}).status_code == 201
    for i in range(4):
        _produce(a, model, 60, f"a{i}")
    co_a = _roll_tier_clean(a)["checkpoint"]
    assert a.node.metadata.cleaner_offsets(TP) == {0: co_a}
    _produce(a, model, 80, "a-dirty")
    assert a.client.post(f"{P0}/roll").status_code == 200
    assert a.client.post(f"{P0}/tier").status_code == 200
    brokers.remove(a)
    a.close()
    shutil.copytree(root / "a", root / "b")  # what replication gave B
    b = _open(brokers, root, "b", 1)
    r = b.client.post(f"{P0}/leadership", json={"leader_epoch": 1, "broker_id": 1})
    assert r.status_code == 200, r.text
    _produce(b, model, 90, "b")
    co_b = _roll_tier_clean(b)["checkpoint"]
    assert b.node.metadata.cleaner_offsets(TP) == {0: co_a, 1: co_b} and co_b > co_a
    return b, co_a


def test_restarted_old_leader_does_not_adopt_the_new_leaders_epoch(tmp_path: Path, brokers: list[Broker]) -> None:
    model: dict[int, tuple[str, str]] = {}
    b, co_a = _takeover(brokers, tmp_path, model)
    before = _shared_state(b)
    a = _open(brokers, tmp_path, "a", 0)  # the old leader restarts
    fenced0 = a.fenced_total()
    for method, path, body in (("post", f"{P0}/tier", None), ("post", f"{P0}/clean", None),
                               ("post", f"{P0}/records", {"records": [{"key": "k1", "value": "zombie"}]})):
        r = a.client.request(method.upper(), path, json=body)
        assert r.status_code == 409, (path, r.status_code, r.text)
        msg = r.json()["error"]
        assert "broker 0 is not the leader" in msg and "broker 1 holds leader epoch 1" in msg, msg
        assert "leader_epoch=2, broker_id=0" in msg  # what to do
    assert a.fenced_total() >= fenced0 + 3
    assert not a.node.remote.is_leader(TP)
    with pytest.raises(NotLeaderForPartitionError):
        a.node.remote.leader_epoch(TP)
    assert _shared_state(b) == before  # the zombie changed nothing shared
    # the real leader keeps cleaning: its LE-1 offset never "goes backwards"
    _produce(b, model, 70, "b2")
    co_b2 = _roll_tier_clean(b)["checkpoint"]
    assert b.node.metadata.cleaner_offsets(TP) == {0: co_a, 1: co_b2}
    assert_acknowledged_reads_back(b, model)
    # the partition's describe on the follower still works and shows the registered leader's epoch lineage
    assert a.client.get(P0).status_code == 200


def test_leadership_can_move_back_to_the_old_leader_with_a_higher_epoch(tmp_path: Path,
                                                                      brokers: list[Broker]) -> None:
    model: dict[int, tuple[str, str]] = {}
    b, _co_a = _takeover(brokers, tmp_path, model)
    a = _open(brokers, tmp_path, "a", 0)
    r = a.client.post(f"{P0}/leadership", json={"leader_epoch": 1, "broker_id": 0})
    assert r.status_code == 409 and "use leader_epoch 2" in r.json()["error"], r.text
    # B hands leadership back to A: B becomes a follower at once, A resumes at epoch 2
    assert b.client.post(f"{P0}/leadership", json={"leader_epoch": 2, "broker_id": 0}).status_code == 200
    r = b.client.post(f"{P0}/tier")
    assert r.status_code == 409 and "broker 0 holds leader epoch 2" in r.json()["error"]
    assert a.node.remote.is_leader(TP) and a.node.remote.leader_epoch(TP) == 2


def test_delete_topic_on_a_non_leader_deletes_nothing(tmp_path: Path, brokers: list[Broker]) -> None:
    model: dict[int, tuple[str, str]] = {}
    b, _co_a = _takeover(brokers, tmp_path, model)
    a = _open(brokers, tmp_path, "a", 0)
    before = _shared_state(b)
    fenced0 = a.fenced_total()
    r = a.client.delete(f"/v1/topics/{TOPIC}")
    assert r.status_code == 409, r.text
    msg = r.json()["error"]
    assert "broker 1 holds leader epoch 1" in msg and "NOT deleted" in msg and "scope=local" in msg, msg
    assert a.fenced_total() == fenced0 + 1
    assert _shared_state(b) == before
    assert a.client.get(f"/v1/topics/{TOPIC}").status_code == 200  # not even the local copy went
    # a follower may drop its own local copy, and says that is all it did
    r = a.client.delete(f"/v1/topics/{TOPIC}", params={"scope": "local"})
    assert r.status_code == 200, r.text
    assert r.json() == {"topic": TOPIC, "partitions": 1, "local_deleted": True, "remote_deleted": False}
    assert a.client.get(f"/v1/topics/{TOPIC}").status_code == 404
    assert _shared_state(b) == before
    assert_acknowledged_reads_back(b, model)
    # the leader deletes everything
    assert b.client.delete(f"/v1/topics/{TOPIC}").status_code == 204
    assert list(b.node.object_store.list("")) == []
    assert b.node.metadata.partitions() == []


def test_a_stalled_zombie_cannot_delete_or_publish(tmp_path: Path, brokers: list[Broker]) -> None:
    """A keeps running with its cached epoch 0 while B takes over (no restart)."""
    model: dict[int, tuple[str, str]] = {}
    a = _open(brokers, tmp_path, "a", 0)
    assert a.client.post("/v1/topics", json={"name": TOPIC, "config": CONFIG}).status_code == 201
    for i in range(4):
        _produce(a, model, 60, f"a{i}")
    _roll_tier_clean(a)
    _produce(a, model, 80, "a-dirty")
    assert a.client.post(f"{P0}/roll").status_code == 200
    assert a.client.post(f"{P0}/tier").status_code == 200
    a.node.log_manager.get_log(TP).flush()
    shutil.copytree(tmp_path / "a", tmp_path / "b", ignore=shutil.ignore_patterns("remote-cache", ".lock"))
    b = _open(brokers, tmp_path, "b", 1)
    assert b.client.post(f"{P0}/leadership", json={"leader_epoch": 1, "broker_id": 1}).status_code == 200
    before = _shared_state(b)
    r = a.client.delete(f"/v1/topics/{TOPIC}")
    assert r.status_code == 409 and "NOT deleted" in r.json()["error"], r.text
    r = a.client.post(f"{P0}/clean")  # its round is fenced at its first shared write
    assert r.status_code == 409, r.text
    assert _shared_state(b) == before
    with pytest.raises(FencedLeaderEpochError):
        a.node.remote.leader_epoch(TP)  # the rejection made A resolve the leader again: a follower now
    _produce(b, model, 50, "b")
    _roll_tier_clean(b)
    assert_acknowledged_reads_back(b, model)


def test_a_followers_background_cleaner_skips_the_partition(tmp_path: Path, brokers: list[Broker]) -> None:
    """The tiered pool's selection on the restarted old leader neither picks the partition
    (broker 1 cleans it) nor marks it uncleanable, and counts no fenced operation."""
    model: dict[int, tuple[str, str]] = {}
    b, _co_a = _takeover(brokers, tmp_path, model)
    _produce(b, model, 60, "b-dirty")
    assert b.client.post(f"{P0}/roll").status_code == 200
    assert b.client.post(f"{P0}/tier").status_code == 200
    a = _open(brokers, tmp_path, "a", 0)
    fenced0 = a.fenced_total()
    manager = a.node.cleaner.manager
    assert manager.grab_filthiest_compacted_log(tiered=True) is None
    assert TP not in manager.uncleanable_partitions()
    assert a.fenced_total() == fenced0
    picked = b.node.cleaner.manager.grab_filthiest_compacted_log(tiered=True)  # the leader does pick it
    assert picked is not None and picked.topic_partition == TP
    b.node.cleaner.manager.done_cleaning(TP, None)
