"""confluent-kafka (librdkafka) idempotent acks=all producer for the crash tests: sends ``count`` keyed records at a
steady pace, prints ``{"progress": n}`` once ``progress_after`` are acknowledged, then the JSON answer: per record
its ``[partition, offset]`` or ``{"error": ...}``, and when it was acknowledged (``acked_at``, epoch seconds)."""

from __future__ import annotations

import json
import sys
import time
from typing import Any

from common import main
from confluent_kafka import Producer


def produce(spec: dict[str, Any]) -> dict[str, Any]:
    conf = {"bootstrap.servers": spec["bootstrap"], "enable.idempotence": True, "acks": "all",
            "compression.type": spec.get("codec", "lz4"), "linger.ms": spec.get("linger_ms", 2),
            "message.timeout.ms": int(spec.get("timeout_s", 60) * 1000), "retry.backoff.ms": 100,
            "reconnect.backoff.max.ms": 500, "socket.timeout.ms": 10000}
    producer = Producer(conf)
    count, pause_every, pause_s = spec["count"], spec.get("pause_every", 20), spec.get("pause_ms", 5) / 1000
    results: list[Any] = [None] * count
    acked_at: list[float] = [0.0] * count
    acked = [0]
    told = [False]

    def done(i: int) -> Any:
        def cb(err: Any, msg: Any) -> None:
            if err:
                results[i] = {"error": str(err)}
                return
            results[i] = [msg.partition(), msg.offset()]
            acked_at[i] = time.time()
            acked[0] += 1
            if not told[0] and acked[0] >= spec.get("progress_after", 100):
                told[0] = True
                print(json.dumps({"progress": acked[0]}))
                sys.stdout.flush()
        return cb

    for i in range(count):
        while True:
            try:
                producer.produce(spec["topic"], key=b"k%d" % (i % 97), value=b"r%d" % i, on_delivery=done(i))
                break
            except BufferError:
                producer.poll(0.05)
        producer.poll(0)
        if i % pause_every == pause_every - 1:
            time.sleep(pause_s)
    left = producer.flush(spec.get("timeout_s", 60) + 10)
    return {"offsets": results, "acked_at": acked_at, "unflushed": left}


if __name__ == "__main__":
    main({"produce": produce})
