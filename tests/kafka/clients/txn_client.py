"""confluent-kafka (librdkafka) transactional producers for the tests: transactions, zombies, consume-transform-produce. JSON in and out."""

from __future__ import annotations

import json
import os
import sys
import threading
import time
from collections.abc import Callable
from typing import Any

from common import enc, main
from confluent_kafka import Consumer, KafkaError, Producer, TopicPartition, libversion


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


#: librdkafka >= 2.10 re-bootstraps when every broker it knows is down, which on a one-node cluster is every
#: kill: it decommissions that broker, and the group-coordinator cache of the producer may keep pointing at the
#: decommissioned handle; send_offsets_to_transaction then waits for that handle to change state, forever and past
#: its own timeout (rd_kafka_coord_req_fsm; upstream: "send_offsets_to_transaction() hangs when the group
#: coordinator is decommissioned"). With a single bootstrap address re-bootstrapping gains nothing: turned off.
NO_REBOOTSTRAP = {"metadata.recovery.strategy": "none"}
#: how long past its own timeout a librdkafka call may take before its handle is given up as stuck: a request
#: in flight when the timeout passes still waits for its socket.timeout.ms (10 s here) to fail
STUCK_GRACE_S = 15.0
#: consumer.close() has no timeout of its own: how long it may take
CLOSE_S = 10.0
#: every librdkafka handle the eos action made: never destroyed (a destroy can wait on a stuck broker thread
#: forever), the process leaves with os._exit once it printed its answer
_HANDLES: list[Any] = []


class Stuck(Exception):
    """A librdkafka call that did not return within its timeout (plus STUCK_GRACE_S): its handle is abandoned."""


def _bounded(what: str, limit_s: float, fn: Callable[..., Any], *args: Any) -> Any:
    """``fn(*args)`` on a helper thread, waiting at most ``limit_s``; Stuck when it is still blocked then."""
    box: dict[str, Any] = {}

    def run() -> None:
        try:
            box["value"] = fn(*args)
        except BaseException as e:  # noqa: BLE001 - re-raised on the caller's thread
            box["error"] = e

    t = threading.Thread(target=run, name=f"librdkafka-{what}", daemon=True)
    t.start()
    t.join(max(limit_s, 0.1))
    if t.is_alive():
        raise Stuck(f"{what} still blocked after {limit_s:.1f}s")
    if "error" in box:
        raise box["error"]
    return box.get("value")


def _bounded_by(api_s: float) -> Callable[..., Any]:
    """``bounded(what, fn, timeout=t)``: ``fn(t)`` through :func:`_bounded`, given up STUCK_GRACE_S after ``t``."""
    def bounded(what: str, fn: Callable[..., Any], *, timeout: float = api_s) -> Any:
        return _bounded(what, timeout + STUCK_GRACE_S, fn, timeout)
    return bounded


def _eos_handles(spec: dict[str, Any]) -> tuple[Any, Any]:
    """A transactional producer and a read_committed consumer of ``spec["group"]`` (kept in _HANDLES), with
    NO_REBOOTSTRAP when this librdkafka knows the property (2.10 and later); ``spec["conf"]`` goes over both."""
    off = NO_REBOOTSTRAP if libversion()[1] >= 0x020A0000 else {}
    producer = Producer({**_conf(spec, spec["transactional_id"]), **off, **spec.get("conf", {})})
    consumer = Consumer({"bootstrap.servers": spec["bootstrap"], "group.id": spec["group"],
                         "enable.auto.commit": False, "isolation.level": "read_committed",
                         "auto.offset.reset": "earliest", "socket.timeout.ms": 10000, "session.timeout.ms": 6000,
                         "heartbeat.interval.ms": 1000, **off, **spec.get("conf", {})})
    _HANDLES.extend((producer, consumer))
    return producer, consumer


