"""Consumer groups with real clients, each member in its own process: 3 confluent-kafka members and 1 kafka-python
member share a 6-partition topic; one is kill -9'd, an aiokafka member joins, one leaves; every record is consumed,
the committed offsets (sampled through the HTTP API) only move forward, and the group settles within the session
timeout after each change."""

from __future__ import annotations

import time
from pathlib import Path

from tests.kafka.conftest import KafkaServe, run_client
from tests.kafka.group_harness import GroupMember, OffsetSampler, committed, stable_with, wait_for

PARTITIONS = 6
SESSION_MS = 6000


def _produce(server: KafkaServe, topic: str, start: int, n: int) -> list[list[int]]:
    records = [{"key": f"k{i}", "value": f"v{i}", "partition": i % PARTITIONS} for i in range(start, start + n)]
    out = run_client("confluent", {"action": "produce", "bootstrap": server.bootstrap, "topic": topic,
                                   "records": records, "idempotent": True})
    assert all(isinstance(o, list) for o in out["offsets"]), out
    return out["offsets"]  # type: ignore[no-any-return]


def test_members_join_leave_and_die(kafka_server: KafkaServe, topic_name: str, tmp_path: Path) -> None:
    server, gid = kafka_server, f"grp-{topic_name}"
    server.create_topic(topic_name, PARTITIONS)
    expected = {}
    for i, (p, o) in enumerate(_produce(server, topic_name, 0, 120)):
        expected[(p, o)] = f"v{i}"
    spec = {"bootstrap": server.bootstrap, "topic": topic_name, "group": gid, "session_timeout_ms": SESSION_MS,
            "heartbeat_ms": 1000, "max_s": 110}
    clients = ["confluent", "confluent", "confluent", "kafka-python"]
    members = [GroupMember(c, spec, tmp_path / f"stop-{i}") for i, c in enumerate(clients)]
    sampler = OffsetSampler(server, gid)
    settle: dict[str, float] = {}
    try:
        t0 = time.monotonic()
        wait_for(stable_with(server, gid, 4, PARTITIONS), 40, "4 members, stable")
        settle["4 join"] = time.monotonic() - t0
        for i, (p, o) in enumerate(_produce(server, topic_name, 120, 120), start=120):
            expected[(p, o)] = f"v{i}"

        members[0].kill9()  # a confluent member dies without leaving: its session times out
        t0 = time.monotonic()
        wait_for(stable_with(server, gid, 3, PARTITIONS), SESSION_MS / 1000 + 10, "3 members after kill -9")
        settle["kill -9"] = time.monotonic() - t0

        members.append(GroupMember("aiokafka", spec, tmp_path / "stop-aio"))
        t0 = time.monotonic()
        wait_for(stable_with(server, gid, 4, PARTITIONS), 30, "aiokafka joined")
        settle["aiokafka join"] = time.monotonic() - t0

        members[1].stop()  # a confluent member leaves cleanly (LeaveGroup)
        t0 = time.monotonic()
        wait_for(stable_with(server, gid, 3, PARTITIONS), SESSION_MS / 1000, "3 members after a leave")
        settle["leave"] = time.monotonic() - t0

        for i, (p, o) in enumerate(_produce(server, topic_name, 240, 120), start=240):
            expected[(p, o)] = f"v{i}"
        ends = {p: 1 + max(o for (pp, o) in expected if pp == p) for p in range(PARTITIONS)}
        wait_for(lambda: committed(server, gid) == ends, 40, f"committed offsets reach {ends}")
    finally:
        for m in members:
            if m.proc.poll() is None:
                m.stop()
        history = sampler.stop()
    print("settle times (s):", {k: round(v, 2) for k, v in settle.items()})
    consumed: dict[tuple[int, int], str] = {}
    for m in members:
        for p, o, v in m.records():
            assert consumed.setdefault((p, o), v) == v
    assert consumed.keys() >= expected.keys()
    assert all(consumed[k] == v for k, v in expected.items())
    for p, h in history.items():
        assert h == sorted(h), f"partition {p}'s committed offset moved back: {h}"
    assert settle["kill -9"] <= SESSION_MS / 1000 + 4
    assert settle["leave"] <= SESSION_MS / 1000
    for m in members[2:]:
        assert any(e["event"] == "closed" for e in m.events), (m.client, m.events[-3:], m.stderr()[-2000:])


def test_admin_client_lists_describes_alters_and_deletes_groups(kafka_server: KafkaServe, topic_name: str,
                                                                tmp_path: Path) -> None:
    from tests.kafka.group_harness import run_group_admin, run_member

    server, gid = kafka_server, f"adm-{topic_name}"
    server.create_topic(topic_name, PARTITIONS)
    _produce(server, topic_name, 0, 2 * PARTITIONS)
    run_member("confluent", {"bootstrap": server.bootstrap, "topic": topic_name, "group": gid,
                             "expect": 2 * PARTITIONS}, tmp_path)
    common = {"bootstrap": server.bootstrap, "group": gid, "topic": topic_name}
    seen = run_group_admin({**common, "action": "groups"})
    assert seen["listed"][gid] == "EMPTY"
    assert seen["described"]["state"] == "EMPTY" and seen["described"]["members"] == 0
    assert seen["offsets"] == {f"{topic_name}:{p}": 2 for p in range(PARTITIONS)}
    assert run_group_admin({**common, "action": "alter", "offsets": {"0": 1}})["altered"] == \
        {f"{topic_name}:0": 1}
    assert committed(server, gid) == {0: 1, **dict.fromkeys(range(1, PARTITIONS), 2)}
    assert run_group_admin({**common, "action": "delete", "groups": [gid, f"{gid}-none"]})["deleted"] == \
        {gid: "NONE", f"{gid}-none": "GROUP_ID_NOT_FOUND"}
    assert committed(server, gid) == {}
