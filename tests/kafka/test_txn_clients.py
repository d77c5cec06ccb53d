"""confluent-kafka transactional producers (each its own process) against a real ``tiercompact serve``: the transaction coordinator end to end.

- commits, aborts and both interleaved (two transactional ids open at once) across 4 partitions:
  a read_committed consumer sees exactly the committed records; after roll / clean / tier / clean
  on both tiers the aborted records and their spent ABORT markers are gone and read_committed
  answers the same;
- a zombie: a second producer with the same transactional.id fences the first (its sends and its
  commit fail), and the transaction the first left open is aborted;
- the operators' view: GET /v1/transactions and /v1/transactions/{id}, the coordinator metrics.
"""

from __future__ import annotations

import time
from typing import Any

from kafka.protocol.consumer import FetchRequest

from log.record import iter_batches
from log.record.batch import ControlRecordType
from tests.kafka.conftest import KafkaServe, run_client, run_clients
from tests.kafka.wire import Wire

PARTS = 4


def raw_batches(server: KafkaServe, topic: str, partition: int) -> list[Any]:
    """Every batch of the partition as stored (read_uncommitted Fetch from offset 0 to the high watermark)."""
    wire = Wire(server.kafka_port)
    P = FetchRequest.FetchTopic.FetchPartition
    out: list[Any] = []
    offset = 0
    try:
        for _ in range(200):
            req = FetchRequest(replica_id=-1, max_wait_ms=0, min_bytes=0, max_bytes=50 << 20, isolation_level=0,
                               session_id=0, session_epoch=-1, topics=[FetchRequest.FetchTopic(topic=topic, partitions=[
                                   P(partition=partition, current_leader_epoch=-1, fetch_offset=offset,
                                     log_start_offset=-1, partition_max_bytes=1 << 20)])],
                               forgotten_topics_data=[], rack_id="")
            p = wire.call(req, 11).responses[0].partitions[0]
            assert p.error_code == 0, p
            batches = [b for _pos, b in iter_batches(bytes(p.records or b""), allow_truncated_tail=True)]
            batches = [b for b in batches if b.last_offset >= offset]
            if not batches:
                break
            out += batches
            offset = batches[-1].last_offset + 1
            if offset >= p.high_watermark:
                break
    finally:
        wire.close()
    return out


def _values(batches: list[Any]) -> list[str]:
    return [r.value.decode() for b in batches if not b.is_control for r in b.records() if r.value is not None]


def _abort_markers(batches: list[Any]) -> int:
    return sum(1 for b in batches if b.is_control and b.records_count and b.control_type() is ControlRecordType.ABORT)


def _read(server: KafkaServe, topic: str, isolation: str) -> list[tuple[int, int, str | None, str | None]]:
    got = run_client("confluent", {"action": "consume", "bootstrap": server.bootstrap, "topic": topic,
                                   "isolation": isolation})
    assert got["timed_out"] == [], got
    return sorted((r["partition"], r["offset"], r["key"], r["value"]) for r in got["records"])


def _filler(server: KafkaServe, topic: str, partition: int, key: str) -> None:
    server.api("POST", f"/v1/topics/{topic}/partitions/{partition}/records",
               {"records": [{"key": key, "value": "filler"}]})