def _transform(producer: Any, consumer: Any, msgs: list[Any], topic_out: str, api_s: float,
               bounded: Callable[..., Any]) -> list[TopicPartition]:
    """One consume-transform-produce transaction over ``msgs``, committed with the consumer's positions (which it
    answers); ``bounded(what, fn, timeout=...)`` runs each blocking call.

    Only valid positions: a partition the consumer has not read since its assign or seek has none (-1001),
    and its committed offset stays as it is."""
    producer.begin_transaction()
    for m in msgs:
        producer.produce(topic_out, key=m.key(), value=b"out:" + (m.value() or b""), partition=m.partition())
    positions = [t for t in consumer.position(consumer.assignment()) if t.offset >= 0]
    meta = consumer.consumer_group_metadata()
    bounded("send_offsets_to_transaction",
            lambda t: producer.send_offsets_to_transaction(positions, meta, t), timeout=api_s)
    bounded("commit_transaction", producer.commit_transaction, timeout=api_s)
    return positions


def eos(spec: dict[str, Any]) -> dict[str, Any]:
    """Consume-transform-produce with send_offsets_to_transaction until every input offset is consumed.

    Any error (the node is killed and restarted under us) aborts the transaction as Kafka's docs say
    (an abortable error: abort_transaction, then rewind to the committed offsets; a fatal one: a new
    producer and consumer). A call that outlives its timeout counts as fatal: its producer and consumer
    are abandoned (never called or destroyed again; the new producer's InitProducerId fences the old
    one). The action always answers by ``timeout_s`` (plus the last call's grace): a watchdog prints the
    answer so far as an error and ends the process if the loop itself cannot.
    """
    topic_in, topic_out = spec["input"], spec["output"]
    total = spec["expected"]
    parts = [TopicPartition(topic_in, p) for p in range(spec.get("partitions", 1))]
    api_s = 20.0
    deadline = time.monotonic() + spec.get("timeout_s", 90)
    stats = {"done": 0, "commits": 0, "aborts": 0, "restarts": 0, "stuck": 0}
    errors: list[str] = []

    def left() -> float:
        return max(deadline - time.monotonic(), 0.1)

    def call(what: str, fn: Callable[..., Any], *args: Any, timeout: float | None = None) -> Any:
        """A blocking librdkafka call: its own timeout no longer than what is left, Stuck after that plus grace."""
        if timeout is None:
            return _bounded(what, left() + STUCK_GRACE_S, fn, *args)
        t = min(timeout, left())
        return _bounded(what, t + STUCK_GRACE_S, fn, *args, t)

    def give_up() -> None:
        print(json.dumps({**stats, "error": f"the eos client passed its deadline; last errors: {errors[-5:]}"}))
        sys.stdout.flush()
        os._exit(1)

    watchdog = threading.Timer(spec.get("timeout_s", 90) + STUCK_GRACE_S + 5, give_up)
    watchdog.daemon = True
    watchdog.start()
    consumer = producer = None
    #: partition -> the input offset committed so far (what ``done`` sums)
    at: dict[int, int] = {}
    while time.monotonic() < deadline:
        try:
            if producer is None:
                producer, consumer = _eos_handles(spec)
                call("init_transactions", producer.init_transactions, timeout=api_s)
                consumer.assign(parts)
                committed = call("committed", lambda t, c=consumer: c.committed(parts, timeout=t), timeout=api_s)
                consumer.assign([TopicPartition(topic_in, t.partition, max(t.offset, 0)) for t in committed])
                at = {t.partition: max(t.offset, 0) for t in committed}
            stats["done"] = sum(at.values())
            if stats["done"] >= total:
                break
            msgs = consumer.consume(spec.get("batch", 20), min(1.0, left()))
            msgs = [m for m in msgs if not m.error()]
            if not msgs:
                continue
            positions = _transform(producer, consumer, msgs, topic_out, api_s, call)
            stats["commits"] += 1
            at.update((t.partition, t.offset) for t in positions)
        except Exception as e:  # noqa: BLE001 - the node is being killed: recover as Kafka's docs say
            errors.append(f"{type(e).__name__}: {e}")
            err = e.args[0] if e.args and isinstance(e.args[0], KafkaError) else None
            if err is not None and err.txn_requires_abort() and producer is not None and consumer is not None:
                try:
                    call("abort_transaction", producer.abort_transaction, timeout=api_s)
                    stats["aborts"] += 1
                    committed = call("committed", lambda t, c=consumer: c.committed(parts, timeout=t), timeout=api_s)
                    for t in committed:
                        consumer.seek(TopicPartition(t.topic, t.partition, max(t.offset, 0)))
                    at = {t.partition: max(t.offset, 0) for t in committed}
                    continue
                except Exception as e2:  # noqa: BLE001 - fall through to a new producer and consumer
                    errors.append(f"{type(e2).__name__}: {e2}")
            stats["restarts"] += 1
            if isinstance(e, Stuck):
                stats["stuck"] += 1
            elif consumer is not None:  # handles that still answer: close the consumer (bounded), keep both
                try:
                    _bounded("close", min(CLOSE_S, left()), consumer.close)
                except Exception:  # noqa: BLE001 - abandoned either way
                    pass
            consumer = producer = None
            time.sleep(min(0.3, left()))
    if consumer is not None:
        try:
            _bounded("close", min(CLOSE_S, deadline + STUCK_GRACE_S - time.monotonic()), consumer.close)
        except Exception as e:  # noqa: BLE001 - the answer is what was committed
            errors.append(f"close: {e}")
    watchdog.cancel()
    stats["done"] = sum(at.values())
    return {**stats, "errors": errors[-10:]}


