"""Reads and admin calls of one Kafka client library (``"library"``: confluent, kafka-python or aiokafka), JSON in and out.

Actions: ``read_all`` (assign every partition from ``offset``, read until the end offset the
client itself lists, at ``isolation``), ``offsets_for_times`` (``[[partition, ts], ...]``: the offsets),
and ``admin`` (a list of ``ops`` with the library's admin client: create, describe, alter,
incremental_alter, create_partitions, delete; each answers its error names).
Only the chosen library is imported, so each run is that client alone.
"""

from __future__ import annotations

import asyncio
import time
from typing import Any

from common import dec, main


def _rec(partition: int, offset: int, key: bytes | None, value: bytes | None, ts: int) -> list[Any]:
    return [partition, offset, dec(key), dec(value), ts]


# ---- confluent-kafka --------------------------------------------------------------------------
def _confluent_consumer(spec: dict[str, Any]) -> Any:
    from confluent_kafka import Consumer

    return Consumer({"bootstrap.servers": spec["bootstrap"], "group.id": "reader-client-unused",
                     "enable.auto.commit": False, "isolation.level": spec.get("isolation", "read_uncommitted"),
                     "enable.partition.eof": True, "auto.offset.reset": "error"})


def _confluent_read(spec: dict[str, Any]) -> dict[str, Any]:
    from confluent_kafka import KafkaException, TopicPartition

    c = _confluent_consumer(spec)
    topic, start = spec["topic"], spec.get("offset", 0)
    parts = sorted(c.list_topics(topic, timeout=10).topics[topic].partitions)
    ends = {p: c.get_watermark_offsets(TopicPartition(topic, p), timeout=10)[1] for p in parts}
    c.assign([TopicPartition(topic, p, start) for p in parts])
    out: list[Any] = []
    pending = {p for p in parts if ends[p] > start}
    deadline = time.monotonic() + spec.get("timeout_s", 40)
    while pending and time.monotonic() < deadline:
        m = c.poll(0.5)
        if m is None:
            continue
        if m.error():
            if m.error().code() == -191:  # _PARTITION_EOF: the partition's end was reached
                pending.discard(m.partition())
                continue
            raise KafkaException(m.error())
        out.append(_rec(m.partition(), m.offset(), m.key(), m.value(), m.timestamp()[1]))
    c.close()
    return {"records": out, "ends": {str(p): e for p, e in ends.items()}, "timed_out": sorted(pending)}


def _confluent_times(spec: dict[str, Any]) -> dict[str, Any]:
    from confluent_kafka import TopicPartition

    c = _confluent_consumer(spec)
    out = [c.offsets_for_times([TopicPartition(spec["topic"], p, ts)], timeout=10)[0].offset
           for p, ts in spec["times"]]
    c.close()
    return {"offsets": out}


