"""A damaged partition goes offline; the rest of the node serves.

Each test builds a node, damages a file while it is stopped, starts a node again on the
same data dir and checks, through the real app, what an operator sees.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from fastapi.testclient import TestClient

from log.checkpoint import RECOVERY_POINT_CHECKPOINT, RecoveryPointCheckpointFile
from log.clock import MockClock
from service.app import create_app
from service.config import load_config
from service.node import Node
from tests.support.serve import ServeProcess, http, serving

P0, P1 = "/v1/topics/t/partitions/0", "/v1/topics/t/partitions/1"


def _node(tmp_path: Path, clock: MockClock) -> Node:
    return Node(load_config({"data_dir": tmp_path / "data"}, env={}), clock=clock)


@contextmanager
def _client(tmp_path: Path, clock: MockClock) -> Iterator[TestClient]:
    node = _node(tmp_path, clock)
    try:
        with TestClient(create_app(node)) as c:
            yield c
    finally:
        node.shutdown()


def _setup(tmp_path: Path, clock: MockClock) -> Path:
    """Topic t (2 partitions, 5-record segments) and topic g; returns t-0's dir."""
    with _client(tmp_path, clock) as c:
        for name, parts in (("t", 2), ("g", 1)):
            r = c.post("/v1/topics", json={"name": name, "partitions": parts,
                                           "config": {"cleanup.policy": "compact", "segment.bytes": 400}})
            assert r.status_code == 201, r.text
        for path in (P0, P1, "/v1/topics/g/partitions/0"):
            for i in range(30):
                clock.advance(10)
                r = c.post(f"{path}/records", json={"records": [{"key": f"k{i % 7}", "value": f"v{i}"}]})
                assert r.status_code == 200, r.text
    return tmp_path / "data" / "t-0"


def _metric(c: TestClient, name: str) -> float:
    for line in c.get("/metrics").text.splitlines():
        if line.startswith(name + " "):
            return float(line.split()[1])
    raise AssertionError(f"metric {name} missing")


def test_zero_length_rolled_segment_takes_only_that_partition_offline(tmp_path: Path, clock: MockClock) -> None:
    part = _setup(tmp_path, clock)
    seg = sorted(part.glob("*.log"))[2]
    seg.write_bytes(b"")
    with _client(tmp_path, clock) as c:
        info = c.get(P0)
        assert info.status_code == 200, info.text
        doc = info.json()
        assert doc["state"] == "offline" and str(seg) in doc["error"] and "restore" in doc["error"]
        assert doc["log_end_offset"] is None and doc["segments"] == []
        assert c.get(P1).json()["state"] == "online" and c.get(P1).json()["log_end_offset"] == 30
        assert _metric(c, "offline_partitions_count") == 1.0
        for method, url, body in (("post", f"{P0}/records", {"records": [{"key": "a", "value": "b"}]}),
                                  ("get", f"{P0}/records", None), ("post", f"{P0}/clean?wait=true", None),
                                  ("post", f"{P0}/roll", None)):
            r = c.request(method, url, json=body)
            assert r.status_code == 503, (url, r.status_code, r.text)
            assert "offline" in r.json()["error"] and str(seg) in r.json()["error"]
        # the rest of the node serves, the cleaner included
        assert c.post(f"{P1}/records", json={"records": [{"key": "a", "value": "b"}]}).status_code == 200
        r = c.post(f"{P1}/clean?wait=true")
        assert r.status_code == 200, r.text
        assert c.post("/v1/topics/g/partitions/0/clean?wait=true").status_code == 200
        # the operator's way out: delete the topic
        assert c.delete("/v1/topics/t").status_code == 204
        assert _metric(c, "offline_partitions_count") == 0.0
    assert not part.exists()


def test_garbage_leader_epoch_checkpoint_takes_the_partition_offline(tmp_path: Path, clock: MockClock) -> None:
    part = _setup(tmp_path, clock)
    (part / "leader-epoch-checkpoint").write_text("0\n3\nnot an epoch\n")
    with _client(tmp_path, clock) as c:
        doc = c.get(P0).json()
        assert doc["state"] == "offline" and "leader-epoch-checkpoint" in doc["error"]
        assert c.get(P1).json()["state"] == "online"
        assert _metric(c, "offline_partitions_count") == 1.0


