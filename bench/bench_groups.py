"""Consumer-group settle time -> bench/results/groups.json.

A real ``tiercompact serve`` (a fresh data dir, free ports) and 8 confluent-kafka group members, each
its own process (the tests' tests/kafka/clients/group_member.py), on a 16-partition topic. Then,
several rounds: a 9th member joins (the time until the group is Stable again with 9 members holding
every partition, polled every 20 ms through GET /v1/groups/{id}, and the coordinator's own figure:
rebalance start to the leader's SyncGroup, kafka_coordinator_group_last_rebalance_seconds), then it
leaves (the same two figures). librdkafka's heartbeat.interval.ms bounds how soon the existing
members learn of a rebalance; it is run at 1000 ms and at librdkafka's default 3000 ms.
"""

from __future__ import annotations

import re
import statistics
import tempfile
import time
import urllib.request
from pathlib import Path
from typing import Any

from bench.common import quick, write_result
from tests.kafka.conftest import KafkaServe
from tests.kafka.group_harness import GroupMember, stable_with, wait_for

MEMBERS = 8
PARTITIONS = 16


def _last_rebalance_s(server: KafkaServe) -> float:
    text = urllib.request.urlopen(server.url + "/metrics", timeout=10).read().decode()
    m = re.search(r"^kafka_coordinator_group_last_rebalance_seconds ([0-9.e+-]+)$", text, re.M)
    return float(m.group(1)) if m else float("nan")


def _round(server: KafkaServe, gid: str, spec: dict[str, Any], stop_file: Path) -> dict[str, float]:
    t0 = time.monotonic()
    member = GroupMember("confluent", spec, stop_file)
    wait_for(stable_with(server, gid, MEMBERS + 1, PARTITIONS), 60, "the joiner settles")
    joined = time.monotonic() - t0
    join_server = _last_rebalance_s(server)
    t0 = time.monotonic()
    stop_file.touch()
    wait_for(stable_with(server, gid, MEMBERS, PARTITIONS), 60, "the leaver settles")
    left = time.monotonic() - t0
    member.stop()
    return {"join_s": joined, "join_coordinator_s": join_server, "leave_s": left,
            "leave_coordinator_s": _last_rebalance_s(server)}


def _run(server: KafkaServe, root: Path, heartbeat_ms: int, rounds: int) -> dict[str, Any]:
    topic = gid = f"settle-{heartbeat_ms}"
    server.create_topic(topic, PARTITIONS)
    spec = {"bootstrap": server.bootstrap, "topic": topic, "group": gid, "session_timeout_ms": 10000,
            "heartbeat_ms": heartbeat_ms, "max_s": 600}
    members = [GroupMember("confluent", spec, root / f"stop-{heartbeat_ms}-{i}") for i in range(MEMBERS)]
    try:
        t0 = time.monotonic()
        wait_for(stable_with(server, gid, MEMBERS, PARTITIONS), 120, f"{MEMBERS} members settle")
        first = time.monotonic() - t0
        runs = [_round(server, gid, spec, root / f"stop-{heartbeat_ms}-x{r}") for r in range(rounds)]
    finally:
        for m in members:
            m.stop_file.touch()
        for m in members:
            m.stop()
    out: dict[str, Any] = {"heartbeat_interval_ms": heartbeat_ms, "first_settle_s": round(first, 3)}
    for key in runs[0]:
        vals = [r[key] for r in runs]
        out[key + "_median"] = round(statistics.median(vals), 3)
        out[key + "_max"] = round(max(vals), 3)
    return out


def main() -> None:
    rounds = 2 if quick() else 5
    root = Path(tempfile.mkdtemp(prefix="tiercompact-bench-groups-"))
    server = KafkaServe(root / "data", ["--cleaner-threads", "0", "--group-initial-rebalance-delay-ms", "3000"],
                        output=root / "serve.log").start()
    try:
        results = [_run(server, root, hb, rounds) for hb in (1000, 3000)]
    finally:
        server.stop()
    write_result("groups", {"members": MEMBERS, "partitions": PARTITIONS, "rounds": rounds,
                            "client": "confluent-kafka (librdkafka), each member its own process",
                            "group.initial.rebalance.delay.ms": 3000, "runs": results})


if __name__ == "__main__":
    main()
