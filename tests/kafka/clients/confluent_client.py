"""confluent-kafka (librdkafka) as a Kafka client of the tests: produce / consume / admin actions, JSON in and out."""

from __future__ import annotations

import time
from typing import Any

from common import dec, enc, main
from confluent_kafka import Consumer, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic


def _conf(spec: dict[str, Any]) -> dict[str, Any]:
    conf: dict[str, Any] = {"bootstrap.servers": spec["bootstrap"], "socket.timeout.ms": 10000,
                            "api.version.request.timeout.ms": 10000}
    sasl = spec.get("sasl")
    if sasl:
        conf.update({"security.protocol": "SASL_SSL" if spec.get("tls") else "SASL_PLAINTEXT",
                     "sasl.mechanism": sasl["mechanism"], "sasl.username": sasl["username"],
                     "sasl.password": sasl["password"]})
    elif spec.get("tls"):
        conf["security.protocol"] = "SSL"
    if spec.get("tls"):
        conf["ssl.ca.location"] = spec["tls"]["ca"]
        conf["ssl.endpoint.identification.algorithm"] = "none"
    conf.update(spec.get("conf", {}))
    return conf


def produce(spec: dict[str, Any]) -> dict[str, Any]:
    conf = _conf(spec)
    conf.update({"compression.type": spec.get("codec", "none"), "acks": str(spec.get("acks", "all")),
                 "enable.idempotence": bool(spec.get("idempotent", False)), "linger.ms": spec.get("linger_ms", 5),
                 "message.timeout.ms": int(spec.get("timeout_s", 30) * 1000)})
    producer = Producer(conf)
    results: list[Any] = [None] * len(spec["records"])

    def done(i: int) -> Any:
        def cb(err: Any, msg: Any) -> None:
            results[i] = {"error": str(err)} if err else [msg.partition(), msg.offset()]
        return cb

    for i, r in enumerate(spec["records"]):
        kw: dict[str, Any] = {"key": enc(r.get("key")), "value": enc(r.get("value")), "on_delivery": done(i)}
        if r.get("partition") is not None:
            kw["partition"] = r["partition"]
        if r.get("headers"):
            kw["headers"] = [(k, enc(v)) for k, v in r["headers"]]
        while True:
            try:
                producer.produce(spec["topic"], **kw)
                break
            except BufferError:
                producer.poll(0.1)
    left = producer.flush(spec.get("timeout_s", 30))
    return {"offsets": results, "unflushed": left}


def consume(spec: dict[str, Any]) -> dict[str, Any]:
    conf = _conf(spec)
    conf.update({"group.id": spec.get("group", "tests-unused-group"), "enable.auto.commit": False,
                 "isolation.level": spec.get("isolation", "read_uncommitted"), "enable.partition.eof": True,
                 "auto.offset.reset": "earliest"})
    consumer = Consumer(conf)
    topic = spec["topic"]
    parts = spec.get("partitions")
    if parts is None:
        md = consumer.list_topics(topic, timeout=10)
        parts = sorted(md.topics[topic].partitions)
    start = spec.get("offset", 0)
    ends = {p: consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=10)[1] for p in parts}
    consumer.assign([TopicPartition(topic, p, start) for p in parts])
    out: list[dict[str, Any]] = []
    pending = {p for p in parts if ends[p] > start}
    deadline = time.monotonic() + spec.get("timeout_s", 30)
    while pending and time.monotonic() < deadline:
        msg = consumer.poll(0.5)
        if msg is None:
            continue
        if msg.error():
            if msg.error().code() == -191:  # _PARTITION_EOF
                if msg.offset() >= ends[msg.partition()]:
                    pending.discard(msg.partition())
                continue
            raise KafkaException(msg.error())
        out.append({"partition": msg.partition(), "offset": msg.offset(), "key": dec(msg.key()),
                    "value": dec(msg.value()), "timestamp": msg.timestamp()[1],
                    "headers": [[k, dec(v)] for k, v in (msg.headers() or [])]})
        if msg.offset() + 1 >= ends[msg.partition()]:
            pending.discard(msg.partition())
    consumer.close()
    return {"records": out, "end": {str(p): e for p, e in ends.items()}, "timed_out": sorted(pending)}


def create_topic(spec: dict[str, Any]) -> dict[str, Any]:
    admin = AdminClient(_conf(spec))
    fut = admin.create_topics([NewTopic(spec["topic"], spec.get("partitions", 1), replication_factor=1,
                                        config=spec.get("config", {}))], request_timeout=15)
    errors = {}
    for name, f in fut.items():
        try:
            f.result(20)
        except KafkaException as e:
            errors[name] = e.args[0].name()
    return {"errors": errors}


def metadata(spec: dict[str, Any]) -> dict[str, Any]:
    admin = AdminClient(_conf(spec))
    md = admin.list_topics(timeout=10)
    return {"brokers": {str(b.id): [b.host, b.port] for b in md.brokers.values()},
            "topics": {t: {str(p.id): p.leader for p in v.partitions.values()} for t, v in md.topics.items()}}


def _mechanism(name: str) -> Any:
    from confluent_kafka.admin import ScramMechanism

    return ScramMechanism[name.replace("-", "_")]


def scram_alter(spec: dict[str, Any]) -> dict[str, Any]:
    """AlterUserScramCredentials: ``upsert`` [[user, mechanism, password, iterations]], ``delete`` [[user, mechanism]];
    answers user -> the error's name or None."""
    from confluent_kafka.admin import (
        ScramCredentialInfo,
        UserScramCredentialDeletion,
        UserScramCredentialUpsertion,
    )

    alterations: list[Any] = [UserScramCredentialUpsertion(u, ScramCredentialInfo(_mechanism(m), it), p.encode())
                              for u, m, p, it in spec.get("upsert", [])]
    alterations += [UserScramCredentialDeletion(u, _mechanism(m)) for u, m in spec.get("delete", [])]
    out: dict[str, Any] = {}
    admin = AdminClient(_conf(spec))  # held until the answers came: a destroyed client fails its futures
    for user, fut in admin.alter_user_scram_credentials(alterations, request_timeout=15).items():
        try:
            fut.result(20)
            out[user] = None
        except KafkaException as e:
            out[user] = e.args[0].name()
    return {"results": out}


def scram_describe(spec: dict[str, Any]) -> dict[str, Any]:
    """DescribeUserScramCredentials of ``users`` (all when absent): user -> [[mechanism, iterations]] or the error."""
    admin = AdminClient(_conf(spec))
    users = spec.get("users")
    out: dict[str, Any] = {}
    if users is None:
        described = admin.describe_user_scram_credentials(request_timeout=15).result(20)
        futures: dict[str, Any] = {}
    else:
        described = {}
        futures = admin.describe_user_scram_credentials(users, request_timeout=15)
    for user, fut in futures.items():
        try:
            described[user] = fut.result(20)
        except KafkaException as e:
            out[user] = e.args[0].name()
    for user, d in described.items():
        out[user] = sorted([i.mechanism.name.replace("_", "-"), i.iterations] for i in d.scram_credential_infos)
    return {"users": out}


if __name__ == "__main__":
    main({"produce": produce, "consume": consume, "create_topic": create_topic, "metadata": metadata,
          "scram_alter": scram_alter, "scram_describe": scram_describe})
