"""GET .../compactions through the real app: every round (API clean, background thread; completed
or failed) leaves a report, newest first, paged; the metrics count removals by reason."""

from __future__ import annotations

from fastapi.testclient import TestClient
from prometheus_client.parser import text_string_to_metric_families

from cleaner.log_cleaner import CleanerThread
from service.node import Node

P0 = "/v1/topics/t/partitions/0"


def _topic(c: TestClient, **config: object) -> None:
    r = c.post("/v1/topics", json={"name": "t", "config": {"cleanup.policy": "compact", "segment.bytes": 1024,
                                                           "min.cleanable.dirty.ratio": 0.01, **config}})
    assert r.status_code == 201, r.text


def _produce(c: TestClient, records: list[tuple[str, str | None]]) -> None:
    r = c.post(f"{P0}/records", json={"records": [{"key": k, "value": v} for k, v in records]})
    assert r.status_code == 200, r.text


def _dirty(c: TestClient, round_: int, keys: int = 20) -> None:
    for i in range(keys):
        _produce(c, [(f"k{i}", f"v{round_}-{i}" + "x" * 40)])
    assert c.post(f"{P0}/roll").status_code == 200


def test_an_api_clean_leaves_a_local_report(client: TestClient) -> None:
    _topic(client)
    _dirty(client, 0)
    _dirty(client, 1)
    stats = client.post(f"{P0}/clean").json()
    assert stats["records_removed"] == {"superseded": 20, "tombstone": 0, "aborted": 0, "marker": 0}
    rounds = client.get(f"{P0}/compactions").json()
    assert len(rounds) == 1
    r = rounds[0]
    assert (r["engine"], r["outcome"], r["error"], r["topic"], r["partition"]) == ("local", "completed", None, "t", 0)
    assert (r["checkpoint_before"], r["checkpoint_after"]) == (0, stats["checkpoint"])
    assert r["removed"] == stats["records_removed"]
    assert r["started_ms"] <= r["ended_ms"]
    assert {s["action"] for s in r["segments"]} == {"cleaned-local"}
    assert sum(s["bytes_in"] for s in r["segments"]) == r["bytes_in"] == stats["bytes_read"]
    assert sum(s["bytes_out"] for s in r["segments"]) == r["bytes_out"] == stats["bytes_written"]
    assert sum(s["removed"]["superseded"] for s in r["segments"]) == 20
    assert r["downloaded"] == r["uploaded"] == r["requests"] == 0
    assert [s["base_offset"] for s in r["segments"]] == sorted(s["base_offset"] for s in r["segments"])


def test_rounds_are_listed_newest_first_and_paged(client: TestClient) -> None:
    _topic(client)
    checkpoints = []
    for n in range(4):
        _dirty(client, n, keys=5)
        checkpoints.append(client.post(f"{P0}/clean").json()["checkpoint"])
    everything = client.get(f"{P0}/compactions", params={"limit": 100}).json()
    assert [r["checkpoint_after"] for r in everything] == checkpoints[::-1]
    page1 = client.get(f"{P0}/compactions", params={"limit": 3}).json()
    page2 = client.get(f"{P0}/compactions", params={"limit": 3, "before": page1[-1]["round_id"]}).json()
    assert page1 + page2 == everything
    r = client.get(f"{P0}/compactions", params={"before": "no-such-round"})
    assert r.status_code == 400 and "not a round id" in r.json()["error"]
    for bad in (0, 1001):
        r = client.get(f"{P0}/compactions", params={"limit": bad})
        assert 400 <= r.status_code < 500 and "1..1000" in r.text
    assert client.get("/v1/topics/t/partitions/7/compactions").status_code == 404
    assert client.get("/v1/topics/nope/partitions/0/compactions").status_code == 404


def test_a_background_round_leaves_a_report(client: TestClient, node: Node) -> None:
    _topic(client)
    _dirty(client, 0)
    _dirty(client, 1)
    thread = CleanerThread(node.cleaner, 0, node.cleaner._new_map())
    assert thread.do_work()  # one iteration of a cleaner thread: the filthiest log, cleaned
    (r,) = client.get(f"{P0}/compactions").json()
    assert (r["engine"], r["outcome"]) == ("local", "completed")
    assert r["removed"]["superseded"] == 20


def test_a_failed_round_leaves_a_report_with_its_error(client: TestClient, node: Node) -> None:
    _topic(client)
    _dirty(client, 0)
    _dirty(client, 1)
    seg = node.data_dir / "t-0" / f"{0:020d}.log"
    data = bytearray(seg.read_bytes())
    data[30] ^= 0xFF  # inside the first batch's CRC-covered bytes
    seg.write_bytes(bytes(data))
    r = client.post(f"{P0}/clean")
    assert r.status_code >= 400
    (rep,) = client.get(f"{P0}/compactions").json()
    assert (rep["engine"], rep["outcome"], rep["checkpoint_after"]) == ("local", "failed", None)
    assert "CorruptRecordError" in rep["error"]


def test_removals_by_reason_are_prometheus_counters(client: TestClient) -> None:
    _topic(client, **{"delete.retention.ms": 0})
    _dirty(client, 0, keys=10)
    _produce(client, [("k0", None)])
    assert client.post(f"{P0}/roll").status_code == 200
    client.post(f"{P0}/clean")
    _produce(client, [("z", "1")])
    assert client.post(f"{P0}/roll").status_code == 200
    client.post(f"{P0}/clean")  # the tombstone's horizon (delete.retention.ms=0) has passed
    text = client.get("/metrics").text
    samples = {(s.name, tuple(sorted(s.labels.items()))): s.value
               for fam in text_string_to_metric_families(text) for s in fam.samples}
    removed = {reason: samples[("cleaner_records_removed_total", (("engine", "local"), ("reason", reason)))]
               for reason in ("superseded", "tombstone", "aborted", "marker")}
    assert removed == {"superseded": 1, "tombstone": 1, "aborted": 0, "marker": 0}
    assert samples[("cleaner_rounds_total", (("engine", "local"), ("outcome", "completed")))] == 2
    assert samples[("cleaner_report_write_failures_total", ())] == 0
    assert "# TYPE cleaner_records_removed_total counter" in text
