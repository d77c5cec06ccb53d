"""Produce with real clients against a real ``tiercompact serve``: a compacted topic refuses keyless records as Kafka
does, and ``kill -9`` of the node while an idempotent acks=all producer (librdkafka) sends, then a restart, leaves
every acknowledged record in the log exactly once, at the offset it was acknowledged at."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from tests.kafka.conftest import CLIENTS_DIR, ROOT, KafkaServe, run_client
from tests.support.serve import clean_env


def _read_all(server: KafkaServe, topic: str, partition: int) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    offset = 0
    while True:
        page = server.api("GET", f"/v1/topics/{topic}/partitions/{partition}/records?offset={offset}&max_records=1000")
        out.extend(page["records"])
        if not page["records"]:
            return out
        offset = page["next_offset"]


def test_keyless_records_are_refused_by_a_compacted_topic_only(kafka_server: KafkaServe, topic_name: str) -> None:
    kafka_server.create_topic(f"{topic_name}-c", 1)
    kafka_server.create_topic(f"{topic_name}-d", 1, {"cleanup.policy": "delete"})
    records = [{"key": "a", "value": "1"}, {"key": None, "value": "keyless"}]
    answers = run_client("confluent", {"common": {"bootstrap": kafka_server.bootstrap, "idempotent": True,
                                                  "timeout_s": 20},
                                       "steps": [{"action": "produce", "topic": f"{topic_name}-{s}",
                                                  "records": records, "linger_ms": 50} for s in "cd"]})["steps"]
    compacted, delete = (a["offsets"] for a in answers)
    # one batch holds both records: Kafka refuses the whole batch, naming the keyless record
    assert all(isinstance(o, dict) and "INVALID_RECORD" in o["error"].upper().replace(" ", "_")
               or "invalid record" in o["error"].lower() for o in compacted), compacted
    assert delete == [[0, 0], [0, 1]]
    assert _read_all(kafka_server, f"{topic_name}-c", 0) == []


def test_kill_9_while_an_idempotent_producer_sends_loses_and_duplicates_nothing(tmp_path: Path) -> None:
    server = KafkaServe(tmp_path / "data", ["--cleaner-threads", "1", "--broker-heartbeat-interval-ms", "100",
                                            "--broker-session-timeout-ms", "400"], output=tmp_path / "serve.log")
    server.start()
    producer = None
    try:
        server.create_topic("crash", 2)
        spec = {"action": "produce", "bootstrap": server.bootstrap, "topic": "crash", "count": 3000,
                "pause_every": 10, "pause_ms": 10, "progress_after": 300, "timeout_s": 60}
        producer = subprocess.Popen([sys.executable, str(CLIENTS_DIR / "confluent_idempotent_producer.py"),
                                     json.dumps(spec)], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                    cwd=ROOT, env=clean_env())
        assert producer.stdout is not None
        first = producer.stdout.readline()
        assert first.startswith('{"progress"'), first + (producer.stderr.read() if producer.stderr else "")
        server.kill()  # kill -9 mid-stream: acknowledged and in-flight batches alike
        killed_at = time.time()
        time.sleep(0.6)  # past the session timeout: the restarted node takes its broker id back
        server.spawn()
        server.wait_ready()
        out, err = producer.communicate(timeout=120)
        answer = json.loads([ln for ln in out.splitlines() if ln.startswith('{"offsets"')][-1])
    finally:
        if producer is not None and producer.poll() is None:
            producer.kill()
            producer.wait()
    try:
        acked = {i: tuple(o) for i, o in enumerate(answer["offsets"]) if isinstance(o, list)}
        assert len(acked) > 300, answer["offsets"][:20]
        after = sum(1 for t in answer["acked_at"] if t > killed_at)
        assert after > 0, "the producer was done before the kill: nothing was tested"
        stored: dict[str, list[tuple[int, int]]] = {}
        for p in (0, 1):
            for r in _read_all(server, "crash", p):
                stored.setdefault(r["value"], []).append((p, r["offset"]))
        dups = {v: where for v, where in stored.items() if len(where) > 1}
        assert dups == {}, f"{len(dups)} values stored twice, e.g. {list(dups.items())[:3]}"
        missing = {i: o for i, o in acked.items() if stored.get(f"r{i}") != [o]}
        assert missing == {}, f"{len(missing)} acknowledged records not where acknowledged: {list(missing.items())[:5]}"
    finally:
        server.stop()
