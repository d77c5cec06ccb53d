"""One member of a consumer group (confluent-kafka, kafka-python or aiokafka), run in its own process for the group tests.

``group_member.py '{"client": ..., "bootstrap": ..., "topic": ..., "group": ..., "stop_file": ...}'`` subscribes,
prints one JSON line per event as it happens (so a member killed with SIGKILL has told what it did):
``{"event": "assigned", "partitions": [...]}``, ``{"event": "record", "p": .., "o": .., "v": ..}``,
``{"event": "commit", "offsets": {p: next offset}}`` after each synchronous commit succeeded,
``{"event": "commit_failed", "error": ...}``; it commits after every poll that returned records, and on the
stop file's appearance (or after ``expect`` records) closes, leaving the group, and prints ``{"event": "closed"}``.
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
import time
from typing import Any

_seen = [0]


def emit(**event: Any) -> None:
    if event["event"] == "record":
        _seen[0] += 1
    sys.stdout.write(json.dumps(event) + "\n")
    sys.stdout.flush()


def _stop(spec: dict[str, Any], started: float) -> bool:
    """The stop file appeared, ``expect`` records were consumed (and committed: checked before the next poll), or
    ``max_s`` passed."""
    if spec.get("expect") is not None and _seen[0] >= spec["expect"]:
        return True
    return (spec.get("stop_file") is not None and os.path.exists(spec["stop_file"])) or \
        time.monotonic() - started > spec.get("max_s", 120)


def run_confluent(spec: dict[str, Any]) -> None:
    from confluent_kafka import Consumer, KafkaException, TopicPartition

    conf = {"bootstrap.servers": spec["bootstrap"], "group.id": spec["group"], "enable.auto.commit": False,
            "auto.offset.reset": "earliest", "session.timeout.ms": spec.get("session_timeout_ms", 6000),
            "heartbeat.interval.ms": spec.get("heartbeat_ms", 1000), "max.poll.interval.ms": 60000,
            "topic.metadata.refresh.interval.ms": 2000, "socket.timeout.ms": 10000}
    if spec.get("instance_id"):
        conf["group.instance.id"] = spec["instance_id"]
    conf.update(spec.get("conf", {}))
    c = Consumer(conf)
    c.subscribe([spec["topic"]], on_assign=lambda _c, ps: emit(event="assigned", partitions=[p.partition for p in ps]),
                on_revoke=lambda _c, ps: emit(event="revoked", partitions=[p.partition for p in ps]))
    started = time.monotonic()
    while not _stop(spec, started):
        msgs = c.consume(num_messages=100, timeout=0.2)
        nxt: dict[int, int] = {}
        for m in msgs:
            if m.error():
                continue
            emit(event="record", p=m.partition(), o=m.offset(), v=m.value().decode())
            nxt[m.partition()] = m.offset() + 1
        if nxt:
            try:
                c.commit(offsets=[TopicPartition(spec["topic"], p, o) for p, o in nxt.items()], asynchronous=False)
                emit(event="commit", offsets=nxt)
            except KafkaException as e:
                emit(event="commit_failed", error=str(e))
    c.close()
    emit(event="closed")


def run_kafka_python(spec: dict[str, Any]) -> None:
    from kafka import KafkaConsumer, TopicPartition
    from kafka.errors import KafkaError
    from kafka.structs import OffsetAndMetadata

    c = KafkaConsumer(spec["topic"], bootstrap_servers=spec["bootstrap"], group_id=spec["group"],
                      enable_auto_commit=False, auto_offset_reset="earliest",
                      session_timeout_ms=spec.get("session_timeout_ms", 6000),
                      heartbeat_interval_ms=spec.get("heartbeat_ms", 1000), max_poll_interval_ms=60000,
                      metadata_max_age_ms=2000, group_instance_id=spec.get("instance_id"))
    started = time.monotonic()
    assigned: set[int] = set()
    while not _stop(spec, started):
        batches = c.poll(timeout_ms=200)
        now = {tp.partition for tp in c.assignment()}
        if now != assigned:
            assigned = now
            emit(event="assigned", partitions=sorted(now))
        nxt: dict[int, int] = {}
        for tp, msgs in batches.items():
            for m in msgs:
                emit(event="record", p=tp.partition, o=m.offset, v=m.value.decode())
                nxt[tp.partition] = m.offset + 1
        if nxt:
            try:
                c.commit({TopicPartition(spec["topic"], p): OffsetAndMetadata(o, "", -1) for p, o in nxt.items()})
                emit(event="commit", offsets=nxt)
            except KafkaError as e:
                emit(event="commit_failed", error=repr(e))
    c.close()
    emit(event="closed")


async def _aiokafka(spec: dict[str, Any]) -> None:
    from aiokafka import AIOKafkaConsumer, TopicPartition
    from aiokafka.errors import KafkaError

    c = AIOKafkaConsumer(spec["topic"], bootstrap_servers=spec["bootstrap"], group_id=spec["group"],
                         enable_auto_commit=False, auto_offset_reset="earliest",
                         session_timeout_ms=spec.get("session_timeout_ms", 6000),
                         heartbeat_interval_ms=spec.get("heartbeat_ms", 1000), max_poll_interval_ms=60000,
                         metadata_max_age_ms=2000)
    await c.start()
    started = time.monotonic()
    assigned: set[int] = set()
    while not _stop(spec, started):
        batches = await c.getmany(timeout_ms=200)
        now = {tp.partition for tp in c.assignment()}
        if now != assigned:
            assigned = now
            emit(event="assigned", partitions=sorted(now))
        nxt: dict[int, int] = {}
        for tp, msgs in batches.items():
            for m in msgs:
                emit(event="record", p=tp.partition, o=m.offset, v=m.value.decode())
                nxt[tp.partition] = m.offset + 1
        if nxt:
            try:
                await c.commit({TopicPartition(spec["topic"], p): o for p, o in nxt.items()})
                emit(event="commit", offsets=nxt)
            except KafkaError as e:
                emit(event="commit_failed", error=repr(e))
    await c.stop()
    emit(event="closed")


if __name__ == "__main__":
    spec = json.loads(sys.argv[1])
    {"confluent": run_confluent, "kafka-python": run_kafka_python,
     "aiokafka": lambda s: asyncio.run(_aiokafka(s))}[spec["client"]](spec)
