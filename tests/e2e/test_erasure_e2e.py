"""Erase keys by a deadline, with a receipt, against a real ``tiercompact serve`` process.

With the file store and with moto's S3 server, values written uncompressed and compressed: a
key whose old values sit in a remote-only segment (plus the replaced object it came from, not
yet deleted), a segment in both tiers, a local-only segment and the active segment is erased.
Once the receipt says ``values_removed``: no byte sequence of an erased value remains anywhere
(every file under the data dir, remote read cache, temp dirs and ``.deleted`` files included;
every object in the store, referenced or not; compressed batches are decompressed and
scanned too), every other key's newest value reads back, and the receipt lists exactly the
segments that held the key, the round that rewrote them and the replaced objects and files,
each deleted and answering "not found". Also: an erasure survives a restart (the receipt is
in the metadata store and the new process continues it), and deadlines that cannot be met
(min.compaction.lag.ms, a non-compacted topic) are refused with 422 before anything is appended.
"""

from __future__ import annotations

import base64
import io
import os
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from log.record.records import iter_file_batches
from tests.support.serve import ServeProcess, clean_env

REPO = Path(__file__).resolve().parents[2]
ERASE_BOUND_S = 90
S3_ENV = {"AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing", "AWS_DEFAULT_REGION": "us-east-1"}
CONFIG = {"cleanup.policy": "compact", "remote.storage.enable": True, "local.retention.ms": 0,
          "min.cleanable.dirty.ratio": 0.01}


def b64(b: bytes) -> str:
    return base64.b64encode(b).decode("ascii")


class Server(ServeProcess):
    """One ``tiercompact serve`` process; background cleaning and tiering off (the erasure
    worker runs every 200 ms), so only the test and the erasure change the partition."""

    def __init__(self, root: Path, remote: str, extra_env: dict[str, str] | None = None,
                 extra_args: tuple[str, ...] = ()) -> None:
        args = ["--remote", remote, "--cleaner-threads", "0", "--tiered-cleaner-threads", "0",
                "--tiering-interval-ms", "3600000", "--roll-check-interval-ms", "3600000",
                "--erasure-check-interval-ms", "200", "--log-level", "warning", *extra_args]
        super().__init__(root / "data", args, env=clean_env({"TIERCOMPACT_LOCK_CHECK": "1", **(extra_env or {})}),
                         output=root / "serve.log", command=[sys.executable, "-m", "service.cli"], cwd=REPO)
        self.root = root
        self.client = httpx.Client(base_url=self.url, timeout=60)

    def log_text(self) -> str:
        return self.output_text()

    def ok(self, method: str, path: str, **kw: Any) -> Any:
        r = self.client.request(method, path, **kw)
        assert r.status_code in (200, 201, 202, 204), f"{method} {path}: {r.status_code} {r.text}\n{self.log_text()}"
        return r.json() if r.content else None

    def produce(self, topic: str, records: list[tuple[bytes, bytes | None]], compression: str) -> dict[str, int]:
        body = {"records": [{"key": b64(k), "value": None if v is None else b64(v)} for k, v in records],
                "encoding": "base64", "compression": compression}
        return self.ok("POST", f"/v1/topics/{topic}/partitions/0/records", json=body)  # type: ignore[no-any-return]

    def read_all(self, topic: str) -> list[dict[str, Any]]:
        out: list[dict[str, Any]] = []
        offset = 0
        while True:
            page = self.ok("GET", f"/v1/topics/{topic}/partitions/0/records",
                           params={"offset": offset, "encoding": "base64", "max_records": 1000})
            if not page["records"]:
                return out
            out += page["records"]
            offset = page["next_offset"]

    def wait_state(self, erasure_id: str, states: tuple[str, ...], bound_s: float = ERASE_BOUND_S) -> dict[str, Any]:
        deadline = time.monotonic() + bound_s
        while True:
            receipt = self.ok("GET", f"/v1/erasures/{erasure_id}")
            if receipt["state"] in states:
                return receipt  # type: ignore[no-any-return]
            assert time.monotonic() < deadline, f"erasure stuck in {receipt}\n{self.log_text()}"
            time.sleep(0.2)


