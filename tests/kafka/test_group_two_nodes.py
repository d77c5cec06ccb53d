"""Committed offsets survive a node restart and coordinator moves: two ``tiercompact serve`` nodes sharing one
metadata store (a SQLite file; PostgreSQL when TIERCOMPACT_TEST_POSTGRES_URL is set) and one object store; the group's
coordinator moves to node B when it joins and back to A when B is kill -9'd under a live member (which carries on at
A without a rebalance), and each time the next member (a different client, its own process) resumes exactly at the
committed offsets."""

from __future__ import annotations

import os
import re
import urllib.request
from pathlib import Path

from coordinator.ownership import slot_for
from tests.kafka.conftest import KafkaServe, run_client
from tests.kafka.group_harness import GroupMember, committed, group, run_member, wait_for
from tests.support.serve import free_port


def _metadata_url(shared: Path) -> str:
    return os.environ.get("TIERCOMPACT_TEST_POSTGRES_URL") or f"sqlite:///{shared / 'metadata.db'}"


def _produce(server: KafkaServe, topic: str, start: int, n: int) -> set[tuple[int, int, str]]:
    records = [{"key": f"k{i}", "value": f"v{i}", "partition": i % 2} for i in range(start, start + n)]
    out = run_client("confluent", {"action": "produce", "bootstrap": server.bootstrap, "topic": topic,
                                   "records": records, "idempotent": True})
    return {(p, o, r["value"]) for (p, o), r in zip(out["offsets"], records, strict=True)}


def _consumed(events: list[dict]) -> set[tuple[int, int, str]]:
    return {(e["p"], e["o"], e["v"]) for e in events if e["event"] == "record"}


def _coordinator(server: KafkaServe, gid: str) -> tuple[int | None, int | None]:
    g = group(server, gid)
    return (None, None) if g is None else (g["coordinator"]["broker_id"], g["coordinator"]["epoch"])


def test_offsets_survive_restart_and_coordinator_moves(tmp_path: Path) -> None:
    shared = tmp_path
    common = ["--metadata", _metadata_url(shared), "--remote", (shared / "remote").as_uri(), "--cleaner-threads", "0",
              "--broker-heartbeat-interval-ms", "200", "--broker-session-timeout-ms", "1500",
              "--group-initial-rebalance-delay-ms", "100"]
    a_port = free_port()
    a = KafkaServe(shared / "a", ["--broker-id", "1", *common], kafka_port=a_port, output=shared / "a.log").start()
    b = None
    pid = os.getpid()
    topic = f"moving-{pid}"
    gid = next(g for g in (f"moving-group-{pid}-{i}" for i in range(1000)) if slot_for(g, 50) % 2 == 1)
    spec = {"bootstrap": a.bootstrap, "topic": topic, "group": gid, "session_timeout_ms": 6000, "heartbeat_ms": 500}
    try:
        a.create_topic(topic, 2)
        for p in (0, 1):
            a.api("POST", f"/v1/topics/{topic}/partitions/{p}/leadership", {"leader_epoch": 1, "broker_id": 1})
        first = _produce(a, topic, 0, 40)
        assert _consumed(run_member("confluent", {**spec, "expect": 40}, tmp_path)) == first
        assert committed(a, gid) == {0: 20, 1: 20}
        epochs = [_coordinator(a, gid)]
        assert epochs[0][0] == 1

        a.stop()  # a restart: the offsets are in the metadata store
        a = KafkaServe(shared / "a", ["--broker-id", "1", *common], kafka_port=a_port,
                       output=shared / "a2.log").start()
        assert committed(a, gid) == {0: 20, 1: 20}
        second = _produce(a, topic, 40, 10)
        assert _consumed(run_member("kafka-python", {**spec, "expect": 10}, tmp_path)) == second
        assert committed(a, gid) == {0: 25, 1: 25}
        epochs.append(_coordinator(a, gid))

        b = KafkaServe(shared / "b", ["--broker-id", "2", *common], output=shared / "b.log").start()
        wait_for(lambda: _coordinator(a, gid)[0] == 2 and _coordinator(b, gid)[0] == 2, 15,
                 "the group's coordinator moves to B")
        assert group(b, gid)["coordinator"]["local"]
        assert committed(b, gid) == {0: 25, 1: 25}
        third = _produce(a, topic, 50, 10)
        assert _consumed(run_member("confluent", {**spec, "expect": 10}, tmp_path)) == third  # via B
        assert committed(a, gid) == {0: 30, 1: 30}
        epochs.append(_coordinator(b, gid))
        metrics = urllib.request.urlopen(b.url + "/metrics", timeout=10).read().decode()
        assert re.search(r"^kafka_coordinator_group_groupcoordinatormetrics_offset_commit_total [1-9]", metrics, re.M)
        assert re.search(r'^kafka_coordinator_numpartitions\{kind="group",state="active"\} 25\.0', metrics, re.M)

        # a live member while B, its coordinator, is kill -9'd: A takes the group back (loaded from the store,
        # Stable at the same generation) once B's registry heartbeat is stale, and the member carries on there
        live = GroupMember("kafka-python", spec, tmp_path / "stop-live")
        try:
            wait_for(lambda: (group(b, gid) or {}).get("state") == "Stable", 30, "the live member joins at B")
            generation = group(b, gid)["generation"]
            b.kill()
            b = None
            wait_for(lambda: _coordinator(a, gid)[0] == 1, 15, "the group's coordinator moves back to A")
            fourth = _produce(a, topic, 60, 10)
            wait_for(lambda: committed(a, gid) == {0: 35, 1: 35}, 30, "the live member commits through A")
            generation_at_a = group(a, gid)["generation"]
        finally:
            live.stop()
        # no rebalance was needed (else the member's events and its client's warnings say why)
        assert generation_at_a == generation, (live.events[-8:], live.stderr()[-3000:])
        assert set(live.records()) == fourth
        epochs.append(_coordinator(a, gid))
        fifth = _produce(a, topic, 70, 10)
        assert _consumed(run_member("aiokafka", {**spec, "expect": 10}, tmp_path)) == fifth
        assert committed(a, gid) == {0: 40, 1: 40}
        numbers = [e for _b, e in epochs]
        assert numbers == sorted(numbers) and len(set(numbers)) == len(numbers), epochs  # each move a new epoch
    finally:
        if b is not None:
            b.stop()
        a.stop()