def test_commit_abort_interleaved_then_clean_both_tiers(kafka_server: KafkaServe, topic_name: str) -> None:
    tiered, local = f"{topic_name}-r", f"{topic_name}-l"
    for topic, remote in ((tiered, True), (local, False)):
        kafka_server.create_topic(topic, PARTS, {"cleanup.policy": "compact", "remote.storage.enable": remote,
                                                 "delete.retention.ms": 0, "min.cleanable.dirty.ratio": 0.01,
                                                 "retention.ms": -1})
    txns = [{"records": [[p, f"t{i}-k{p}-{j}", f"{'c' if i % 2 == 0 else 'a'}-{i}-{p}-{j}"]
                         for p in range(PARTS) for j in range(3)], "commit": i % 2 == 0} for i in range(4)]
    jobs = []
    for topic in (tiered, local):
        common = {"bootstrap": kafka_server.bootstrap, "topic": topic, "transactional_id": f"{topic}-tx"}
        jobs += [("txn", {**common, "action": "transactions", "transactions": txns}),
                 ("txn", {**common, "action": "interleaved", "transactional_id": f"{topic}-il", "rounds": 3,
                          "partitions": PARTS})]
    answers = run_clients(jobs, timeout=120)
    assert answers[0]["transactions"] == ["committed", "aborted", "committed", "aborted"]

    expected = sorted([r[2] for t in txns if t["commit"] for r in t["records"]]
                      + [f"commit-{i}" for i in range(3) for _ in range(PARTS)])
    committed = {}
    markers_before: dict[tuple[str, int], int] = {}
    for topic in (tiered, local):
        committed[topic] = _read(kafka_server, topic, "read_committed")
        assert sorted(v for _p, _o, _k, v in committed[topic]) == expected  # exactly the committed records, once
        uncommitted = _read(kafka_server, topic, "read_uncommitted")
        assert any(v.startswith(("a-", "abort-")) for _p, _o, _k, v in uncommitted if v)
        for p in range(PARTS):
            markers_before[(topic, p)] = _abort_markers(raw_batches(kafka_server, topic, p))

    # the operators' view of finished transactional ids, and the coordinator's metrics
    tx = kafka_server.api("GET", f"/v1/transactions/{tiered}-tx")
    assert tx["state"] == "CompleteAbort" and tx["partitions"] == [] and tx["producer_epoch"] == 0, tx
    listed = {t["transactional_id"] for t in kafka_server.api("GET", "/v1/transactions")["transactions"]}
    assert {f"{tiered}-tx", f"{tiered}-il-a", f"{tiered}-il-b"} <= listed
    assert "kafka_coordinator_transaction_commits_total" in _metrics(kafka_server)

    # three cleaning rounds on each tier (the aborted data goes, then its markers are stamped with the
    # delete horizon, then removed); each round has a new record to clean, as the cleaner needs
    for n in range(3):
        for topic in (tiered, local):
            for p in range(PARTS):
                path = f"/v1/topics/{topic}/partitions/{p}"
                _filler(kafka_server, topic, p, f"filler-{n}")
                kafka_server.api("POST", f"{path}/roll")
                if topic == tiered:
                    kafka_server.api("POST", f"{path}/tier")
                kafka_server.api("POST", f"{path}/clean")
    for p in range(PARTS):
        kafka_server.api("POST", f"/v1/topics/{tiered}/partitions/{p}/tier")
    for topic in (tiered, local):
        for p in range(PARTS):
            batches = raw_batches(kafka_server, topic, p)
            assert not [v for v in _values(batches) if v.startswith(("a-", "abort-"))], p  # aborted records gone
            # and their spent markers: an ABORT marker stays only while its transaction's last batch does (the
            # producer's last batch, kept as an empty header for its state, as Kafka's cleaner keeps it)
            kept = {b.producer_id for b in batches if not b.is_control and b.records_count == 0}
            markers = [b for b in batches if b.is_control and b.records_count
                       and b.control_type() is ControlRecordType.ABORT]
            assert all(b.producer_id in kept for b in markers) and len(markers) <= len(kept), (topic, p)
            assert len(markers) < markers_before[(topic, p)], (topic, p)
        after = _read(kafka_server, topic, "read_committed")
        assert [r for r in after if r[3] != "filler"] == committed[topic]  # read_committed unchanged
        assert _read(kafka_server, topic, "read_uncommitted") == after


def _metrics(server: KafkaServe) -> str:
    import urllib.request

    with urllib.request.urlopen(server.url + "/metrics", timeout=10) as r:
        return r.read().decode()


def test_zombie_producer_is_fenced(kafka_server: KafkaServe, topic_name: str) -> None:
    topic = topic_name
    kafka_server.create_topic(topic, 2, {"cleanup.policy": "delete"})
    out = run_client("txn", {"action": "zombie", "bootstrap": kafka_server.bootstrap, "topic": topic,
                             "transactional_id": f"{topic}-z"}, timeout=90)
    assert out["b_commit"] == "committed"
    assert out["a_commit"] != "committed", out  # the zombie's commit is fenced
    assert out["a_send"] != "ok", out  # and so is its send
    assert "fenced" in (out["a_send"] + out["a_commit"] + " ".join(out["a_errors"])).lower(), out
    committed = _read(kafka_server, topic, "read_committed")
    assert [(k, v) for _p, _o, k, v in committed] == [("live-1", "from-b")]  # the zombie's open txn was aborted
    tx = kafka_server.api("GET", f"/v1/transactions/{topic}-z")
    assert tx["state"] == "CompleteCommit" and tx["producer_epoch"] >= 2, tx
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        if all(_abort_markers(raw_batches(kafka_server, topic, p)) >= (1 if p == 0 else 0) for p in range(2)):
            break
        time.sleep(0.2)
    assert _abort_markers(raw_batches(kafka_server, topic, 0)) == 1