# ---- finding value bytes anywhere -------------------------------------------------------------

def _values_in(data: bytes) -> Iterator[bytes]:
    """Every record value of the batches a blob starts with (decompressed); nothing if it is
    not a segment (an index, a checkpoint, a cache chunk cut mid-batch)."""
    try:
        for _pos, batch in iter_file_batches(io.BytesIO(data), 0, len(data), source="scan",
                                             allow_truncated_tail=True):
            if batch.is_control:
                continue
            for rec in batch.records():
                if rec.value is not None:
                    yield rec.value
    except Exception:  # noqa: BLE001 - not a log segment (or its tail): the raw scan still covers it
        return


def find_values(blobs: Iterator[tuple[str, bytes]], values: list[bytes]) -> dict[bytes, list[str]]:
    """value -> where its bytes occur (raw or in a decompressed batch)."""
    found: dict[bytes, list[str]] = {v: [] for v in values}
    for name, data in blobs:
        decoded = set(_values_in(data))
        for v in values:
            if v in data or any(v in d for d in decoded):
                found[v].append(name)
    return found


def dir_blobs(*roots: Path) -> Iterator[tuple[str, bytes]]:
    for root in roots:
        for p in sorted(root.rglob("*")):
            if p.is_file():
                try:
                    yield str(p), p.read_bytes()
                except FileNotFoundError:
                    continue


@pytest.fixture(params=["file", "s3"])
def store(request: pytest.FixtureRequest, tmp_path: Path) -> dict[str, Any]:
    """The server's --remote and env, a scanner of every object, and an existence check."""
    if request.param == "file":
        objects = tmp_path / "objects"
        return {"remote": objects.as_uri(), "env": {}, "args": (),
                "blobs": lambda: dir_blobs(objects),
                "exists": lambda key: (objects / key).exists()}
    import boto3

    url = request.getfixturevalue("moto_server_url")
    bucket = f"tc-erase-{uuid.uuid4().hex[:10]}"
    s3 = boto3.client("s3", endpoint_url=url, region_name="us-east-1", aws_access_key_id="testing",
                      aws_secret_access_key="testing")
    s3.create_bucket(Bucket=bucket)

    def blobs() -> Iterator[tuple[str, bytes]]:
        for page in s3.get_paginator("list_objects_v2").paginate(Bucket=bucket):
            for obj in page.get("Contents", []):
                yield f"s3://{bucket}/{obj['Key']}", s3.get_object(Bucket=bucket, Key=obj["Key"])["Body"].read()

    def exists(key: str) -> bool:
        try:
            s3.head_object(Bucket=bucket, Key=f"pre/{key}")
            return True
        except s3.exceptions.ClientError:
            return False

    return {"remote": f"s3://{bucket}/pre", "env": S3_ENV, "args": ("--s3-endpoint", url), "blobs": blobs,
            "exists": exists}


def _server(tmp_path: Path, store: dict[str, Any]) -> Server:
    return Server(tmp_path, store["remote"], store["env"], store["args"])


def _value(tag: str) -> bytes:
    # distinctive and incompressible: a codec keeps it as a literal, and the decompressed scan
    # finds it anyway
    return f"ERASE-ME-{tag}-".encode() + os.urandom(200)


@pytest.mark.parametrize("compression", ["none", "zstd"])
def test_erase_across_both_tiers(tmp_path: Path, store: dict[str, Any], compression: str) -> None:
    srv = _server(tmp_path, store).start()
    try:
        _erase_across_both_tiers(srv, store, compression)
    finally:
        srv.stop()


