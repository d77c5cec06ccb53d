"""Real ``tiercompact serve`` processes following what other writers publish: a standalone Spark job's
compaction beside a serving node (reads converge within the sync interval, stale local copies are
dropped), and an erasure on a two-node cluster whose receipt says values_removed only once no node
holds or serves the value (a node down during the erasure drops its copy at restart, before serving)."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from tests.e2e.test_erasure_e2e import REPO, Server, _value, dir_blobs, find_values
from tests.support.serve import clean_env, free_port

SYNC_MS = 1000
#: the bound a node converges within: one sync interval, plus a pass's own time
CONVERGE_BOUND_S = SYNC_MS / 1000 * 2 + 3
KEYS, SEGMENTS = 30, 8
CONFIG = {"cleanup.policy": "compact", "remote.storage.enable": True, "local.retention.ms": 0,
          "min.cleanable.dirty.ratio": 0.01}


def _read_all(srv: Server, topic: str) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    offset = 0
    while True:
        page = srv.ok("GET", f"/v1/topics/{topic}/partitions/0/records",
                      params={"offset": offset, "max_records": 1000})
        if not page["records"]:
            return out
        out += page["records"]
        offset = page["next_offset"]


def _local_segments(srv: Server, topic: str) -> list[dict[str, Any]]:
    return [s for s in srv.ok("GET", f"/v1/topics/{topic}/partitions/0")["segments"]
            if s["tier"] in ("local", "both") and s["size_bytes"]]


def test_a_standalone_spark_compaction_reaches_the_serving_node(tmp_path: Path) -> None:
    pytest.importorskip("pyspark")
    objects = tmp_path / "objects"
    meta = f"sqlite:///{tmp_path}/metadata.db"
    srv = Server(tmp_path, objects.as_uri(), extra_args=("--metadata", meta,
                                                         "--metadata-sync-interval-ms", str(SYNC_MS)))
    try:
        srv.start()
        srv.ok("POST", "/v1/topics", json={"name": "s", "partitions": 1, "config": CONFIG})
        for gen in range(SEGMENTS):
            srv.ok("POST", "/v1/topics/s/partitions/0/records", json={
                "records": [{"key": f"k{i}", "value": f"v{gen}-{i}"} for i in range(KEYS)]})
            srv.ok("POST", "/v1/topics/s/partitions/0/roll")
        srv.ok("POST", "/v1/topics/s/partitions/0/tier")
        assert len(_read_all(srv, "s")) == KEYS * SEGMENTS
        assert len(_local_segments(srv, "s")) == SEGMENTS  # kept until cleaned

        job = subprocess.Popen([sys.executable, "-m", "service.cli", "spark-clean", "s", "--master", "local[2]",
                                "--metadata", meta, "--remote", objects.as_uri()],
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=REPO, env=clean_env())
        try:
            # poll while the job runs: the node converges on its publish, not on the job's exit
            converged_at: float | None = None
            ended_at: float | None = None
            while converged_at is None or ended_at is None:
                if ended_at is None and job.poll() is not None:
                    ended_at = time.time()
                if converged_at is None:
                    records = _read_all(srv, "s")
                    if len(records) == KEYS and not _local_segments(srv, "s"):
                        converged_at = time.time()
                if ended_at is not None and converged_at is None:
                    assert job.returncode == 0, job.communicate()
                    assert time.time() - ended_at < CONVERGE_BOUND_S, (len(records), _local_segments(srv, "s"))
                time.sleep(0.05)
        finally:
            if job.poll() is None:
                job.kill()
            out, err = job.communicate()
        assert job.returncode == 0, out + err
        (rnd, *_) = srv.ok("GET", "/v1/topics/s/partitions/0/compactions")
        assert rnd["engine"] == "spark"
        since_publish = converged_at - rnd["ended_ms"] / 1000
        assert since_publish < CONVERGE_BOUND_S, since_publish
        print(f"reads converged {since_publish:.2f} s after the standalone job's publish (sync interval "
              f"{SYNC_MS} ms; the job's process ended {ended_at - rnd['ended_ms'] / 1000:.2f} s after it)")
        assert {r["key"]: r["value"] for r in records} == {f"k{i}": f"v{SEGMENTS - 1}-{i}" for i in range(KEYS)}
    finally:
        srv.stop()


def _cluster_node(tmp_path: Path, name: str, broker_id: int, objects: Path, meta: str) -> Server:
    (tmp_path / name).mkdir(exist_ok=True)
    port = free_port()
    return Server(tmp_path / name, objects.as_uri(), extra_args=(
        "--broker-id", str(broker_id), "--metadata", meta, "--metadata-sync-interval-ms", "500",
        "--kafka-port", str(port), "--advertised-listener", f"127.0.0.1:{port}",
        "--broker-heartbeat-interval-ms", "200", "--broker-session-timeout-ms", "1500"))


def _led_by_b_with_copies_at_a(tmp_path: Path) -> tuple[Server, Server, list[bytes]]:
    """A leads ``u``, holds local copies of two values of ``victim`` (tiered), then B leads."""
    objects = tmp_path / "objects"
    meta = f"sqlite:///{tmp_path}/metadata.db"
    a = _cluster_node(tmp_path, "a", 1, objects, meta)
    b = _cluster_node(tmp_path, "b", 2, objects, meta)
    a.start()
    b.start()
    config = {**CONFIG, "local.retention.ms": -1, "min.compaction.lag.ms": 0}
    a.ok("POST", "/v1/topics", json={"name": "u", "partitions": 1, "config": config})
    assert b.client.post("/v1/topics", json={"name": "u", "partitions": 1, "config": config}).status_code in (201, 409)
    a.ok("POST", "/v1/topics/u/partitions/0/leadership", json={"leader_epoch": 1, "broker_id": 1})
    old = [_value("a1"), _value("a2")]
    for v in old:
        a.produce("u", [(b"victim", v), (b"keep", b"keep-" + os.urandom(4).hex().encode())], "none")
        a.ok("POST", "/v1/topics/u/partitions/0/roll")
    a.ok("POST", "/v1/topics/u/partitions/0/tier")
    assert all(find_values(dir_blobs(a.data_dir), old).values())  # A holds both values locally
    b.ok("POST", "/v1/topics/u/partitions/0/leadership", json={"leader_epoch": 2, "broker_id": 2})
    return a, b, old


def test_a_two_node_erasure_leaves_no_copy_anywhere(tmp_path: Path) -> None:
    a, b = None, None
    try:
        a, b, old = _led_by_b_with_copies_at_a(tmp_path)
        deadline = time.monotonic() + CONVERGE_BOUND_S
        while (r := a.client.get("/v1/topics/u/partitions/0/records", params={"offset": 0})).status_code != 409:
            assert time.monotonic() < deadline, r.text  # A, no longer the leader, stops serving its copies
            time.sleep(0.1)
        assert "broker 2" in r.text
        eid = b.ok("POST", "/v1/topics/u/erasures", json={"keys": ["victim"]})["erasure_id"]
        receipt = b.wait_state(eid, ("values_removed", "complete"))
        confirmed = {c["broker_id"]: c["confirmed_ms"] for c in receipt["partitions"][0]["confirmations"]}
        assert set(confirmed) == {1, 2}, receipt
        assert receipt["waiting_for_nodes"] == [] and receipt["partitions"][0]["waiting_for_nodes"] == []
        # once the receipt says so, no node holds the value and none serves it
        left = find_values(dir_blobs(a.data_dir, b.data_dir, tmp_path / "objects"), old)
        assert not any(left.values()), left
        assert a.client.get("/v1/topics/u/partitions/0/records", params={"offset": 0}).status_code == 409
        values = [r["value"] for r in b.read_all("u")]
        assert not any(v is not None and v.encode() in old for v in values)
    finally:
        for s in (a, b):
            if s is not None:
                s.stop()


def test_a_node_down_during_the_erasure_drops_its_copy_at_restart(tmp_path: Path) -> None:
    a, b = None, None
    try:
        a, b, old = _led_by_b_with_copies_at_a(tmp_path)
        a.kill()  # down, still registered: the receipt must wait for it
        eid = b.ok("POST", "/v1/topics/u/erasures", json={"keys": ["victim"]})["erasure_id"]
        deadline = time.monotonic() + 60
        while (receipt := b.ok("GET", f"/v1/erasures/{eid}"))["waiting_for_nodes"] != [1]:
            assert time.monotonic() < deadline, receipt
            time.sleep(0.2)
        time.sleep(1.0)
        receipt = b.ok("GET", f"/v1/erasures/{eid}")
        assert receipt["state"] == "pending" and receipt["waiting_for_nodes"] == [1], receipt
        assert any(find_values(dir_blobs(a.data_dir), old).values())  # A's copy is still on its disk
        time.sleep(1.6)  # the dead incarnation's session expires: A may register again
        a.spawn()
        a.wait_ready()
        # A answers only after its start dropped the copy
        left = find_values(dir_blobs(a.data_dir), old)
        assert not any(left.values()), left
        receipt = b.wait_state(eid, ("values_removed", "complete"))
        assert {c["broker_id"] for c in receipt["partitions"][0]["confirmations"]} == {1, 2}
    finally:
        for s in (a, b):
            if s is not None:
                s.stop()