def _confluent_admin(spec: dict[str, Any]) -> dict[str, Any]:
    from confluent_kafka import KafkaException
    from confluent_kafka.admin import (
        AdminClient,
        AlterConfigOpType,
        ConfigEntry,
        ConfigResource,
        NewPartitions,
        NewTopic,
        ResourceType,
    )

    admin = AdminClient({"bootstrap.servers": spec["bootstrap"]})

    def wait(futs: dict[Any, Any]) -> dict[str, Any]:
        out: dict[str, Any] = {}
        for key, f in futs.items():
            name = key if isinstance(key, str) else key.name
            try:
                out[name] = f.result(20)
            except KafkaException as e:
                out[name] = {"error": e.args[0].name()}
        return out

    answers = []
    for op in spec["ops"]:
        kind, topic = op["op"], op["topic"]
        res = ConfigResource(ResourceType.TOPIC, topic)
        if kind == "create":
            got = wait(admin.create_topics([NewTopic(topic, op.get("partitions", 1), op.get("rf", 1),
                                                     config=op.get("config", {}))], request_timeout=15))
            answers.append({k: (v if isinstance(v, dict) else None) for k, v in got.items()})
        elif kind == "describe":
            got = wait(admin.describe_configs([res]))[topic]
            answers.append(got if "error" in got else {k: [e.value, e.source] for k, e in got.items()})
        elif kind == "describe_broker":  # "topic" names the broker id
            got = wait(admin.describe_configs([ConfigResource(ResourceType.BROKER, topic)]))[topic]
            answers.append(got if "error" in got else {k: [e.value, e.source, e.is_read_only] for k, e in got.items()})
        elif kind == "incremental_alter":
            ops = {"SET": AlterConfigOpType.SET, "DELETE": AlterConfigOpType.DELETE,
                   "APPEND": AlterConfigOpType.APPEND, "SUBTRACT": AlterConfigOpType.SUBTRACT}
            res = ConfigResource(ResourceType.TOPIC, topic, incremental_configs=[
                ConfigEntry(k, v, incremental_operation=ops[o]) for k, o, v in op["configs"]])
            got = wait(admin.incremental_alter_configs([res]))[topic]
            answers.append(got if isinstance(got, dict) else None)
        elif kind == "alter":
            res = ConfigResource(ResourceType.TOPIC, topic, set_config=op["configs"])
            got = wait(admin.alter_configs([res]))[topic]
            answers.append(got if isinstance(got, dict) else None)
        elif kind == "create_partitions":
            got = wait(admin.create_partitions([NewPartitions(topic, op["count"])]))[topic]
            answers.append(got if isinstance(got, dict) else None)
        elif kind == "delete":
            got = wait(admin.delete_topics([topic], operation_timeout=15))[topic]
            answers.append(got if isinstance(got, dict) else None)
        elif kind == "elect_leaders":
            from confluent_kafka import ElectionType
            from confluent_kafka import TopicPartition as CTopicPartition

            try:
                got = admin.elect_leaders(ElectionType[op["type"]], [CTopicPartition(topic, 0)]).result(20)
                answers.append({f"{tp.topic}-{tp.partition}": err.name() if err else None for tp, err in got.items()})
            except KafkaException as e:
                answers.append({"error": e.args[0].name()})
        elif kind == "create_acls":
            from confluent_kafka.admin import AclBinding, AclOperation, AclPermissionType, ResourcePatternType

            binding = AclBinding(ResourceType.TOPIC, topic, ResourcePatternType.LITERAL, "User:alice", "*",
                                 AclOperation.READ, AclPermissionType.ALLOW)
            answers.append(wait({topic: next(iter(admin.create_acls([binding]).values()))}))
        elif kind == "delete_records":
            from confluent_kafka import TopicPartition as CTopicPartition

            futs = admin.delete_records([CTopicPartition(topic, op.get("partition", 0), op["offset"])])
            (fut,) = futs.values()
            try:
                answers.append({"low_watermark": fut.result(20).low_watermark})
            except KafkaException as e:
                answers.append({"error": e.args[0].name()})
        else:
            raise ValueError(f"unknown op {kind}")
    return {"answers": answers}


# ---- kafka-python ------------------------------------------------------------------------------
def _kp_consumer(spec: dict[str, Any]) -> Any:
    from kafka import KafkaConsumer

    return KafkaConsumer(bootstrap_servers=spec["bootstrap"], group_id=None, enable_auto_commit=False,
                         isolation_level=spec.get("isolation", "read_uncommitted"), request_timeout_ms=30000)


def _kp_read(spec: dict[str, Any]) -> dict[str, Any]:
    from kafka import TopicPartition

    c = _kp_consumer(spec)
    topic, start = spec["topic"], spec.get("offset", 0)
    deadline = time.monotonic() + 10
    while not c.partitions_for_topic(topic) and time.monotonic() < deadline:
        time.sleep(0.1)
    tps = [TopicPartition(topic, p) for p in sorted(c.partitions_for_topic(topic) or [])]
    c.assign(tps)
    for tp in tps:
        c.seek(tp, start)
    ends = {tp.partition: e for tp, e in c.end_offsets(tps).items()}
    out: list[Any] = []
    pending = {tp for tp in tps if ends[tp.partition] > start}
    deadline = time.monotonic() + spec.get("timeout_s", 40)
    while pending and time.monotonic() < deadline:
        for _tp, msgs in c.poll(timeout_ms=500).items():
            out.extend(_rec(m.partition, m.offset, m.key, m.value, m.timestamp) for m in msgs)
        pending = {tp for tp in pending if c.position(tp) < ends[tp.partition]}
    c.close()
    return {"records": out, "ends": {str(p): e for p, e in ends.items()},
            "timed_out": sorted(tp.partition for tp in pending)}


