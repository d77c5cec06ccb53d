"""The admin API's happy paths on the embedded defaults (through the real app)."""

from __future__ import annotations

import base64
import time
from pathlib import Path

from fastapi.testclient import TestClient

from service.app import create_app

P0 = "/v1/topics/t/partitions/0"


def _produce(c: TestClient, records: list[dict], **extra: object) -> dict:
    r = c.post(f"{P0}/records", json={"records": records, **extra})
    assert r.status_code == 200, r.text
    return r.json()


def _read_all(c: TestClient, isolation: str = "read_uncommitted") -> list[dict]:
    out, offset = [], 0
    while True:
        page = c.get(f"{P0}/records", params={"offset": offset, "isolation": isolation, "max_records": 3}).json()
        if not page["records"]:
            return out
        out += page["records"]
        offset = page["next_offset"]


def test_topic_lifecycle(client: TestClient, tmp_path: Path) -> None:
    r = client.post("/v1/topics", json={"name": "t", "partitions": 2, "config": {"cleanup.policy": "compact",
                                                                              "segment.bytes": 4096}})
    assert r.status_code == 201
    assert r.json() == {"name": "t", "partitions": 2, "config": {"cleanup.policy": "compact", "segment.bytes": 4096}}
    assert client.get("/v1/topics").json() == [r.json()]
    r = client.patch("/v1/topics/t/config", json={"config": {"min.compaction.lag.ms": 5, "segment.bytes": None}})
    assert r.json()["config"] == {"cleanup.policy": "compact", "min.compaction.lag.ms": 5}
    assert client.get("/v1/topics/t").json() == r.json()
    assert (tmp_path / "data" / "t-1").is_dir()
    assert client.delete("/v1/topics/t").status_code == 204
    assert client.get("/v1/topics").json() == []
    assert not (tmp_path / "data" / "t-1").exists()


def test_a_topic_created_without_a_count_gets_num_partitions(tmp_path: Path) -> None:
    """The node's num_partitions (Kafka's num.partitions) is the count of a topic created without one, over HTTP as
    over the Kafka listener; an explicit count wins."""
    from tests.service.conftest import make_node

    node = make_node(tmp_path, num_partitions=3)
    try:
        with TestClient(create_app(node)) as c:
            assert c.post("/v1/topics", json={"name": "dflt"}).json()["partitions"] == 3
            assert c.post("/v1/topics", json={"name": "two", "partitions": 2}).json()["partitions"] == 2
            assert c.post("/v1/topics", json={"name": "bad", "partitions": 0}).status_code == 400
    finally:
        node.shutdown()


def test_produce_and_read_back_with_headers_tombstones_and_base64(client: TestClient) -> None:
    # a delete topic: a compacted one refuses keyless records (see the test below)
    client.post("/v1/topics", json={"name": "t", "config": {"cleanup.policy": "delete"}})
    r = _produce(client, [{"key": "a", "value": "1", "timestamp": 1000, "headers": [{"key": "h", "value": "v"}]},
                          {"key": "a", "value": None, "timestamp": 1001},
                          {"key": None, "value": "keyless", "timestamp": 1002}], compression="zstd")
    assert (r["base_offset"], r["last_offset"]) == (0, 2)
    raw = bytes(range(256))
    _produce(client, [{"key": base64.b64encode(b"\x00\xff").decode(), "value": base64.b64encode(raw).decode()}],
             encoding="base64")
    recs = client.get(f"{P0}/records", params={"max_records": 3}).json()
    assert recs["next_offset"] == 3 and recs["high_watermark"] == 4 and recs["log_start_offset"] == 0
    assert recs["records"] == [
        {"offset": 0, "key": "a", "value": "1", "timestamp": 1000, "headers": [{"key": "h", "value": "v"}]},
        {"offset": 1, "key": "a", "value": None, "timestamp": 1001, "headers": []},
        {"offset": 2, "key": None, "value": "keyless", "timestamp": 1002, "headers": []},
    ]
    last = client.get(f"{P0}/records", params={"offset": 3, "encoding": "base64"}).json()["records"][0]
    assert base64.b64decode(last["value"]) == raw and base64.b64decode(last["key"]) == b"\x00\xff"
    assert client.get(f"{P0}/records", params={"offset": 4}).json()["records"] == []


def test_a_compacted_topic_refuses_keyless_records_with_422(client: TestClient) -> None:
    client.post("/v1/topics", json={"name": "t"})
    for body in ({"records": [{"key": "a", "value": "1"}, {"value": "keyless"}]},
                 {"records": [{"key": None, "value": "x", "headers": [{"key": "h", "value": "v"}]}]},
                 {"encoding": "base64", "records": [{"key": None, "value": "eA=="}]}):
        r = client.post(f"{P0}/records", json=body)
        assert r.status_code == 422 and "without a key" in r.json()["error"], r.text
    assert client.get(f"{P0}/records").json()["records"] == []  # nothing was appended


def test_transactions_and_read_committed(client: TestClient) -> None:
    client.post("/v1/topics", json={"name": "t"})
    _produce(client, [{"key": "x", "value": "plain"}])
    for pid, kind in ((1, "abort"), (2, "commit")):
        _produce(client, [{"key": f"k{pid}", "value": kind}],
                 producer={"id": pid, "epoch": 0, "base_sequence": 0, "transactional": True})
    open_txn = _produce(client, [{"key": "k3", "value": "open"}],
                        producer={"id": 3, "epoch": 0, "base_sequence": 0, "transactional": True})
    m1 = client.post(f"{P0}/markers", json={"producer_id": 1, "producer_epoch": 0, "type": "abort"}).json()
    m2 = client.post(f"{P0}/markers", json={"producer_id": 2, "producer_epoch": 0, "type": "commit"}).json()
    assert m1["offset"] == 4 and m2["offset"] == 5
    part = client.get(P0).json()
    assert part["last_stable_offset"] == open_txn["base_offset"] == 3
    assert [r["value"] for r in _read_all(client)] == ["plain", "abort", "commit", "open"]
    assert [r["value"] for r in _read_all(client, "read_committed")] == ["plain", "commit"]
    client.post(f"{P0}/markers", json={"producer_id": 3, "producer_epoch": 0, "type": "commit"})
    assert [r["value"] for r in _read_all(client, "read_committed")] == ["plain", "commit", "open"]


