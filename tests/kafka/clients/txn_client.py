"""confluent-kafka (librdkafka) transactional producers for the tests: transactions, zombies, consume-transform-produce. JSON in and out."""

from __future__ import annotations

import time
from typing import Any

from common import enc, main
from confluent_kafka import Consumer, KafkaError, Producer, TopicPartition


def _conf(spec: dict[str, Any], tid: str) -> dict[str, Any]:
    conf: dict[str, Any] = {"bootstrap.servers": spec["bootstrap"], "transactional.id": tid,
                            "socket.timeout.ms": 10000, "linger.ms": 2,
                            "transaction.timeout.ms": int(spec.get("txn_timeout_ms", 60000))}
    sasl = spec.get("sasl")
    if sasl:
        conf.update({"security.protocol": "SASL_PLAINTEXT", "sasl.mechanism": sasl["mechanism"],
                     "sasl.username": sasl["username"], "sasl.password": sasl["password"]})
    conf.update(spec.get("conf", {}))
    return conf


def transactions(spec: dict[str, Any]) -> dict[str, Any]:
    """``transactions``: [{"records": [[partition, key, value], ...], "commit": bool}, ...] in one producer."""
    p = Producer(_conf(spec, spec["transactional_id"]))
    p.init_transactions(30)
    out = []
    for txn in spec["transactions"]:
        p.begin_transaction()
        for part, key, value in txn["records"]:
            p.produce(spec["topic"], key=enc(key), value=enc(value), partition=part)
        p.flush(30)
        if txn["commit"]:
            p.commit_transaction(30)
        else:
            p.abort_transaction(30)
        out.append("committed" if txn["commit"] else "aborted")
    return {"transactions": out}


def interleaved(spec: dict[str, Any]) -> dict[str, Any]:
    """Two producers (two transactional ids) with transactions open at once on the same partitions."""
    a = Producer(_conf(spec, spec["transactional_id"] + "-a"))
    b = Producer(_conf(spec, spec["transactional_id"] + "-b"))
    for p in (a, b):
        p.init_transactions(30)
    for i in range(spec.get("rounds", 3)):
        a.begin_transaction()
        b.begin_transaction()
        for part in range(spec.get("partitions", 4)):
            a.produce(spec["topic"], key=enc(f"a{i}-{part}"), value=enc(f"commit-{i}"), partition=part)
            b.produce(spec["topic"], key=enc(f"b{i}-{part}"), value=enc(f"abort-{i}"), partition=part)
        a.flush(30)
        b.flush(30)
        if i % 2 == 0:
            b.abort_transaction(30)
            a.commit_transaction(30)
        else:
            a.commit_transaction(30)
            b.abort_transaction(30)
    return {"ok": True}


def zombie(spec: dict[str, Any]) -> dict[str, Any]:
    """Producer A opens a transaction, producer B inits with the same id: A's sends and commit are fenced."""
    tid = spec["transactional_id"]
    errors: list[str] = []
    a = Producer({**_conf(spec, tid), "error_cb": lambda e: errors.append(str(e))})
    a.init_transactions(30)
    a.begin_transaction()
    a.produce(spec["topic"], key=b"zombie-1", value=b"from-a", partition=0)
    a.flush(30)
    b = Producer(_conf(spec, tid))
    b.init_transactions(30)
    out: dict[str, Any] = {}
    delivery: list[str] = []
    try:
        a.produce(spec["topic"], key=b"zombie-2", value=b"from-a", partition=1,
                  on_delivery=lambda err, msg: delivery.append(str(err) if err else "ok"))
        a.flush(5)
        out["a_send"] = delivery[-1] if delivery else "undelivered"
    except Exception as e:  # noqa: BLE001 - the answer
        out["a_send"] = str(e)
    try:
        a.commit_transaction(5)
        out["a_commit"] = "committed"
    except Exception as e:  # noqa: BLE001 - the answer
        out["a_commit"] = str(e)
    b.begin_transaction()
    b.produce(spec["topic"], key=b"live-1", value=b"from-b", partition=0)
    b.commit_transaction(30)
    out["b_commit"] = "committed"
    out["a_errors"] = sorted(set(errors))
    return out


