"""Erasures in process: deadlines watched (GET /v1/cleaner, metrics), an erasure during a
leadership change (the superseded leader's work is rejected, the new leader finishes it from
the receipt in the shared metadata store), and the tombstones' own removal (``complete``)."""

from __future__ import annotations

import shutil
import time
from pathlib import Path
from typing import Any

from fastapi.testclient import TestClient

from log.local_log import RecordSpec
from service.config import load_config
from service.node import Node
from tests.e2e.test_erasure_e2e import dir_blobs, find_values

TIERED = {"cleanup.policy": "compact", "remote.storage.enable": True, "local.retention.ms": -1}


def _node(tmp_path: Path, name: str, broker_id: int = 0, **options: Any) -> Node:
    return Node(load_config({"data_dir": tmp_path / name, "remote": (tmp_path / "objects").as_uri(),
                             "metadata": f"sqlite:///{tmp_path}/metadata.db", "broker_id": broker_id,
                             "cleaner_threads": 0, "tiered_cleaner_threads": 0, **options}, env={}))


def test_erasures_at_risk_show_in_the_cleaner_status_and_metrics(client: TestClient) -> None:
    client.post("/v1/topics", json={"name": "slow", "partitions": 1,
                                    "config": {"cleanup.policy": "compact", "min.compaction.lag.ms": 1000}})
    now = int(time.time() * 1000)
    r = client.post("/v1/topics/slow/erasures", json={"keys": ["a"], "deadline_ms": now + 1500})
    assert r.status_code == 202, r.text
    eid = r.json()["erasure_id"]
    assert client.get("/v1/cleaner").json()["erasures_at_risk"] == []
    time.sleep(1.6)  # no erasure thread runs here: the deadline passes with the erasure pending
    status = client.get("/v1/cleaner").json()
    (risk,) = status["erasures_at_risk"]
    assert risk["erasure_id"] == eid and risk["overdue"] and risk["time_left_ms"] < 0
    assert risk["compaction_delay_ms"] >= 1500
    assert status["partitions_at_risk"] == ["slow-0"]
    metrics = client.get("/metrics").text
    assert "erasures_overdue_count 1.0" in metrics and "erasures_pending_count 1.0" in metrics
    receipt = client.get(f"/v1/erasures/{eid}").json()
    assert receipt["time_left_ms"] < 0 and receipt["deadline_missed"] and receipt["state"] == "pending"


def test_an_erasure_during_a_leadership_change_is_finished_by_the_new_leader(tmp_path: Path) -> None:
    secret = [b"LEADER-MOVE-SECRET-1-" + b"q" * 50, b"LEADER-MOVE-SECRET-2-" + b"r" * 50]
    a = _node(tmp_path, "a", 0)
    b: Node | None = None
    try:
        a.create_topic("t", 1, {**TIERED, "min.compaction.lag.ms": 1500})
        a.become_leader("t", 0, 0, 0)
        a.produce("t", 0, [RecordSpec(b"victim", secret[0]), RecordSpec(b"other", b"other-1")])
        a.roll("t", 0)
        a.tier("t", 0)
        a.produce("t", 0, [RecordSpec(b"victim", secret[1])])
        rec = a.erasures.create("t", [b"victim"])
        a.erasures.run_once()  # min.compaction.lag.ms holds it: still pending
        assert a.erasures.get(rec.erasure_id).state == "pending"
        # B gets a replica of A's partition (what replication would give it) and leadership moves
        # to B, while A keeps running with its cached epoch 0: a zombie
        a.log("t", 0).flush()
        (tmp_path / "b").mkdir()
        shutil.copytree(tmp_path / "a" / "t-0", tmp_path / "b" / "t-0")
        for f in ("topics.json", "topics.json.bak"):
            if (tmp_path / "a" / f).exists():
                shutil.copy(tmp_path / "a" / f, tmp_path / "b" / f)
        b = _node(tmp_path, "b", 1)
        b.become_leader("t", 0, 1, 1)
        a.become_leader  # noqa: B018 - A is not told: it still acts under epoch 0
        time.sleep(1.6)
        fenced_before = a.metrics()["fenced_operations_total"]
        a.erasures.run_once()  # the zombie's tiering / round / progress is rejected
        assert a.metrics()["fenced_operations_total"] > fenced_before
        assert a.erasures.get(rec.erasure_id).state == "pending"
        a.erasures.run_once()  # now it resolves the leader again: a follower does nothing
        assert a.erasures.get(rec.erasure_id).state == "pending"
        for _ in range(20):
            b.erasures.run_once()
            if b.erasures.get(rec.erasure_id).state != "pending":
                break
            time.sleep(0.2)
        receipt = b.erasures.receipt(b.erasures.get(rec.erasure_id))
        assert receipt["state"] == "values_removed", receipt
        (key,) = receipt["keys"]
        rounds = {r.round_id: r for r in b.metadata.list_compaction_reports(b.log("t", 0).topic_partition)}
        assert key["rounds"] and all(rounds[r].leader_epoch == 1 for r in key["rounds"])
        left = find_values(_chain(tmp_path / "b", tmp_path / "objects"), secret)
        assert not any(left.values()), left
        latest = {r.key: r.value for r in b.read("t", 0, 0).records}
        assert latest == {b"other": b"other-1", b"victim": None}
    finally:
        a.shutdown()
        if b is not None:
            b.shutdown()