def test_garbage_cleaner_offset_checkpoint_is_reported_and_rebuilt(tmp_path: Path, clock: MockClock) -> None:
    _setup(tmp_path, clock)
    cp = tmp_path / "data" / "cleaner-offset-checkpoint"
    cp.write_bytes(b"\x00garbage\xff\n")
    with _client(tmp_path, clock) as c:
        for p in (P0, P1):
            r = c.get(p)
            assert r.status_code == 200, r.text
            assert r.json()["cleaner_checkpoint"] is None  # read as no checkpoint: re-cleaning, no loss
        assert _metric(c, "corrupt_checkpoints_rebuilt_total") == 1.0
        r = c.post(f"{P0}/clean?wait=true")
        assert r.status_code == 200, r.text
        assert c.get(P0).json()["cleaner_checkpoint"] == r.json()["checkpoint"]
        page = c.get(f"{P0}/records", params={"offset": 0, "max_records": 100}).json()
        assert {rec["key"] for rec in page["records"]} == {f"k{i}" for i in range(7)}
    assert cp.read_text().startswith("0\n")  # rebuilt in Kafka's format
    assert (tmp_path / "data" / "cleaner-offset-checkpoint.corrupt").read_bytes() == b"\x00garbage\xff\n"


def _dead_pid() -> int:
    proc = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True,
                          check=True)
    return int(proc.stdout)


def test_temp_files_left_by_kill_9_are_removed_at_start(tmp_path: Path, clock: MockClock) -> None:
    part = _setup(tmp_path, clock)
    data = tmp_path / "data"
    remote = data / "remote"
    store_tmp = remote / ".tiercompact-tmp"
    store_tmp.mkdir(parents=True, exist_ok=True)
    dead = _dead_pid()
    planted = [store_tmp / ".tmp-k2j3h4", store_tmp / f".tmp-{dead}-abcd", part / "00000000000000000030.snapshot.tmp",
               part / "leader-epoch-checkpoint.tmp", data / "tiered-tmp" / "t-0" / "00000000000000000000.log",
               data / "remote-cache" / "read-cache" / ".tmp-x1y2", data / "remote-cache" / "staging" / "a1" / "0.log",
               data / "topics.json.tmp"]
    live = store_tmp / f".tmp-{os.getpid()}-inflight"  # a running writer's upload (another node) stays
    real_object = remote / "t-0" / "00000000000000000000-abc.log"
    for p in [*planted, live, real_object]:
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_bytes(b"partial")
    segments = {p.name: p.read_bytes() for p in part.glob("*.log")}
    with _client(tmp_path, clock) as c:
        assert [p for p in planted if p.exists()] == []
        assert live.exists() and real_object.read_bytes() == b"partial"
        assert {p.name: p.read_bytes() for p in part.glob("*.log")} == segments
        assert c.get(P0).json()["state"] == "online"
        page = c.get(f"{P0}/records", params={"offset": 0, "max_records": 100}).json()
        assert [r["offset"] for r in page["records"]] == list(range(30))


def test_offline_tiered_partition_keeps_shared_remote_data_on_delete(tmp_path: Path, clock: MockClock) -> None:
    """A node that cannot open a tiered partition cannot check its leadership, so it must not
    delete the shared remote data; it says how to drop only its own copy."""
    with _client(tmp_path, clock) as c:
        r = c.post("/v1/topics", json={"name": "r", "config": {"remote.storage.enable": True, "segment.bytes": 400}})
        assert r.status_code == 201, r.text
        for i in range(20):
            clock.advance(10)
            c.post("/v1/topics/r/partitions/0/records", json={"records": [{"key": f"k{i}", "value": "v"}]})
        c.post("/v1/topics/r/partitions/0/roll")
        assert c.post("/v1/topics/r/partitions/0/tier").json()["copied"]
    objects = sorted(p for p in (tmp_path / "data" / "remote" / "r-0").iterdir())
    (tmp_path / "data" / "r-0" / "leader-epoch-checkpoint").write_text("junk\n")
    with _client(tmp_path, clock) as c:
        assert c.get("/v1/topics/r/partitions/0").json()["state"] == "offline"
        r = c.delete("/v1/topics/r")
        assert r.status_code == 503, r.text
        assert "scope=local" in r.json()["error"] and "leader-epoch-checkpoint" in r.json()["error"]
        assert sorted((tmp_path / "data" / "remote" / "r-0").iterdir()) == objects
        assert c.delete("/v1/topics/r", params={"scope": "local"}).status_code in (200, 204)
        assert c.get("/v1/topics/r").status_code == 404
    assert sorted((tmp_path / "data" / "remote" / "r-0").iterdir()) == objects