def test_idempotent_producer_retry_is_a_duplicate(client: TestClient) -> None:
    client.post("/v1/topics", json={"name": "t"})
    body = [{"key": "a", "value": "1"}]
    prod = {"id": 9, "epoch": 0, "base_sequence": 0}
    first = _produce(client, body, producer=prod)
    again = _produce(client, body, producer=prod)
    assert again == {**first, "duplicate": True}
    assert len(_read_all(client)) == 1


def test_roll_partition_info_and_clean(client: TestClient) -> None:
    client.post("/v1/topics", json={"name": "t", "config": {"cleanup.policy": "compact"}})
    for i in range(4):
        _produce(client, [{"key": k, "value": f"{k}{i}"} for k in "abc"])
    assert client.post(f"{P0}/roll").json() == {"base_offset": 12}
    info = client.get(P0).json()
    assert info["log_end_offset"] == 12 and info["cleaner_checkpoint"] is None
    assert info["dirty_ratio"] == 1.0
    assert [(s["base_offset"], s["end_offset"], s["tier"]) for s in info["segments"]] == [(0, 11, "local"),
                                                                                          (12, 11, "local")]
    stats = client.post(f"{P0}/clean").json()
    assert stats["records_read"] == 12 and stats["records_retained"] == 3 and stats["checkpoint"] == 12
    for k in ("bytes_read", "bytes_written", "segments_downloaded", "segments_skipped_by_bloom", "bytes_downloaded",
              "bytes_uploaded", "elapsed_ms"):
        assert k in stats
    assert [(r["offset"], r["value"]) for r in _read_all(client)] == [(9, "a3"), (10, "b3"), (11, "c3")]
    info = client.get(P0).json()
    assert info["cleaner_checkpoint"] == 12 and info["dirty_ratio"] == 0.0
    runs = client.get("/v1/cleaner").json()
    assert runs["threads"] == 1 and runs["dead_threads"] == 0 and runs["uncleanable_partitions"] == []
    assert runs["last_runs"][-1]["checkpoint"] == 12


def test_clean_as_a_job(client: TestClient) -> None:
    client.post("/v1/topics", json={"name": "t"})
    _produce(client, [{"key": "a", "value": "1"}, {"key": "a", "value": "2"}])
    client.post(f"{P0}/roll")
    r = client.post(f"{P0}/clean", params={"wait": "false"})
    assert r.status_code == 202
    job_id = r.json()["job_id"]
    deadline = time.monotonic() + 30
    while (job := client.get(f"/v1/jobs/{job_id}").json())["state"] in ("pending", "running"):
        assert time.monotonic() < deadline
        time.sleep(0.02)
    assert job["state"] == "succeeded" and job["stats"]["records_retained"] == 1 and job["error"] is None
    assert client.get("/v1/jobs/nope").status_code == 404
    assert client.post("/v1/topics/zz/partitions/0/clean", params={"wait": "false"}).status_code == 404


def test_clean_of_a_delete_policy_topic_is_400(client: TestClient) -> None:
    client.post("/v1/topics", json={"name": "t", "config": {"cleanup.policy": "delete"}})
    r = client.post(f"{P0}/clean")
    assert r.status_code == 400 and "does not include 'compact'" in r.json()["error"]


def test_delete_records_moves_the_log_start_as_kafkas_delete_records(client: TestClient) -> None:
    client.post("/v1/topics", json={"name": "t", "config": {"cleanup.policy": "delete", "retention.ms": -1}})
    _produce(client, [{"key": f"k{i}", "value": f"v{i}"} for i in range(5)])
    r = client.post(f"{P0}/delete-records", json={"offset": 3})
    assert r.status_code == 200 and r.json() == {"log_start_offset": 3}
    assert client.get(f"{P0}/records", params={"offset": 2}).status_code == 416
    assert [x["offset"] for x in client.get(f"{P0}/records", params={"offset": 3}).json()["records"]] == [3, 4]
    assert client.get(P0).json()["log_start_offset"] == 3
    assert client.post(f"{P0}/delete-records", json={"offset": 1}).json() == {"log_start_offset": 3}  # never back
    r = client.post(f"{P0}/delete-records", json={"offset": 9})
    assert r.status_code == 416 and "high watermark" in r.json()["error"]
    assert client.post(f"{P0}/delete-records", json={"offset": -2}).status_code == 400
    assert client.post(f"{P0}/delete-records", json={"offset": -1}).json() == {"log_start_offset": 5}
    client.post("/v1/topics", json={"name": "c", "config": {"cleanup.policy": "compact"}})
    r = client.post("/v1/topics/c/partitions/0/delete-records", json={"offset": 0})
    assert r.status_code == 409 and "cleanup.policy" in r.json()["error"]


def test_openapi_docs(client: TestClient) -> None:
    assert client.get("/docs").status_code == 200
    paths = client.get("/openapi.json").json()["paths"]
    assert "/v1/topics/{topic}/partitions/{partition}/records" in paths