def _kp_times(spec: dict[str, Any]) -> dict[str, Any]:
    from kafka import TopicPartition

    c = _kp_consumer(spec)
    out = []
    for p, ts in spec["times"]:
        tp = TopicPartition(spec["topic"], p)
        found = c.offsets_for_times({tp: ts})[tp]
        out.append(None if found is None else found.offset)
    c.close()
    return {"offsets": out}


def _kp_admin(spec: dict[str, Any]) -> dict[str, Any]:
    from kafka.admin import ConfigResource, ConfigResourceType, KafkaAdminClient
    from kafka.errors import KafkaError

    admin = KafkaAdminClient(bootstrap_servers=spec["bootstrap"], request_timeout_ms=20000)
    answers: list[Any] = []
    for op in spec["ops"]:
        kind, topic = op["op"], op["topic"]
        try:
            if kind == "create":
                r = admin.create_topics({topic: {"num_partitions": op.get("partitions", 1),
                                                 "replication_factor": op.get("rf", 1),
                                                 "configs": op.get("config", {})}})
                answers.append({t["name"]: None for t in r["topics"]})
            elif kind == "describe":
                r = admin.describe_configs([ConfigResource(ConfigResourceType.TOPIC, topic)], config_filter="all")
                answers.append({k: [v["value"], v["config_source"]] for k, v in r["topic"][topic].items()})
            elif kind == "describe_broker":  # "topic" names the broker id
                r = admin.describe_configs([ConfigResource(ConfigResourceType.BROKER, topic)], config_filter="all")
                answers.append({k: [v["value"], v["config_source"]] for k, v in r["broker"][topic].items()})
            elif kind == "alter":
                admin.alter_configs([ConfigResource(ConfigResourceType.TOPIC, topic, op["configs"])],
                                    incremental=op.get("incremental"))
                answers.append(None)
            elif kind == "delete":
                admin.delete_topics([topic])
                answers.append(None)
            elif kind == "describe_producers":
                from kafka import TopicPartition

                tp = TopicPartition(topic, op.get("partition", 0))
                state = admin.describe_producers([tp])[tp]
                answers.append([[p.producer_id, p.producer_epoch, p.last_sequence, p.current_transaction_start_offset]
                                for p in state.active_producers])
            elif kind == "describe_log_dirs":
                got = admin.describe_log_dirs({topic: [0]})
                answers.append([{"broker": b["broker"], "dirs": [
                    {"error_code": d["error_code"], "log_dir": d["log_dir"],
                     "sizes": {f"{t['name']}-{p['partition_index']}": p["partition_size"]
                               for t in d["topics"] for p in t["partitions"]}} for d in b["log_dirs"]]}
                    for b in got])
            elif kind == "list_config_resources":  # "types": resource type names (None: every type)
                answers.append(admin.list_config_resources(op.get("types")))
            elif kind == "describe_topic_partitions":
                got = admin.describe_topic_partitions([topic], response_partition_limit=op.get("limit", 2000))
                answers.append({"next_cursor": got["next_cursor"], "topics": [
                    [t["name"], t["error_code"], [[p["partition_index"], p["leader_id"], p["replica_nodes"]]
                                                  for p in t["partitions"]]] for t in got["topics"]]})
            elif kind == "delete_records":
                from kafka import TopicPartition

                tp = TopicPartition(topic, op.get("partition", 0))
                got = admin.delete_records({tp: op["offset"]}, timeout_ms=20000)
                answers.append({"low_watermark": got[tp]["low_watermark"]})
            elif kind == "list_reassignments":
                listed = admin.list_partition_reassignments(op.get("partitions"))
                answers.append({f"{tp.topic}-{tp.partition}": r for tp, r in listed.items()})
            elif kind == "alter_reassignments":  # "replicas": partition -> broker ids (None: cancel)
                from kafka import TopicPartition

                got = admin.alter_partition_reassignments(
                    {TopicPartition(topic, int(p)): r for p, r in op["replicas"].items()})
                answers.append({f"{tp.topic}-{tp.partition}": None if err is None else err.__name__
                                for tp, err in got.items()})
            else:
                raise ValueError(f"unknown op {kind}")
        except KafkaError as e:
            answers.append({"error": type(e).__name__, "errno": getattr(e, "errno", None)})
    admin.close()
    return {"answers": answers}


