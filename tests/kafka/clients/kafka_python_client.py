"""kafka-python as a Kafka client of the tests: produce / consume actions, JSON in and out."""

from __future__ import annotations

import time
from typing import Any

from common import dec, enc, main
from kafka import KafkaConsumer, KafkaProducer, TopicPartition


def _conf(spec: dict[str, Any]) -> dict[str, Any]:
    conf: dict[str, Any] = {"bootstrap_servers": spec["bootstrap"], "request_timeout_ms": 30000}
    sasl = spec.get("sasl")
    if sasl:
        conf.update({"security_protocol": "SASL_SSL" if spec.get("tls") else "SASL_PLAINTEXT",
                     "sasl_mechanism": sasl["mechanism"], "sasl_plain_username": sasl["username"],
                     "sasl_plain_password": sasl["password"]})
    elif spec.get("tls"):
        conf["security_protocol"] = "SSL"
    if spec.get("tls"):
        conf.update({"ssl_cafile": spec["tls"]["ca"], "ssl_check_hostname": False})
    conf.update(spec.get("conf", {}))
    return conf


def produce(spec: dict[str, Any]) -> dict[str, Any]:
    codec = spec.get("codec", "none")
    acks = spec.get("acks", "all")
    producer = KafkaProducer(**_conf(spec), compression_type=None if codec == "none" else codec,
                             acks=acks if acks == "all" else int(acks),
                             enable_idempotence=bool(spec.get("idempotent", False)),
                             linger_ms=spec.get("linger_ms", 5))
    futures = []
    for r in spec["records"]:
        futures.append(producer.send(spec["topic"], key=enc(r.get("key")), value=enc(r.get("value")),
                                     partition=r.get("partition"),
                                     headers=[(k, enc(v)) for k, v in r.get("headers", [])]))
    producer.flush(spec.get("timeout_s", 30))
    results: list[Any] = []
    for f in futures:
        try:
            md = f.get(timeout=spec.get("timeout_s", 30))
            results.append([md.partition, md.offset])
        except Exception as e:  # noqa: BLE001 - reported per record
            results.append({"error": f"{type(e).__name__}: {e}"})
    producer.close(5)
    return {"offsets": results}


def consume(spec: dict[str, Any]) -> dict[str, Any]:
    consumer = KafkaConsumer(**_conf(spec), group_id=None, enable_auto_commit=False,
                             isolation_level=spec.get("isolation", "read_uncommitted"),
                             auto_offset_reset="earliest")
    topic = spec["topic"]
    parts = spec.get("partitions")
    if parts is None:
        deadline = time.monotonic() + 10
        while not consumer.partitions_for_topic(topic) and time.monotonic() < deadline:
            time.sleep(0.1)
        parts = sorted(consumer.partitions_for_topic(topic) or [])
    tps = [TopicPartition(topic, p) for p in parts]
    consumer.assign(tps)
    start = spec.get("offset", 0)
    for tp in tps:
        consumer.seek(tp, start)
    ends = {tp.partition: e for tp, e in consumer.end_offsets(tps).items()}
    out: list[dict[str, Any]] = []
    deadline = time.monotonic() + spec.get("timeout_s", 30)
    pending = {tp for tp in tps if ends[tp.partition] > start}
    while pending and time.monotonic() < deadline:
        for msgs in consumer.poll(timeout_ms=500).values():
            for m in msgs:
                out.append({"partition": m.partition, "offset": m.offset, "key": dec(m.key), "value": dec(m.value),
                            "timestamp": m.timestamp, "headers": [[k, dec(v)] for k, v in (m.headers or [])]})
        for tp in list(pending):
            if consumer.position(tp) >= ends[tp.partition]:
                pending.discard(tp)
    consumer.close()
    return {"records": out, "end": {str(p): e for p, e in ends.items()},
            "timed_out": sorted(tp.partition for tp in pending)}


def _admin(spec: dict[str, Any]) -> Any:
    from kafka.admin import KafkaAdminClient

    conf = _conf(spec)
    conf.pop("max_block_ms", None)
    return KafkaAdminClient(**conf)


def scram_alter(spec: dict[str, Any]) -> dict[str, Any]:
    """AlterUserScramCredentials (see confluent_client.scram_alter); answers user -> error message or None."""
    from kafka.admin import UserScramCredentialDeletion, UserScramCredentialUpsertion

    alterations: list[Any] = [UserScramCredentialUpsertion(u, m, p, iterations=it)
                              for u, m, p, it in spec.get("upsert", [])]
    alterations += [UserScramCredentialDeletion(u, m) for u, m in spec.get("delete", [])]
    admin = _admin(spec)
    try:
        return {"results": admin.alter_user_scram_credentials(alterations)}
    finally:
        admin.close()


def scram_describe(spec: dict[str, Any]) -> dict[str, Any]:
    """DescribeUserScramCredentials: user -> [[mechanism, iterations]], or the error message."""
    admin = _admin(spec)
    try:
        described = admin.describe_user_scram_credentials(spec.get("users"))
    finally:
        admin.close()
    return {"users": {u: d["error"] or sorted([i["mechanism"].name.replace("_", "-"), i["iterations"]]
                                            for i in d["credential_infos"]) for u, d in described.items()}}


if __name__ == "__main__":
    main({"produce": produce, "consume": consume, "scram_alter": scram_alter, "scram_describe": scram_describe})
