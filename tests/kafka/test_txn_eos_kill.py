"""Exactly-once consume-transform-produce (confluent-kafka, send_offsets_to_transaction) while the node is ``kill -9``'d and restarted again and again.

The client (its own process) reads the input topic read_committed from the group's committed
offsets, writes each record transformed to the output topic and commits its input offsets in the
same transaction; on any error it aborts (or, when the error is fatal, rebuilds its producer and
consumer) and goes on from the committed offsets. The node is killed at random points
``TXN_EOS_KILLS`` times (20 by default) and restarted on the same ports; afterwards the output
topic read read_committed holds every input record exactly once.
"""

from __future__ import annotations

import json
import os
import random
import subprocess
import sys
import time
from pathlib import Path

from tests.kafka.conftest import CLIENTS_DIR, ROOT, KafkaServe, run_client
from tests.support.serve import clean_env

INPUT = 300
PARTS = 2
KILLS = int(os.environ.get("TXN_EOS_KILLS", "20"))
#: the kill loop stops after this long even if fewer kills happened (a restart takes ~1 s idle, 12 s on a busy box)
KILL_BUDGET_S = float(os.environ.get("TXN_EOS_KILL_BUDGET_S", "60"))


def test_exactly_once_through_repeated_kill_9(tmp_path: Path) -> None:
    server = KafkaServe(tmp_path / "data", ["--cleaner-threads", "1", "--broker-heartbeat-interval-ms", "100",
                                            "--broker-session-timeout-ms", "400"], output=tmp_path / "serve.log")
    server.start()
    client = None
    rng = random.Random(int(os.environ.get("TXN_EOS_SEED", "7")))
    kills = 0
    try:
        server.create_topic("in", PARTS, {"cleanup.policy": "delete"})
        server.create_topic("out", PARTS, {"cleanup.policy": "delete"})
        for p in range(PARTS):
            recs = [{"key": f"k{i}", "value": f"v{i}"} for i in range(p, INPUT, PARTS)]
            server.api("POST", f"/v1/topics/in/partitions/{p}/records", {"records": recs})
        spec = {"action": "eos", "bootstrap": server.bootstrap, "input": "in", "output": "out", "group": "eos",
                "transactional_id": "eos-tx", "expected": INPUT, "partitions": PARTS, "batch": 7,
                "timeout_s": 150, "txn_timeout_ms": 20000}
        client = subprocess.Popen([sys.executable, str(CLIENTS_DIR / "txn_client.py"), json.dumps(spec)],
                                  stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=ROOT,
                                  env=clean_env())
        started = time.monotonic()
        while kills < KILLS and client.poll() is None and time.monotonic() - started < KILL_BUDGET_S:
            time.sleep(rng.uniform(0.3, 2.0))
            server.kill()
            kills += 1
            time.sleep(rng.uniform(0.0, 0.5))
            server.spawn()
            server.wait_ready()
        out, err = client.communicate(timeout=180)
        lines = [ln for ln in out.splitlines() if ln.startswith("{")]
        assert lines, err[-3000:]
        answer = json.loads(lines[-1])
        assert "error" not in answer and answer["done"] == INPUT, (answer, err[-3000:])
        assert kills >= min(KILLS, 3), f"only {kills} kills happened before the client was done"
        got = run_client("confluent", {"action": "consume", "bootstrap": server.bootstrap, "topic": "out",
                                       "isolation": "read_committed", "timeout_s": 60})
        values = sorted(r["value"] for r in got["records"])
        assert got["timed_out"] == []
        dups = len(values) - len(set(values))
        assert dups == 0, f"{dups} duplicated outputs"
        assert values == sorted(f"out:v{i}" for i in range(INPUT)), f"{INPUT - len(set(values))} missing"
        print(f"eos: {kills} kills, {answer}")
    finally:
        if client is not None and client.poll() is None:
            client.kill()
            client.wait()
        server.stop()