def offsets_across_restart(spec: dict[str, Any]) -> dict[str, Any]:
    """One consume-transform-produce transaction, then ``ready`` on stdout and a wait for a line on stdin (the
    test kills and restarts the node meanwhile), then another with the same producer and consumer: how it ended.

    Each blocking call is bounded (``stuck`` when it outlives its timeout); abortable errors abort and retry
    until ``timeout_s``.
    """
    api_s = float(spec.get("api_timeout_s", 10))
    producer, consumer = _eos_handles(spec)
    bounded = _bounded_by(api_s)
    bounded("init_transactions", producer.init_transactions, timeout=api_s)
    consumer.assign([TopicPartition(spec["input"], 0, 0)])

    def one() -> list[TopicPartition]:
        """The next input record transformed, in one transaction with its offset."""
        until = time.monotonic() + api_s
        msgs: list[Any] = []
        while not msgs and time.monotonic() < until:
            msgs = [m for m in consumer.consume(1, 1.0) if not m.error()]
        if not msgs:
            raise TimeoutError("no input record")
        return _transform(producer, consumer, msgs, spec["output"], api_s, bounded)

    one()
    print("ready", flush=True)
    sys.stdin.readline()
    deadline = time.monotonic() + float(spec.get("timeout_s", 60))
    attempts: list[str] = []
    while time.monotonic() < deadline:
        try:
            bounded("committed", lambda t: consumer.committed([TopicPartition(spec["input"], 0)], timeout=t),
                    timeout=api_s)
            consumer.seek(TopicPartition(spec["input"], 0, 1))
            one()
            return {"second": "committed", "attempts": attempts}
        except Stuck as e:
            return {"second": "stuck", "call": str(e), "attempts": attempts}
        except Exception as e:  # noqa: BLE001 - the node restarts under us: abort and try again
            attempts.append(f"{type(e).__name__}: {e}")
            err = e.args[0] if e.args and isinstance(e.args[0], KafkaError) else None
            if err is None or not err.txn_requires_abort():
                return {"second": "failed", "attempts": attempts}
            bounded("abort_transaction", producer.abort_transaction, timeout=api_s)
            time.sleep(0.2)
    return {"second": "timed out", "attempts": attempts}


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
    main({"transactions": transactions, "interleaved": interleaved, "zombie": zombie, "eos": eos,
          "offsets_across_restart": offsets_across_restart, "bench": bench},
         hard_exit=True)
