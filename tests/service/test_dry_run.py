"""POST .../clean?dry_run=true through the real app: the plan of the round (segments to download,
rewrite and skip, and which test skipped each; bytes down and up; records and bytes reclaimable),
with every file, object and metadata row unchanged, and the real round then doing what it said."""

from __future__ import annotations

import hashlib
from pathlib import Path
from typing import Any

from fastapi.testclient import TestClient
from sqlalchemy import create_engine, select

from metadata.sql import normalize_url
from metadata.sql.schema import _meta
from service.node import Node

P0 = "/v1/topics/t/partitions/0"
OLD = 1000  # record timestamps long past: local.retention.ms=0 expires tiered local copies at once


def _produce(c: TestClient, records: list[tuple[str, str | None]]) -> None:
    r = c.post(f"{P0}/records", json={"records": [{"key": k, "value": v, "timestamp": OLD} for k, v in records]})
    assert r.status_code == 200, r.text


def _files(root: Path) -> dict[str, str]:
    """Every file under the data dir (the file:// object store included) and its content hash; the
    SQLite database's own files are compared row by row instead."""
    return {str(p.relative_to(root)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(root.rglob("*")) if p.is_file() and not p.name.startswith("metadata.db")}


def _rows(node: Node) -> dict[str, list[tuple[Any, ...]]]:
    engine = create_engine(normalize_url(node.config.metadata_url))
    try:
        with engine.connect() as conn:
            return {t.name: sorted(tuple(r) for r in conn.execute(select(t))) for t in _meta.sorted_tables}
    finally:
        engine.dispose()


def _state(node: Node) -> tuple[dict[str, str], dict[str, list[tuple[Any, ...]]], dict[Any, int]]:
    for log in node.log_manager.all_logs().values():  # a roll's background sync writes the recovery point: let it land first
        log.sync_rolled()
    return _files(node.data_dir), _rows(node), dict(node.cleaner.manager.all_cleaner_checkpoints())


def _roll_and_tier(client: TestClient) -> None:
    assert client.post(f"{P0}/roll").status_code == 200
    assert client.post(f"{P0}/tier").json()["copied"]


def _tiered_cold_keys(client: TestClient, **config: Any) -> None:
    """Topic "t", tiered: 300 cold keys in remote segments of about 30 records, cleaned once (``config`` added)."""
    r = client.post("/v1/topics", json={"name": "t", "config": {
        "cleanup.policy": "compact,delete", "retention.ms": -1, "remote.storage.enable": True,
        "segment.bytes": 2048, "local.retention.ms": 0, "min.cleanable.dirty.ratio": 0.01, **config}})
    assert r.status_code == 201, r.text
    for i in range(0, 300, 30):
        _produce(client, [(f"cold-{j:04d}", "x" * 20) for j in range(i, i + 30)])
    _roll_and_tier(client)
    assert client.post(f"{P0}/clean").status_code == 200


def test_local_dry_run_plans_the_round_and_changes_nothing(client: TestClient, node: Node) -> None:
    r = client.post("/v1/topics", json={"name": "t", "config": {"cleanup.policy": "compact", "segment.bytes": 1024,
                                                                "delete.retention.ms": 0}})
    assert r.status_code == 201
    for n in range(2):
        _produce(client, [(f"k{i}", f"v{n}-{i}" + "x" * 40) for i in range(20)])
        assert client.post(f"{P0}/roll").status_code == 200
    _produce(client, [("k0", None)])  # the active segment: above the cleanable range
    before = _state(node)

    r = client.post(f"{P0}/clean", params={"dry_run": "true"})
    assert r.status_code == 200, r.text
    plan = r.json()
    assert _state(node) == before
    assert (plan["dry_run"], plan["engine"], plan["first_dirty_offset"]) == (True, "local", 0)
    assert plan["end_offset"] == 40 and not plan["map_full"]
    assert plan["records_removed"] == {"superseded": 20, "tombstone": 0, "aborted": 0, "marker": 0}
    assert plan["records_reclaimable"] == 20
    assert plan["segments_to_download"] == [] and plan["estimated_bytes_down"] == plan["estimated_bytes_up"] == 0
    active = [s for s in plan["segments"] if s["base_offset"] == 40]
    assert active and active[0]["action"] == "skip" and plan["segments_skipped"] == {active[0]["segment_id"]:
                                                                                      "not-dirty"}
    assert set(plan["segments_to_rewrite"]) == {s["segment_id"] for s in plan["segments"] if s["base_offset"] < 40}
    assert client.get(f"{P0}/compactions").json() == []  # a dry run is not a round

    stats = client.post(f"{P0}/clean").json()  # the real round does what the plan said
    assert stats["records_removed"] == plan["records_removed"]
    assert stats["checkpoint"] == plan["end_offset"]
    assert stats["bytes_read"] - stats["bytes_written"] == plan["bytes_reclaimable"]
    (report,) = client.get(f"{P0}/compactions").json()
    assert [s["segment_id"] for s in report["segments"]] == plan["segments_to_rewrite"]


def test_tiered_dry_run_downloads_only_what_the_skip_tests_allow(client: TestClient, node: Node) -> None:
    _tiered_cold_keys(client)
    _produce(client, [("hot-1", "a"), ("hot-2", "b"), ("hot-1", "c"), ("cold-0007", "new")])
    _roll_and_tier(client)
    before = _state(node)
    down_before = node.object_store.bytes_downloaded
    up_before = node.object_store.bytes_uploaded

    r = client.post(f"{P0}/clean", params={"dry_run": "true"})
    assert r.status_code == 200, r.text
    plan = r.json()
    assert _state(node) == before
    assert node.object_store.bytes_uploaded == up_before
    assert node.object_store.bytes_downloaded - down_before == plan["estimated_bytes_down"] > 0
    assert plan["engine"] == "tiered" and plan["leader_epoch"] >= 0
    skipped = plan["segments_skipped"]
    assert "bloom" in skipped.values()
    assert not set(skipped) & set(plan["segments_to_download"])  # ruled out: never downloaded
    assert not set(skipped) & set(plan["segments_to_rewrite"])
    assert all(s["tier"] == "remote" for s in plan["segments"])
    # hot-1's first value and cold-0007's old value are superseded
    assert plan["records_removed"] == {"superseded": 2, "tombstone": 0, "aborted": 0, "marker": 0}
    assert plan["estimated_bytes_up"] > 0

    down_before = node.object_store.bytes_downloaded
    stats = client.post(f"{P0}/clean").json()
    assert stats["records_removed"] == plan["records_removed"]
    assert stats["checkpoint"] == plan["end_offset"]
    assert stats["segments_skipped_by_bloom"] == list(skipped.values()).count("bloom")
    assert stats["bytes_downloaded"] == plan["estimated_bytes_down"]
    assert stats["bytes_uploaded"] == plan["estimated_bytes_up"]
    report = client.get(f"{P0}/compactions", params={"limit": 1}).json()[0]
    assert [s["segment_id"] for s in report["segments"] if s["action"] == "rewritten"] == plan["segments_to_rewrite"]


def test_segments_the_key_index_rules_out_are_skipped_without_a_download(client: TestClient, node: Node) -> None:
    """With a bloom filter that matches half of all keys, the exact key index decides."""
    _tiered_cold_keys(client, **{"remote.compaction.bloom.fpp": 0.5})
    _produce(client, [(f"hot-{i}", "a") for i in range(8)] + [("hot-1", "b")])
    _roll_and_tier(client)
    before = _state(node)
    plan = client.post(f"{P0}/clean", params={"dry_run": "true"}).json()
    assert _state(node) == before
    skipped = plan["segments_skipped"]
    assert "key-index" in skipped.values()
    assert not set(skipped) & set(plan["segments_to_download"])
    assert plan["records_removed"]["superseded"] == 1
    stats = client.post(f"{P0}/clean").json()
    assert stats["records_removed"] == plan["records_removed"] and stats["checkpoint"] == plan["end_offset"]
    report = client.get(f"{P0}/compactions", params={"limit": 1}).json()[0]
    by_test = {"skipped-by-bloom": "bloom", "skipped-by-key-index": "key-index"}
    assert {s["segment_id"]: by_test[s["action"]] for s in report["segments"] if s["action"] in by_test} == skipped
    assert [s["segment_id"] for s in report["segments"] if s["action"] == "rewritten"] == plan["segments_to_rewrite"]


def test_a_clean_partitions_segments_are_not_dirty_not_cost_gated(client: TestClient, node: Node) -> None:
    """A dry run on a tiered partition with nothing dirty weighs no segment: each is skipped as not-dirty. It was
    labelled cost-gate, a test that is off by default (remote.compaction.min.reclaimable.ratio 0)."""
    r = client.post("/v1/topics", json={"name": "t", "config": {
        "cleanup.policy": "compact", "remote.storage.enable": True, "local.retention.ms": 0}})
    assert r.status_code == 201, r.text
    _produce(client, [("a", "1"), ("b", "2")])
    _roll_and_tier(client)
    assert client.post(f"{P0}/clean").status_code == 200
    plan = client.post(f"{P0}/clean", params={"dry_run": "true"}).json()
    assert plan["first_dirty_offset"] == plan["end_offset"] and plan["segments_skipped"]
    assert set(plan["segments_skipped"].values()) == {"not-dirty"}, plan["segments_skipped"]


def test_a_segment_the_cost_gate_carries_forward_is_skipped_by_cost_gate(client: TestClient, node: Node) -> None:
    """With remote.compaction.min.reclaimable.ratio on, a remote segment of which only one record in thirty is
    superseded is carried forward: the dry run names the cost gate."""
    _tiered_cold_keys(client, **{"remote.compaction.min.reclaimable.ratio": 0.5})
    _produce(client, [("cold-0007", "new")])
    _roll_and_tier(client)
    plan = client.post(f"{P0}/clean", params={"dry_run": "true"}).json()
    assert "cost-gate" in plan["segments_skipped"].values(), plan["segments_skipped"]


def test_dry_run_errors(client: TestClient) -> None:
    assert client.post("/v1/topics/nope/partitions/0/clean", params={"dry_run": "true"}).status_code == 404
    client.post("/v1/topics", json={"name": "d", "config": {"cleanup.policy": "delete"}})
    r = client.post("/v1/topics/d/partitions/0/clean", params={"dry_run": "true"})
    assert r.status_code == 400 and "compact" in r.json()["error"]
