"""Zombie leaders with two real ``tiercompact serve`` processes.

Broker A (``--broker-id 0``) and broker B (``--broker-id 1``) run as separate processes
with their own data dirs and ports, sharing one metadata store (a SQLite file, or
PostgreSQL in a private schema) and one ``file://`` object store:

1. A leads at epoch 0: produce, roll, tier, clean ({LE-0 -> CO_a}); more dirty records, tiered.
2. A stops; B gets a replica of A's data dir (what replication would have given it); A
   starts again (still the leader at its own epoch 0) and B starts.
3. Leadership moves to B at epoch 1. A is now a stalled zombie with its cached epoch 0.
4. Both arrival orders of the two cleans: the zombie's first or the new leader's first.
   The zombie's clean, its upload (tier) and its DELETE of the topic are rejected (409),
   whatever the order; B's clean publishes {LE-0 -> CO_a, LE-1 -> CO_b}.
5. B keeps producing, tiering and cleaning.
6. A is restarted (the old leader after the move): it must not adopt B's epoch. Its tier,
   clean, produce and DELETE are 409 naming broker 1 / epoch 1.

Afterwards every record the real leader acknowledged reads back from B (the latest value
of every key; nothing unacknowledged), nothing the zombie wrote is visible, and A's
``fenced_operations_total`` counted its rejected attempts.
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.contract.conftest import private_postgres_schema
from tests.support.serve import ServeProcess

REPO = Path(__file__).resolve().parents[2]
CONFIG = {"cleanup.policy": "compact", "remote.storage.enable": True, "segment.bytes": 2048,
          "local.retention.ms": -1, "min.cleanable.dirty.ratio": 0.01}


class Server(ServeProcess):
    """One ``tiercompact serve`` process (restartable on the same data dir and port).

    Background cleaning and tiering are off (cleans and tiers happen on request), so the
    shared state changes only when the test says so."""

    def __init__(self, root: Path, name: str, broker_id: int, metadata_url: str) -> None:
        args = ["--broker-id", str(broker_id), "--remote", (root / "objects").as_uri(), "--metadata", metadata_url,
                "--cleaner-threads", "0", "--tiered-cleaner-threads", "0", "--tiering-interval-ms", "3600000",
                "--roll-check-interval-ms", "3600000", "--log-level", "warning",
                # no metadata follower: it would tell the deposed node of the move within 2 s, and the zombie
                # these tests need is a node that has not heard (tests/e2e/test_metadata_follow.py covers hearing)
                "--metadata-sync-interval-ms", "3600000"]
        super().__init__(root / name, args, env=dict(os.environ), output=root / f"{name}.log",
                         command=[sys.executable, "-m", "service.cli"], cwd=REPO)
        self.root, self.name, self.broker_id, self.metadata_url = root, name, broker_id, metadata_url
        self.client = httpx.Client(base_url=self.url, timeout=60)

    def log_text(self) -> str:
        return self.output_text()

    def close(self) -> None:
        self.stop()
        self.client.close()

    # ---- requests -------------------------------------------------------------------------
    def post(self, path: str, **kw: Any) -> httpx.Response:
        return self.client.post(path, **kw)

    def produce(self, model: dict[int, tuple[str, str]] | None, n: int, tag: str, topic: str) -> httpx.Response:
        recs = [{"key": f"k{i % 23}", "value": f"{tag}-{i}"} for i in range(n)]
        r = self.post(f"/v1/topics/{topic}/partitions/0/records", json={"records": recs})
        if r.status_code == 200 and model is not None:
            base = r.json()["base_offset"]
            model.update({base + i: (x["key"], x["value"]) for i, x in enumerate(recs)})
        return r

    def ok(self, method: str, path: str, **kw: Any) -> Any:
        r = self.client.request(method, path, **kw)
        assert r.status_code in (200, 201, 204), f"{self.name} {method} {path}: {r.status_code} {r.text}"
        return r.json() if r.content else None

    def fenced_total(self) -> float:
        for line in self.client.get("/metrics").text.splitlines():
            if line.startswith("fenced_operations_total "):
                return float(line.split()[1])
        raise AssertionError("fenced_operations_total missing from /metrics")

    def read_all(self, topic: str) -> dict[int, tuple[str, str]]:
        out: dict[int, tuple[str, str]] = {}
        offset = 0
        while True:
            page = self.ok("GET", f"/v1/topics/{topic}/partitions/0/records",
                           params={"offset": offset, "max_records": 1000})
            if not page["records"]:
                return out
            out.update({x["offset"]: (x["key"], x["value"]) for x in page["records"]})
            offset = page["next_offset"]


def _metadata_urls() -> list[Any]:
    return ["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)]


@pytest.fixture(params=_metadata_urls())
def metadata_url(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    if request.param == "sqlite":
        yield f"sqlite:///{tmp_path / 'shared-metadata.db'}"
        return
    with private_postgres_schema("tc_zombie") as url:
        yield url


@pytest.fixture
def servers(tmp_path: Path, metadata_url: str) -> Iterator[tuple[Server, Server]]:
    a = Server(tmp_path, "a", 0, metadata_url)
    b = Server(tmp_path, "b", 1, metadata_url)
    try:
        yield a, b
    finally:
        a.terminate()  # both stop at once
        b.terminate()
        a.close()
        b.close()


def _objects(root: Path) -> list[str]:
    base = root / "objects"
    return sorted(str(p.relative_to(base)) for p in base.rglob("*") if p.is_file()) if base.exists() else []


def _shared_view(b: Server, root: Path, topic: str) -> tuple[Any, ...]:
    """What every node shares: the remote segments the leader sees, its cleaner checkpoint,
    and the object store's keys."""
    part = b.ok("GET", f"/v1/topics/{topic}/partitions/0")
    segs = [(s["segment_id"], s["state"]) for s in part["segments"] if s["tier"] != "local"]
    return segs, part["cleaner_checkpoint"], _objects(root)