def eos(spec: dict[str, Any]) -> dict[str, Any]:
    """Consume-transform-produce with send_offsets_to_transaction until every input offset is consumed.

    Any error (the node is killed and restarted under us) aborts the transaction, or rebuilds the
    producer and consumer when the error is fatal, and goes on from the committed offsets.
    """
    topic_in, topic_out, group = spec["input"], spec["output"], spec["group"]
    total = spec["expected"]
    deadline = time.monotonic() + spec.get("timeout_s", 90)
    restarts = aborts = commits = 0
    consumer = producer = None
    done = 0
    while time.monotonic() < deadline:
        try:
            if producer is None:
                producer = Producer(_conf(spec, spec["transactional_id"]))
                producer.init_transactions(20)
                consumer = Consumer({"bootstrap.servers": spec["bootstrap"], "group.id": group,
                                     "enable.auto.commit": False, "isolation.level": "read_committed",
                                     "auto.offset.reset": "earliest", "socket.timeout.ms": 10000,
                                     "session.timeout.ms": 6000, "heartbeat.interval.ms": 1000})
                consumer.assign([TopicPartition(topic_in, p) for p in range(spec.get("partitions", 1))])
                committed = consumer.committed([TopicPartition(topic_in, p)
                                                for p in range(spec.get("partitions", 1))], timeout=20)
                consumer.assign([TopicPartition(topic_in, t.partition, t.offset if t.offset >= 0 else 0)
                                 for t in committed])
                done = sum(max(t.offset, 0) for t in committed)
            if done >= total:
                break
            msgs = consumer.consume(spec.get("batch", 20), 1.0)
            msgs = [m for m in msgs if not m.error()]
            if not msgs:
                continue
            producer.begin_transaction()
            for m in msgs:
                producer.produce(topic_out, key=m.key(), value=b"out:" + (m.value() or b""), partition=m.partition())
            positions = consumer.position(consumer.assignment())
            producer.send_offsets_to_transaction(positions, consumer.consumer_group_metadata(), 20)
            producer.commit_transaction(20)
            commits += 1
            done = sum(max(t.offset, 0) for t in positions)
        except Exception as e:  # noqa: BLE001 - the node is being killed: recover as Kafka's docs say
            err = e.args[0] if e.args and isinstance(e.args[0], KafkaError) else None
            if err is not None and err.txn_requires_abort() and producer is not None:
                try:
                    producer.abort_transaction(20)
                    aborts += 1
                    committed = consumer.committed(consumer.assignment(), timeout=20)
                    for t in committed:
                        consumer.seek(TopicPartition(t.topic, t.partition, t.offset if t.offset >= 0 else 0))
                    continue
                except Exception:  # noqa: BLE001 - fall through to a rebuild
                    pass
            restarts += 1
            for c in (consumer,):
                try:
                    if c is not None:
                        c.close()
                except Exception:  # noqa: BLE001
                    pass
            consumer = producer = None
            time.sleep(0.3)
    if consumer is not None:
        consumer.close()
    return {"done": done, "commits": commits, "aborts": aborts, "restarts": restarts}


def bench(spec: dict[str, Any]) -> dict[str, Any]:
    """``count`` transactions of ``records`` records each (round robin over ``partitions``): the time of each
    commit_transaction call and the whole run."""
    p = Producer({**_conf(spec, spec["transactional_id"]), "linger.ms": spec.get("linger_ms", 5)})
    p.init_transactions(30)
    value = b"x" * int(spec.get("value_bytes", 100))
    parts = int(spec.get("partitions", 1))
    commits: list[float] = []
    started = time.perf_counter()
    for t in range(int(spec["count"])):
        p.begin_transaction()
        for i in range(int(spec.get("records", 100))):
            p.produce(spec["topic"], key=b"k%d-%d" % (t, i), value=value, partition=i % parts)
        c0 = time.perf_counter()
        p.commit_transaction(30)
        commits.append(time.perf_counter() - c0)
    return {"seconds": time.perf_counter() - started, "commit_s": commits}


if __name__ == "__main__":
    main({"transactions": transactions, "interleaved": interleaved, "zombie": zombie, "eos": eos, "bench": bench})