def _chain(*roots: Path) -> Any:
    return dir_blobs(*roots)


def test_the_tombstones_go_after_delete_retention_and_the_erasure_completes(tmp_path: Path) -> None:
    node = _node(tmp_path, "n", 0)
    try:
        node.create_topic("t", 1, {"cleanup.policy": "compact", "delete.retention.ms": 0,
                                   "file.delete.delay.ms": 3_600_000})
        node.produce("t", 0, [RecordSpec(b"victim", b"old"), RecordSpec(b"other", b"o1")])
        rec = node.erasures.create("t", [b"victim"])
        state = "pending"
        for i in range(30):
            node.erasures.run_once()
            state = node.erasures.get(rec.erasure_id).state
            if state == "complete":
                break
            if state == "values_removed" and i % 3 == 0:  # later traffic gives later rounds dirty data
                node.produce("t", 0, [RecordSpec(b"other", f"o{i}".encode())])
            time.sleep(0.1)
        assert state == "complete", node.erasures.receipt(node.erasures.get(rec.erasure_id))
        assert b"victim" not in {r.key for r in node.read("t", 0, 0).records}
        assert not any(find_values(dir_blobs(tmp_path / "n"), [b"victim"]).values())
    finally:
        node.shutdown()


def test_an_erasure_of_a_deleted_topic_fails_with_the_reason_and_other_brokers_leave_it_alone(
        tmp_path: Path) -> None:
    owner = _node(tmp_path, "owner", 0)
    other = _node(tmp_path, "other", 1)  # shares the metadata store, not the (non-tiered) topic
    try:
        owner.create_topic("local", 1, {"cleanup.policy": "compact", "min.compaction.lag.ms": 60_000})
        owner.produce("local", 0, [RecordSpec(b"k", b"v")])
        rec = owner.erasures.create("local", [b"k"])
        other.erasures.run_once()  # not its partition: it must not fail it (regression)
        assert other.erasures.get(rec.erasure_id).state == "pending"
        owner.delete_topic("local")
        owner.erasures.run_once()
        failed = owner.erasures.get(rec.erasure_id)
        assert failed.state == "failed" and "no longer exists" in (failed.error or "")
        assert owner.erasures.receipt(failed)["error"] == failed.error
    finally:
        owner.shutdown()
        other.shutdown()


def test_tombstones_that_open_an_empty_active_segment_are_rolled_and_tiered(tmp_path: Path) -> None:
    """Regression: the tombstones were rolled out of the active segment only when it held older
    records too; appended first into an empty one they stayed there and the erasure never ended."""
    node = _node(tmp_path, "n", 0)
    try:
        node.create_topic("t", 1, {**TIERED, "local.retention.ms": 0})
        node.become_leader("t", 0, 0, 0)
        node.produce("t", 0, [RecordSpec(b"victim", b"EMPTY-ACTIVE-SECRET"), RecordSpec(b"o", b"o1")])
        node.roll("t", 0)
        node.tier("t", 0)
        node.clean("t", 0)
        assert node.log("t", 0).active_segment.size == 0
        rec = node.erasures.create("t", [b"victim"])
        for _ in range(20):
            node.erasures.run_once()
            if node.erasures.get(rec.erasure_id).state != "pending":
                break
            time.sleep(0.1)
        receipt = node.erasures.receipt(node.erasures.get(rec.erasure_id))
        assert receipt["state"] == "values_removed", receipt
        assert [s["tier"] for s in receipt["keys"][0]["segments"]] == ["remote"]
        left = find_values(dir_blobs(tmp_path / "n", tmp_path / "objects"), [b"EMPTY-ACTIVE-SECRET"])
        assert not any(left.values()), left
    finally:
        node.shutdown()


def test_orphan_objects_holding_the_key_are_deleted_too(tmp_path: Path) -> None:
    """An object no metadata row names (a crashed Spark driver's upload) counts: it is swept at
    once under the orphan sweep's rules and listed on the receipt."""
    import uuid

    node = _node(tmp_path, "n", 0)
    try:
        node.create_topic("t", 1, TIERED)
        node.become_leader("t", 0, 0, 0)
        node.produce("t", 0, [RecordSpec(b"victim", b"ORPHAN-HELD-SECRET"), RecordSpec(b"o", b"o1")])
        node.roll("t", 0)
        node.tier("t", 0)
        store = node.object_store
        (log_key,) = [k for k in store.list("t-0/") if k.endswith(".log")]
        orphan = f"t-0/{0:020d}-{uuid.uuid4().hex}.log"
        store.put(orphan, store.get(log_key))
        rec = node.erasures.create("t", [b"victim"])
        for _ in range(20):
            node.erasures.run_once()
            if node.erasures.get(rec.erasure_id).state != "pending":
                break
            time.sleep(0.1)
        receipt = node.erasures.receipt(node.erasures.get(rec.erasure_id))
        assert receipt["state"] == "values_removed", receipt
        assert {"object": orphan, "orphan": True} in [
            {k: v for k, v in d.items() if k != "deleted_ms"} for d in receipt["keys"][0]["deleted"]]
        assert not store.exists(orphan)
        left = find_values(dir_blobs(tmp_path / "n", tmp_path / "objects"), [b"ORPHAN-HELD-SECRET"])
        assert not any(left.values()), left
    finally:
        node.shutdown()