def _assert_409(r: httpx.Response, *needles: str) -> None:
    assert r.status_code == 409, f"expected 409, got {r.status_code}: {r.text}"
    msg = r.json()["error"]
    for n in needles:
        assert n in msg, f"{n!r} not in {msg!r}"


def assert_acknowledged_reads_back(b: Server, model: dict[int, tuple[str, str]], topic: str) -> None:
    """Compaction may drop superseded values, never the latest value of a key, and never
    serves a record that was not acknowledged at that offset."""
    got = b.read_all(topic)
    strays = {o: kv for o, kv in got.items() if model.get(o) != kv}
    assert strays == {}, f"served records the leader never acknowledged: {list(strays.items())[:5]}"
    latest: dict[str, int] = {}
    for o, (k, _v) in sorted(model.items()):
        latest[k] = o
    missing = sorted(o for o in latest.values() if o not in got)
    assert missing == [], f"acknowledged latest values lost at offsets {missing}"


def _start_all(*servers: Server) -> None:
    """Start processes concurrently (each start is mostly interpreter and import time)."""
    for s in servers:
        s.spawn()
    for s in servers:
        s.wait_ready()


def _lead_at_epoch_0(a: Server, b: Server, topic: str, model: dict[int, tuple[str, str]]) -> int:
    """A creates ``topic``, produces, tiers and cleans ({LE-0 -> CO_a}), then tiers more dirty
    records; B creates the topic locally (its log is restored from the remote tier when it
    becomes leader). Returns CO_a."""
    p = f"/v1/topics/{topic}/partitions/0"
    a.ok("POST", "/v1/topics", json={"name": topic, "config": CONFIG})
    b.ok("POST", "/v1/topics", json={"name": topic, "config": CONFIG})
    for i in range(4):
        assert a.produce(model, 60, f"a{i}", topic).status_code == 200
    a.ok("POST", f"{p}/roll")
    a.ok("POST", f"{p}/tier")
    co_a = int(a.ok("POST", f"{p}/clean")["checkpoint"])
    assert a.produce(model, 80, "a-dirty", topic).status_code == 200
    a.ok("POST", f"{p}/roll")
    a.ok("POST", f"{p}/tier")
    return co_a


def _zombie_and_leader_rounds(a: Server, b: Server, topic: str, order: str, co_a: int, root: Path,
                              model: dict[int, tuple[str, str]]) -> int:
    """B took over at epoch 1; A still holds epoch 0 in memory and still takes records (it
    cannot know without asking), so it has a rolled tail of its own to upload. The zombie's
    upload (fenced in the metadata store: its epoch 0 was superseded) and its cleaning
    round (refused up front: broker 1 leads) arrive before or after B's round, per
    ``order``; both are refused, its DELETE too, and nothing shared changes."""
    p = f"/v1/topics/{topic}/partitions/0"
    r = a.produce(None, 40, "zombie", topic)
    assert r.status_code == 200, r.text  # a stalled zombie cannot tell; these records never become visible

    def zombie_attempts() -> None:
        a.ok("POST", f"{p}/roll")
        _assert_409(a.post(f"{p}/tier"), "with leader epoch 0 was fenced by broker 1 at leader epoch 1")
        _assert_409(a.post(f"{p}/clean"), "broker 0 is not the leader", "broker 1 holds leader epoch 1")

    if order == "leader_first":
        co_b = int(b.ok("POST", f"{p}/clean")["checkpoint"])
        before = _shared_view(b, root, topic)
        zombie_attempts()
    else:
        before = _shared_view(b, root, topic)
        zombie_attempts()
        assert _shared_view(b, root, topic) == before  # the rejected upload left nothing behind
        co_b = int(b.ok("POST", f"{p}/clean")["checkpoint"])
        before = _shared_view(b, root, topic)
    assert co_b > co_a
    _assert_409(a.post(f"{p}/tier"), "broker 0 is not the leader", "broker 1 holds leader epoch 1")
    _assert_409(a.post(f"{p}/records", json={"records": [{"key": "k1", "value": "zombie-late"}]}),
                "broker 0 is not the leader", "broker 1 holds leader epoch 1")
    _assert_409(a.client.delete(f"/v1/topics/{topic}"), "NOT deleted", "scope=local")
    assert _shared_view(b, root, topic) == before
    return co_b


