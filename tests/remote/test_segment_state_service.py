"""Through the HTTP API: a node that lost its data dir serves an idempotent producer as the
original node would (KIP-405 LogSegmentData restore)."""

from __future__ import annotations

import shutil
import time
import warnings
from pathlib import Path
from typing import Any

with warnings.catch_warnings():
    warnings.simplefilter("ignore")
    from fastapi.testclient import TestClient

from service.app import create_app
from service.config import load_config
from service.node import Node

CFG = {"remote.storage.enable": True, "cleanup.policy": "compact,delete", "segment.bytes": 2048,
       "retention.ms": -1, "local.retention.ms": 0}
T = "/v1/topics/orders/partitions/0"


def _node(tmp_path: Path, data: str) -> Node:
    return Node(load_config({"data_dir": tmp_path / data, "remote": (tmp_path / "objects").as_uri(),
                             "metadata": f"sqlite:///{tmp_path / 'metadata.db'}", "cleaner_threads": 0,
                             "tiered_cleaner_threads": 0}, env={}))


def _produce(c: TestClient, i: int, seq: int, n: int = 2) -> Any:
    return c.post(f"{T}/records", json={
        "records": [{"key": f"k{(i + j) % 4}", "value": f"v{i}-{j}" * 20} for j in range(n)],
        "producer": {"id": 9, "epoch": 2, "base_sequence": seq}})


def _read_all(c: TestClient) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    offset = 0
    while True:
        r = c.get(f"{T}/records", params={"offset": offset, "max_records": 1000}).json()
        out.extend(r["records"])
        if r["next_offset"] >= r["high_watermark"] or r["next_offset"] == offset:
            return out
        offset = r["next_offset"]


def test_a_new_node_recognises_a_retried_batch_of_a_producer_seen_only_in_remote_segments(tmp_path: Path) -> None:
    node = _node(tmp_path, "data-old")
    with TestClient(create_app(node)) as c:
        assert c.post("/v1/topics", json={"name": "orders", "partitions": 1, "config": CFG}).status_code == 201
        seq = 0
        for i in range(30):
            r = _produce(c, i, seq)
            assert r.status_code == 200, r.text
            seq += 2
        last = r.json()
        assert c.post(f"{T}/roll").status_code == 200
        time.sleep(0.01)  # local.retention.ms=0 expires what is strictly older than now
        tiered = c.post(f"{T}/tier").json()
        assert tiered["copied"] and tiered["deleted_local"]
        before = _read_all(c)
        assert len(before) == 60
    node.shutdown()
    shutil.rmtree(tmp_path / "data-old")  # the disk is gone

    node = _node(tmp_path, "data-new")
    with TestClient(create_app(node)) as c:
        # topic configs live in the shared metadata store: the new node knows the topic at once
        assert c.get("/v1/topics/orders").json()["config"]["cleanup.policy"] == "compact,delete"
        assert c.post("/v1/topics", json={"name": "orders", "partitions": 1, "config": CFG}).status_code == 409
        retried = _produce(c, 29, seq - 2)  # the producer never saw the ack of its last batch
        assert retried.status_code == 200, retried.text
        assert retried.json() == {**last, "duplicate": True}
        gap = _produce(c, 99, seq + 4)
        assert gap.status_code == 409 and "sequence" in gap.json()["error"]
        nxt = _produce(c, 30, seq)
        assert nxt.status_code == 200 and nxt.json()["base_offset"] == last["last_offset"] + 1
        after = _read_all(c)
        assert after[:len(before)] == before and len(after) == len(before) + 2
    node.shutdown()
