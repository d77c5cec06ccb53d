"""confluent-kafka's AdminClient on consumer groups (ListGroups, DescribeGroups, OffsetFetch, OffsetCommit, DeleteGroups), JSON in and out."""

from __future__ import annotations

from typing import Any

from common import main
from confluent_kafka import ConsumerGroupTopicPartitions, KafkaException, TopicPartition
from confluent_kafka.admin import AdminClient


def _admin(spec: dict[str, Any]) -> AdminClient:
    return AdminClient({"bootstrap.servers": spec["bootstrap"], "socket.timeout.ms": 10000})


def _err(e: KafkaException) -> str:
    return str(e.args[0].name())


def groups(spec: dict[str, Any]) -> dict[str, Any]:
    """list, describe and fetch the offsets of ``spec["group"]``."""
    admin, gid = _admin(spec), spec["group"]
    listed = admin.list_consumer_groups(request_timeout=15).result(20)
    out: dict[str, Any] = {"listed": {g.group_id: str(g.state.name) for g in listed.valid}}
    d = admin.describe_consumer_groups([gid], request_timeout=15)[gid].result(20)
    out["described"] = {"state": str(d.state.name), "members": len(d.members),
                        "coordinator": d.coordinator.id if d.coordinator else None}
    got = admin.list_consumer_group_offsets([ConsumerGroupTopicPartitions(gid)], request_timeout=15)[gid].result(20)
    out["offsets"] = {f"{tp.topic}:{tp.partition}": tp.offset for tp in got.topic_partitions}
    return out


def alter(spec: dict[str, Any]) -> dict[str, Any]:
    admin, gid = _admin(spec), spec["group"]
    tps = [TopicPartition(spec["topic"], int(p), int(o)) for p, o in spec["offsets"].items()]
    res = admin.alter_consumer_group_offsets([ConsumerGroupTopicPartitions(gid, tps)], request_timeout=15)
    got = res[gid].result(20)
    return {"altered": {f"{tp.topic}:{tp.partition}": tp.offset for tp in got.topic_partitions}}


def delete(spec: dict[str, Any]) -> dict[str, Any]:
    admin = _admin(spec)
    out = {}
    for gid, fut in admin.delete_consumer_groups(spec["groups"], request_timeout=15).items():
        try:
            fut.result(20)
            out[gid] = "NONE"
        except KafkaException as e:
            out[gid] = _err(e)
    return {"deleted": out}


if __name__ == "__main__":
    main({"groups": groups, "alter": alter, "delete": delete})