def test_zombie_leader_processes(servers: tuple[Server, Server], tmp_path: Path) -> None:
    """Both arrival orders, one topic each, through one lifecycle of the two processes."""
    a, b = servers
    orders = {"zf": "zombie_first", "lf": "leader_first"}
    models: dict[str, dict[int, tuple[str, str]]] = {t: {} for t in orders}
    _start_all(a, b)
    co_a = {t: _lead_at_epoch_0(a, b, t, models[t]) for t in orders}
    for t in orders:  # leadership moves to B: A is a zombie holding epoch 0 in memory
        part = b.ok("POST", f"/v1/topics/{t}/partitions/0/leadership", json={"leader_epoch": 1, "broker_id": 1})
        assert part["leader_epoch"] == 1 and part["cleaner_checkpoint"] == co_a[t]
    fenced0 = a.fenced_total()
    co_b = {t: _zombie_and_leader_rounds(a, b, t, order, co_a[t], tmp_path, models[t])
            for t, order in orders.items()}
    assert a.fenced_total() >= fenced0 + 3 * len(orders)
    for t in orders:  # the real leader carries on
        p = f"/v1/topics/{t}/partitions/0"
        assert b.produce(models[t], 90, "b", t).status_code == 200
        b.ok("POST", f"{p}/roll")
        b.ok("POST", f"{p}/tier")
        assert int(b.ok("POST", f"{p}/clean")["checkpoint"]) > co_b[t]
    # the old leader restarts after the move: it must not adopt B's epoch
    a.stop()
    _start_all(a)
    fenced1 = a.fenced_total()
    for t in orders:
        p = f"/v1/topics/{t}/partitions/0"
        before = _shared_view(b, tmp_path, t)
        for path in (f"{p}/tier", f"{p}/clean"):
            _assert_409(a.post(path), "broker 0 is not the leader", "broker 1 holds leader epoch 1",
                        "leader_epoch=2, broker_id=0")
        _assert_409(a.post(f"{p}/records", json={"records": [{"key": "k2", "value": "restarted-zombie"}]}),
                    "broker 1 holds leader epoch 1")
        _assert_409(a.client.delete(f"/v1/topics/{t}"), "NOT deleted")
        assert _shared_view(b, tmp_path, t) == before
    assert a.fenced_total() >= fenced1 + 4 * len(orders)
    for t in orders:  # every record the real leader acknowledged reads back; the zombie's never do
        got = b.read_all(t)
        assert not any(v.startswith(("zombie", "restarted-zombie")) for _k, v in got.values())
        assert_acknowledged_reads_back(b, models[t], t)
    # a non-leader may drop only its local copy; the leader deletes the topics everywhere
    objects_before = _objects(tmp_path)
    r = a.client.delete("/v1/topics/zf", params={"scope": "local"})
    assert r.status_code == 200 and r.json()["remote_deleted"] is False, r.text
    assert _objects(tmp_path) == objects_before
    for t in orders:
        assert b.client.delete(f"/v1/topics/{t}").status_code == 204
    assert _objects(tmp_path) == []


def test_serve_refuses_a_broker_id_outside_kafkas_int32(tmp_path: Path) -> None:
    """(The range itself is checked in-process in tests/metadata/test_fencing_timeouts.py.)"""
    p = subprocess.run([sys.executable, "-m", "service.cli", "serve", "--data-dir", str(tmp_path / "d"),
                        "--broker-id", "2147483648"], capture_output=True, text=True, cwd=REPO, timeout=60)
    assert p.returncode == 2 and "broker_id" in p.stderr and "2147483647" in p.stderr, (p.returncode, p.stderr)