def _erase_across_both_tiers(srv: Server, store: dict[str, Any], compression: str) -> None:
    topic = "users"
    srv.ok("POST", "/v1/topics", json={"name": topic, "partitions": 1, "config": CONFIG})
    victim = b"victim-\xff\x00key"
    erased = [_value(f"v{i}") for i in range(1, 5)]
    newest: dict[bytes, bytes] = {}

    def put(records: list[tuple[bytes, bytes | None]]) -> int:
        res = srv.produce(topic, records, compression)
        for k, v in records:
            if k != victim and v is not None:
                newest[k] = v
        return int(res["base_offset"])

    base = f"/v1/topics/{topic}/partitions/0"
    # segment A: cleaned once, so it lives only in the remote tier (as a rewritten object);
    # the object it replaced still holds the value until the deferred-delete loop (1 h here)
    a = put([(victim, erased[0])] + [(f"keep-{i}".encode(), _value(f"keep{i}a")) for i in range(5)])
    srv.ok("POST", f"{base}/roll")
    srv.ok("POST", f"{base}/tier")
    srv.ok("POST", f"{base}/clean", params={"wait": "true"})
    # segment B: tiered, and kept locally (not below the cleaner checkpoint yet): both tiers
    b = put([(victim, erased[1]), (b"keep-0", _value("keep0b")), (b"keep-5", _value("keep5b"))])
    srv.ok("POST", f"{base}/roll")
    srv.ok("POST", f"{base}/tier")
    # segment C: rolled, not tiered (local only); then the active segment D
    c = put([(victim, erased[2]), (b"keep-6", _value("keep6c"))])
    srv.ok("POST", f"{base}/roll")
    d = put([(victim, erased[3]), (b"keep-7", _value("keep7d"))])
    tiers = {s["base_offset"]: s["tier"] for s in srv.ok("GET", base)["segments"]}
    assert tiers == {a: "remote", b: "both", c: "local", d: "local"}, tiers

    def everywhere() -> dict[bytes, list[str]]:
        return find_values(_chain(dir_blobs(srv.data_dir), store["blobs"]()), erased)

    srv.read_all(topic)  # remote reads fill the read cache with chunks holding the values
    before = everywhere()
    assert all(before.values()), f"the scanner must see every value before the erasure: {before}"
    assert any("remote-cache" in where for where in before[erased[0]]), before[erased[0]]
    assert len(before[erased[0]]) >= 2  # the remote-only segment and the replaced object it came from

    accepted = srv.ok("POST", f"/v1/topics/{topic}/erasures", json={"keys": [b64(victim)], "encoding": "base64"})
    assert accepted["state"] == "pending" and accepted["deadline_ms"] > 0
    receipt = srv.wait_state(accepted["erasure_id"], ("values_removed", "complete"))
    assert receipt["topic"] == topic and receipt["error"] is None and not receipt["deadline_missed"]

    left = {v[:12]: where for v, where in everywhere().items() if where}
    assert not left, f"erased value bytes remain: {left}"

    records = srv.read_all(topic)
    latest: dict[bytes, bytes | None] = {}
    for r in records:
        latest[base64.b64decode(r["key"])] = None if r["value"] is None else base64.b64decode(r["value"])
    assert latest.pop(victim, None) is None  # only its tombstone (or nothing) is left
    assert latest == newest

    (key,) = receipt["keys"]
    assert base64.b64decode(key["key"]) == victim and key["partition"] == 0
    held = {s["base_offset"]: s["tier"] for s in key["segments"]}
    assert held == {a: "remote", b: "both", c: "local", d: "local"}, key["segments"]
    assert key["rounds"] and key["verified_ms"] is not None
    check = receipt["partitions"][0]["verification"]
    assert check["verified_ms"] == key["verified_ms"] and check["key_index"] + check["remote_scanned"] >= 1
    assert check["deleted_objects_not_found"] == len([x for x in key["deleted"] if "object" in x])
    rounds = {r["round_id"] for r in srv.ok("GET", f"{base}/compactions", params={"limit": 50})}
    assert set(key["rounds"]) <= rounds
    objects = [x["object"] for x in key["deleted"] if "object" in x]
    files = [x["file"] for x in key["deleted"] if "file" in x]
    assert objects and files and all(x["deleted_ms"] >= receipt["created_ms"] for x in key["deleted"])
    assert not any(store["exists"](o) for o in objects)
    assert not any(Path(f).exists() for f in files)
    listed = srv.ok("GET", "/v1/erasures")
    assert [e["erasure_id"] for e in listed] == [accepted["erasure_id"]]
    metrics = srv.client.get("/metrics").text
    assert "erasures_pending_count 0.0" in metrics