def test_real_serve_after_kill_9_starts_with_one_bad_partition_offline(tmp_path: Path) -> None:
    """The reporter's flow on the real process: produce, kill -9, damage one partition and leave
    temp files behind, start again; the node serves, the damaged partition is offline."""
    import json
    import urllib.error
    import urllib.request

    data = tmp_path / "data"
    args = ["--cleaner-threads", "0", "--log-level", "warning"]

    def call(url: str, method: str = "GET", body: dict | None = None) -> tuple[int, dict]:
        try:
            return 200, http(url, method, body)
        except urllib.error.HTTPError as e:
            return e.code, json.loads(e.read())

    served = ServeProcess(data, args).start()
    try:
        url = served.url
        call(f"{url}/v1/topics", "POST", {"name": "t", "partitions": 2, "config": {"segment.bytes": 400}})
        for p in (0, 1):
            for i in range(20):
                assert call(f"{url}/v1/topics/t/partitions/{p}/records", "POST",
                            {"records": [{"key": f"k{i}", "value": "v"}]})[0] == 200
        # Rolls are synced in the background. The segment damaged below must be one the node had synced (below
        # the stored recovery point): an unsynced one is recovered as a crash may have left it, and an emptied
        # unsynced segment is taken for one whose data never reached the disk, as Kafka's recovery does.
        part = data / "t-0"
        bases = sorted(part.glob("*.log"))
        recovery = RecoveryPointCheckpointFile(part / RECOVERY_POINT_CHECKPOINT)
        deadline = time.monotonic() + 30
        while (recovery.read_offset() or 0) < int(bases[2].stem) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert (recovery.read_offset() or 0) >= int(bases[2].stem)
    finally:
        served.kill()
    bases[1].write_bytes(b"")
    leftovers = [part / "00000000000000000005.snapshot.tmp", data / "remote" / ".tiercompact-tmp" / ".tmp-999999999-x"]
    for f in leftovers:
        f.parent.mkdir(parents=True, exist_ok=True)
        f.write_bytes(b"partial")
    with serving(data, args) as served:
        url = served.url
        status, doc = call(f"{url}/v1/topics/t/partitions/0")
        assert status == 200 and doc["state"] == "offline" and ".log" in doc["error"]
        status, doc = call(f"{url}/v1/topics/t/partitions/0/records?offset=0")
        assert status == 503 and "offline" in doc["error"]
        status, doc = call(f"{url}/v1/topics/t/partitions/1/records?offset=0&max_records=100")
        assert status == 200 and len(doc["records"]) == 20
        with urllib.request.urlopen(f"{url}/metrics", timeout=10) as r:  # noqa: S310
            assert "offline_partitions_count 1.0" in r.read().decode()
        assert [f for f in leftovers if f.exists()] == []


def test_an_offline_partition_keeps_its_cleaner_checkpoint(tmp_path: Path, clock: MockClock) -> None:
    """Regression: the checkpoint file was rewritten keeping only open partitions, so a clean of
    any other partition dropped an offline partition's checkpoint (a full re-clean, remote
    included, once it was repaired)."""
    d = _setup(tmp_path, clock)
    with _client(tmp_path, clock) as c:
        for path in (P0, P1):
            c.post(f"{path}/roll")
            assert c.post(f"{path}/clean", params={"wait": "true"}).status_code == 200
        cp0 = c.get(P0).json()["cleaner_checkpoint"]
    assert cp0 and cp0 > 0
    (d / "leader-epoch-checkpoint").write_text("garbage\n")  # t-0 goes offline at the next start
    with _client(tmp_path, clock) as c:
        assert c.get(P0).json()["state"] == "offline"
        for i in range(10):
            c.post(f"{P1}/records", json={"records": [{"key": f"k{i}", "value": "again"}]})
        c.post(f"{P1}/roll")
        assert c.post(f"{P1}/clean", params={"wait": "true"}).status_code == 200
    checkpoints = (tmp_path / "data" / "cleaner-offset-checkpoint").read_text().splitlines()
    assert f"t 0 {cp0}" in checkpoints, checkpoints
