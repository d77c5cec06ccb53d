"""The Kafka load client of ``bench kafka``: one confluent-kafka producer or consumer in this process, driven by a
JSON spec (argv[1]) and answering one JSON line on stdout.

``{"action": "produce", "bootstrap", "topic", "partitions", "value_bytes", "seconds", "rate", "acks"}`` sends
records of ``value_bytes`` (16-byte keys, spread round-robin over the partitions; each value distinct text,
:func:`_values`) for ``seconds``, as fast as the producer's queue lets it (``rate`` 0) or paced at ``rate``
records/s, with lz4, ``acks`` (default all) and linger.ms=5; it answers the records and bytes acknowledged, the
elapsed time and the produce latencies' percentiles (librdkafka's own per-message latency, ``Message.latency()``:
from ``produce()`` to the moment the delivery callback reads it, so the acknowledgement plus the wait for this
process's next ``poll()``), and that latency's two parts as librdkafka's statistics split them (:class:`_Split`).

``{"action": "consume", "bootstrap", "topic", "partitions", "records"}`` reads every partition from offset 0
until ``records`` records arrived and answers the bytes, records and elapsed time.
"""

from __future__ import annotations

import json
import random
import sys
import time
from typing import Any

from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaException, Producer, TopicPartition


def _pct(xs: list[float], p: float) -> float:
    if not xs:
        return 0.0
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(round(p / 100 * (len(xs) - 1))))]


#: distinct record values the producer cycles through (4 MB of 1 KiB values: far more than lz4's 64 KB window)
VALUE_POOL_BYTES = 4 * 1024 * 1024
#: the words the values are made of: text from a 1,024-word vocabulary compresses about 2-fold with lz4
VOCABULARY = 1024