def _chain(*its: Iterator[tuple[str, bytes]]) -> Iterator[tuple[str, bytes]]:
    for it in its:
        yield from it


def test_erasure_continues_across_a_restart(tmp_path: Path, store: dict[str, Any]) -> None:
    """The receipt lives in the metadata store: a process stopped while the erasure waits on
    min.compaction.lag.ms leaves it pending, and the restarted process finishes it."""
    srv = _server(tmp_path, store).start()
    try:
        topic = "users"
        srv.ok("POST", "/v1/topics", json={"name": topic, "partitions": 1,
                                           "config": {**CONFIG, "min.compaction.lag.ms": 3000}})
        old = [_value("r1"), _value("r2")]
        srv.produce(topic, [(b"gone", old[0]), (b"stays", b"stays-1")], "none")
        srv.ok("POST", f"/v1/topics/{topic}/partitions/0/roll")
        srv.ok("POST", f"/v1/topics/{topic}/partitions/0/tier")
        srv.produce(topic, [(b"gone", old[1])], "gzip")
        accepted = srv.ok("POST", f"/v1/topics/{topic}/erasures", json={"keys": ["gone"]})
        srv.stop()
        from metadata.sql import SqlRemoteLogMetadataManager

        with SqlRemoteLogMetadataManager(f"sqlite:///{srv.data_dir}/metadata.db") as mdm:
            stored = mdm.get_erasure(accepted["erasure_id"])
        assert stored is not None and stored.state == "pending"  # stopped inside min.compaction.lag.ms
        srv.start()
        receipt = srv.wait_state(accepted["erasure_id"], ("values_removed", "complete"))
        assert receipt["keys"][0]["verified_ms"] is not None
        left = find_values(_chain(dir_blobs(srv.data_dir), store["blobs"]()), old)
        assert not any(left.values()), left
        values = {base64.b64decode(r["key"]): r["value"] for r in srv.read_all(topic)}
        assert values[b"stays"] == base64.b64encode(b"stays-1").decode() and values.get(b"gone") is None
    finally:
        srv.stop()


def test_deadlines_that_cannot_be_met_are_refused(tmp_path: Path) -> None:
    srv = Server(tmp_path, (tmp_path / "objects").as_uri()).start()
    try:
        srv.ok("POST", "/v1/topics", json={"name": "slow", "partitions": 1,
                                           "config": {**CONFIG, "min.compaction.lag.ms": 3_600_000}})
        srv.ok("POST", "/v1/topics", json={"name": "plain", "partitions": 1, "config": {"cleanup.policy": "delete"}})
        now = int(time.time() * 1000)
        r = srv.client.post("/v1/topics/slow/erasures", json={"keys": ["a"], "deadline_ms": now + 60_000})
        assert r.status_code == 422 and "min.compaction.lag.ms=3600000" in r.json()["error"], r.text
        r = srv.client.post("/v1/topics/slow/erasures", json={"keys": ["a"], "deadline_ms": now - 1})
        assert r.status_code == 422 and "in the past" in r.json()["error"]
        r = srv.client.post("/v1/topics/plain/erasures", json={"keys": ["a"]})
        assert r.status_code == 422 and "cleanup.policy=delete" in r.json()["error"], r.text
        for t in ("slow", "plain"):  # nothing was appended
            assert srv.ok("GET", f"/v1/topics/{t}/partitions/0")["log_end_offset"] == 0
        assert srv.client.post("/v1/topics/nope/erasures", json={"keys": ["a"]}).status_code == 404
        assert srv.client.get("/v1/erasures/nope").status_code == 404
        assert srv.client.post("/v1/topics/slow/erasures", json={"keys": []}).status_code in (400, 422)
        # a deadline min.compaction.lag.ms allows is accepted
        ok = srv.client.post("/v1/topics/slow/erasures", json={"keys": ["a"], "deadline_ms": now + 7_200_000})
        assert ok.status_code == 202, ok.text
        assert srv.ok("GET", f"/v1/erasures/{ok.json()['erasure_id']}")["state"] == "pending"
    finally:
        srv.stop()