# ---- aiokafka ---------------------------------------------------------------------------------
async def _aio_read(spec: dict[str, Any]) -> dict[str, Any]:
    from aiokafka import AIOKafkaConsumer, TopicPartition

    c = AIOKafkaConsumer(bootstrap_servers=spec["bootstrap"], enable_auto_commit=False,
                         isolation_level=spec.get("isolation", "read_uncommitted"), request_timeout_ms=30000)
    await c.start()
    try:
        topic, start = spec["topic"], spec.get("offset", 0)
        # partitions_for_topic reads cached metadata, which holds no topic before an assignment
        md = await c._client.fetch_all_metadata()
        parts = sorted(md.partitions_for_topic(topic) or [])
        tps = [TopicPartition(topic, p) for p in parts]
        c.assign(tps)
        for tp in tps:
            c.seek(tp, start)
        ends = {tp.partition: e for tp, e in (await c.end_offsets(tps)).items()}
        out: list[Any] = []
        pending = {tp for tp in tps if ends[tp.partition] > start}
        deadline = time.monotonic() + spec.get("timeout_s", 40)
        while pending and time.monotonic() < deadline:
            for _tp, msgs in (await c.getmany(timeout_ms=500)).items():
                out.extend(_rec(m.partition, m.offset, m.key, m.value, m.timestamp) for m in msgs)
            pending = {tp for tp in pending if await c.position(tp) < ends[tp.partition]}
        return {"records": out, "ends": {str(p): e for p, e in ends.items()},
                "timed_out": sorted(tp.partition for tp in pending)}
    finally:
        await c.stop()


async def _aio_times(spec: dict[str, Any]) -> dict[str, Any]:
    from aiokafka import AIOKafkaConsumer, TopicPartition

    c = AIOKafkaConsumer(bootstrap_servers=spec["bootstrap"], enable_auto_commit=False,
                         isolation_level=spec.get("isolation", "read_uncommitted"))
    await c.start()
    try:
        out = []
        for p, ts in spec["times"]:
            tp = TopicPartition(spec["topic"], p)
            found = (await c.offsets_for_times({tp: ts}))[tp]
            out.append(None if found is None else found.offset)
        return {"offsets": out}
    finally:
        await c.stop()


async def _aio_admin(spec: dict[str, Any]) -> dict[str, Any]:
    from aiokafka import TopicPartition
    from aiokafka.admin import AIOKafkaAdminClient, RecordsToDelete
    from aiokafka.errors import KafkaError

    admin = AIOKafkaAdminClient(bootstrap_servers=spec["bootstrap"], request_timeout_ms=20000)
    await admin.start()
    answers: list[Any] = []
    try:
        for op in spec["ops"]:
            if op["op"] != "delete_records":
                raise ValueError(f"unknown op {op['op']}")
            tp = TopicPartition(op["topic"], op.get("partition", 0))
            try:
                got = await admin.delete_records({tp: RecordsToDelete(op["offset"])})
                answers.append({"low_watermark": got[tp]})
            except KafkaError as e:
                answers.append({"error": type(e).__name__, "errno": getattr(e, "errno", None)})
    finally:
        await admin.close()
    return {"answers": answers}


_ACTIONS: dict[tuple[str, str], Any] = {
    ("confluent", "read_all"): _confluent_read, ("confluent", "offsets_for_times"): _confluent_times,
    ("confluent", "admin"): _confluent_admin,
    ("kafka-python", "read_all"): _kp_read, ("kafka-python", "offsets_for_times"): _kp_times,
    ("kafka-python", "admin"): _kp_admin,
    ("aiokafka", "read_all"): lambda s: asyncio.run(_aio_read(s)),
    ("aiokafka", "offsets_for_times"): lambda s: asyncio.run(_aio_times(s)),
    ("aiokafka", "admin"): lambda s: asyncio.run(_aio_admin(s)),
}


def _dispatch(action: str) -> Any:
    return lambda spec: _ACTIONS[spec["library"], action](spec)


if __name__ == "__main__":
    main({a: _dispatch(a) for a in ("read_all", "offsets_for_times", "admin")})