def _values(size: int) -> list[bytes]:
    """Distinct text values of ``size`` bytes, each a run of words drawn from :data:`VOCABULARY` random words.

    Each record carries a value of its own, as a changelog's updates do, and the values compress about as much as
    text or JSON do (about 2-fold with lz4; the bench reports the ratio it saw, from the server's BytesIn). One
    value sent again and again would compress 100-fold or more within a batch, and the server would then be
    measured on a percent of the bytes the figures count, by how far the client's lz4 framing reaches."""
    rnd = random.Random(1024)
    letters = b"abcdefghijklmnopqrstuvwxyz"
    words = [bytes(rnd.choice(letters) for _ in range(rnd.randint(3, 9))) + b" " for _ in range(VOCABULARY)]
    values = []
    for _ in range(max(1, VALUE_POOL_BYTES // max(size, 1))):
        parts: list[bytes] = []
        length = 0
        while length < size:
            word = rnd.choice(words)
            parts.append(word)
            length += len(word)
        values.append(b"".join(parts)[:size])
    return values


class _Split:
    """The produce latency's two parts, from librdkafka's statistics (``statistics.interval.ms``: one JSON document a
    second, each broker's figures over that second): ``int_latency``, how long a record waits in the client's queue
    before it goes into a request (linger.ms included), and ``rtt``, a Produce request's round trip (the network and
    the server, its sync included). Each second's p99 is kept; :meth:`answer` gives their median and the worst
    second's maximum. Only the seconds while ``measuring`` is set count."""

    PARTS = {"int_latency": "client_queue", "rtt": "round_trip"}

    def __init__(self) -> None:
        self.measuring = False
        self.seconds: list[dict[str, tuple[float, float, float]]] = []

    def on_stats(self, document: str) -> None:
        if not self.measuring:
            return
        for broker in json.loads(document)["brokers"].values():
            if broker.get("nodeid", -1) >= 0 and broker["rtt"]["cnt"]:
                self.seconds.append({k: (broker[k]["p50"] / 1000, broker[k]["p99"] / 1000, broker[k]["max"] / 1000)
                                     for k in self.PARTS})

    def answer(self) -> dict[str, float]:
        out: dict[str, float] = {}
        if not self.seconds:
            return out
        for key, name in self.PARTS.items():
            p50s, p99s, maxes = zip(*(second[key] for second in self.seconds), strict=True)
            out[f"{name}_p50_ms"] = round(_pct(list(p50s), 50), 2)
            out[f"{name}_p99_ms"] = round(_pct(list(p99s), 50), 2)
            out[f"{name}_max_ms"] = round(max(maxes), 2)
        return out


def produce(spec: dict[str, Any]) -> dict[str, Any]:
    split = _Split()
    p = Producer({"bootstrap.servers": spec["bootstrap"], "compression.type": "lz4", "acks": spec.get("acks", "all"),
                  "linger.ms": 5, "enable.idempotence": False, "queue.buffering.max.kbytes": 65536,
                  "batch.size": 1_000_000, "message.max.bytes": 2_000_000,
                  "statistics.interval.ms": 1000, "stats_cb": split.on_stats})
    values = _values(spec["value_bytes"])
    parts = spec["partitions"]
    done = {"records": 0, "bytes": 0, "errors": 0, "all_bytes": 0}
    latencies: list[float] = []
    measuring = [False]

    def on_delivery(err: Any, msg: Any) -> None:
        if err is not None:
            done["errors"] += 1
            return
        size = len(msg.value()) + 16
        done["all_bytes"] += size  # the warm-up's too: the server's BytesIn counts them
        if measuring[0]:
            done["records"] += 1
            done["bytes"] += size
            lat = msg.latency()
            if lat is not None:
                latencies.append(lat)

    rate = spec.get("rate", 0)
    i = 0

    def send_for(seconds: float) -> None:
        nonlocal i
        t0 = time.perf_counter()
        deadline = t0 + seconds
        while True:
            now = time.perf_counter()
            if now >= deadline:
                return
            if rate:
                # Paced: produce what is due, then sleep in poll() until the next record is due (at least the
                # 1 ms poll() can wait: its timeout is in whole milliseconds, so a shorter one would spin and take
                # a core from the server on a small machine).
                due = t0 + i_local[0] / rate
                if due > now:
                    p.poll(max(due - now, 0.001))
                    continue
            try:
                p.produce(spec["topic"], values[i % len(values)], key=b"key-%012d" % (i % 1_000_000), partition=i % parts,
                          on_delivery=on_delivery)
                i += 1
                i_local[0] += 1
            except BufferError:
                p.poll(0.005)
                continue
            if i % 256 == 0:
                p.poll(0)

    i_local = [0]
    send_for(spec.get("warmup", 1.0))  # warm-up: connections, metadata, the server's first segments
    p.flush(60)
    i_local[0] = 0
    measuring[0] = split.measuring = True
    t0 = time.perf_counter()
    send_for(spec["seconds"])
    left = p.flush(60)
    elapsed = time.perf_counter() - t0
    split.measuring = False
    return {"records": done["records"], "bytes": done["bytes"], "seconds": elapsed, "errors": done["errors"],
            "unflushed": left, "sent_records": i_local[0], "sent_bytes": done["all_bytes"],
            "p50_ms": round(_pct(latencies, 50) * 1000, 2), "p99_ms": round(_pct(latencies, 99) * 1000, 2),
            "max_ms": round(max(latencies, default=0.0) * 1000, 2), **split.answer()}


def consume(spec: dict[str, Any]) -> dict[str, Any]:
    c = Consumer({"bootstrap.servers": spec["bootstrap"], "group.id": "bench", "enable.auto.commit": False,
                  "fetch.max.bytes": 52_428_800, "max.partition.fetch.bytes": 8_388_608,
                  "fetch.wait.max.ms": 100, "queued.max.messages.kbytes": 262144})
    c.assign([TopicPartition(spec["topic"], p, OFFSET_BEGINNING) for p in range(spec["partitions"])])
    want = spec["records"]
    got = size = 0
    t0 = time.perf_counter()
    deadline = t0 + spec.get("timeout", 300)
    while got < want and time.perf_counter() < deadline:
        for m in c.consume(10_000, 1.0):
            if m.error():
                raise KafkaException(m.error())
            got += 1
            size += len(m.value() or b"") + len(m.key() or b"")
    elapsed = time.perf_counter() - t0
    c.close()
    return {"records": got, "bytes": size, "seconds": elapsed, "complete": got >= want}


if __name__ == "__main__":
    spec = json.loads(sys.argv[1])
    answer = produce(spec) if spec["action"] == "produce" else consume(spec)
    print(json.dumps(answer), flush=True)