def test_erase_during_a_leadership_change(tmp_path: Path) -> None:
    """Two processes share the metadata store and the object store. A leads, accepts the
    erasure and tiers its tombstones, then leadership moves to B while A keeps its cached epoch
    (a zombie): A's erasure round is refused and counted as fenced, B (whose log is restored from
    the remote tier) continues the same receipt to ``values_removed``."""
    objects = tmp_path / "objects"
    meta = f"sqlite:///{tmp_path}/metadata.db"
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    # A follows the metadata store only once an hour: it stays a zombie long enough to try its round.
    # Both wait for min.compaction.lag.ms before a round; A then looks every 0.2 s and B every 3 s, so
    # A tries (and is fenced) before B has finished the receipt: a receipt B finished first would
    # leave A nothing to try (a CI run on a loaded machine once saw exactly that with both at 1 s).
    a = Server(tmp_path / "a", objects.as_uri(), extra_args=("--broker-id", "0", "--metadata", meta,
                                                             "--metadata-sync-interval-ms", "3600000",
                                                             "--erasure-check-interval-ms", "200"))
    b = Server(tmp_path / "b", objects.as_uri(), extra_args=("--broker-id", "1", "--metadata", meta,
                                                             "--erasure-check-interval-ms", "3000"))
    try:
        a.start()
        b.start()
        topic, p = "users", "/v1/topics/users/partitions/0"
        config = {**CONFIG, "local.retention.ms": -1, "min.compaction.lag.ms": 4000}
        a.ok("POST", "/v1/topics", json={"name": topic, "partitions": 1, "config": config})
        assert b.client.post("/v1/topics", json={"name": topic, "partitions": 1, "config": config}).status_code in (
            201, 409)
        old = [_value("lead1"), _value("lead2")]
        a.produce(topic, [(b"victim", old[0]), (b"keep", b"keep-1")], "none")
        a.ok("POST", f"{p}/roll")
        a.ok("POST", f"{p}/tier")
        a.produce(topic, [(b"victim", old[1])], "gzip")
        accepted = a.ok("POST", f"/v1/topics/{topic}/erasures", json={"keys": ["victim"]})
        eid = accepted["erasure_id"]
        tombstone = a.ok("GET", f"/v1/erasures/{eid}")["keys"][0]["tombstone_offset"]
        deadline = time.monotonic() + 30
        while not any(s["tier"] in ("both", "remote") and s["end_offset"] >= tombstone
                      for s in a.ok("GET", p)["segments"]):  # A's erasure task tiers the tombstones
            assert time.monotonic() < deadline, a.log_text()
            time.sleep(0.1)
        part = b.ok("POST", f"{p}/leadership", json={"leader_epoch": 1, "broker_id": 1})
        assert part["leader_epoch"] == 1
        receipt = b.wait_state(eid, ("values_removed", "complete"))
        assert receipt["error"] is None
        rounds = {r["round_id"]: r for r in b.ok("GET", f"{p}/compactions", params={"limit": 50})}
        (key,) = receipt["keys"]
        assert key["rounds"] and all(rounds[r]["leader_epoch"] == 1 for r in key["rounds"])
        deadline = time.monotonic() + 30
        while _metric(a, "fenced_operations_total") < 1:  # the zombie's erasure round was refused
            assert time.monotonic() < deadline, a.log_text()
            time.sleep(0.2)
        left = find_values(_chain(dir_blobs(b.data_dir), dir_blobs(objects)), old)
        assert not any(left.values()), left
        latest = {base64.b64decode(r["key"]): r["value"] for r in b.read_all(topic)}
        assert latest == {b"keep": b64(b"keep-1"), b"victim": None}
    finally:
        a.stop()
        b.stop()


def _metric(srv: Server, name: str) -> float:
    for line in srv.client.get("/metrics").text.splitlines():
        if line.startswith(name + " "):
            return float(line.split()[1])
    raise AssertionError(f"{name} missing from /metrics")
