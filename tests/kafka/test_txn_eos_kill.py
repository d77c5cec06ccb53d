"""Exactly-once consume-transform-produce (confluent-kafka, send_offsets_to_transaction) while the node is ``kill -9``'d and restarted again and again.

The client (its own process) reads the input topic read_committed from the group's committed
offsets, writes each record transformed to the output topic and commits its input offsets in the
same transaction; on any error it aborts (or, when the error is fatal, rebuilds its producer and
consumer) and goes on from the committed offsets. The node is killed at random points
``TXN_EOS_KILLS`` times (20 by default, within ``TXN_EOS_KILL_BUDGET_S``) and restarted on the
same ports; afterwards the output topic read read_committed holds every input record exactly once.
A client that misses its deadline is dumped (py-spy, the coordinators' state, its stderr, the
server log) into the failure; ``TXN_EOS_SEED`` picks the kill points, ``TXN_EOS_DEBUG`` turns on
librdkafka debug contexts. The second test is the deterministic form of a hang the loop met: one
kill between two send_offsets_to_transaction calls of the same producer.
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

PY_SPY = Path(sys.executable).with_name("py-spy")

INPUT = 300
PARTS = 2
KILLS = int(os.environ.get("TXN_EOS_KILLS", "20"))
#: the kill loop stops after this long even if fewer kills happened (a restart takes ~1 s idle, 12 s on a busy box)
KILL_BUDGET_S = float(os.environ.get("TXN_EOS_KILL_BUDGET_S", "35"))
#: the client's own deadline; the test waits this much longer for its answer (the client's last call may
#: take its grace, tests/kafka/clients/txn_client.py STUCK_GRACE_S) before dumping it as hung
CLIENT_TIMEOUT_S = 150
GRACE_S = 30


def _tail(path: Path, chars: int = 6000) -> str:
    try:
        return path.read_text(errors="replace")[-chars:]
    except OSError as e:
        return f"({e})"


def _hang_report(client: subprocess.Popen[str], server: KafkaServe, tmp_path: Path) -> str:
    """What a client that missed its deadline was doing: its native stack (py-spy), the coordinators' state as
    the server shows it, the client's stderr and the server log's tail; the client is killed afterwards."""
    parts = [f"the eos client (pid {client.pid}) missed its {CLIENT_TIMEOUT_S}s deadline"]
    try:
        dump = subprocess.run([str(PY_SPY), "dump", "--native", "--pid", str(client.pid)], capture_output=True,
                              text=True, timeout=60)
        parts.append(f"py-spy dump --native:\n{dump.stdout}{dump.stderr}")
    except (OSError, subprocess.TimeoutExpired) as e:
        parts.append(f"py-spy dump failed: {e}")
    for path in ("/v1/transactions", "/v1/groups/eos"):
        try:
            parts.append(f"GET {path}: {json.dumps(server.api('GET', path))}")
        except Exception as e:  # noqa: BLE001 - a diagnostic
            parts.append(f"GET {path} failed: {e}")
    client.kill()
    out, _ = client.communicate()
    parts.append(f"client stdout:\n{out[-2000:]}")
    parts.append(f"client stderr (tail):\n{_tail(tmp_path / 'client.err')}")
    parts.append(f"server log (tail):\n{_tail(tmp_path / 'serve.log')}")
    return "\n\n".join(parts)


def test_exactly_once_through_repeated_kill_9(tmp_path: Path) -> None:
    server = KafkaServe(tmp_path / "data", ["--cleaner-threads", "1", "--broker-heartbeat-interval-ms", "100",
                                            "--broker-session-timeout-ms", "400"], output=tmp_path / "serve.log")
    server.start()
    client = client_err = None
    rng = random.Random(int(os.environ.get("TXN_EOS_SEED", "7")))
    kills = 0
    restart_s: list[float] = []  # spawn -> HTTP and Kafka listeners answering, per restart
    try:
        server.create_topic("in", PARTS, {"cleanup.policy": "delete"})
        server.create_topic("out", PARTS, {"cleanup.policy": "delete"})
        for p in range(PARTS):
            recs = [{"key": f"k{i}", "value": f"v{i}"} for i in range(p, INPUT, PARTS)]
            server.api("POST", f"/v1/topics/in/partitions/{p}/records", {"records": recs})
        spec = {"action": "eos", "bootstrap": server.bootstrap, "input": "in", "output": "out", "group": "eos",
                "transactional_id": "eos-tx", "expected": INPUT, "partitions": PARTS, "batch": 7,
                "timeout_s": CLIENT_TIMEOUT_S, "txn_timeout_ms": 20000}
        if os.environ.get("TXN_EOS_DEBUG"):  # librdkafka's debug contexts, e.g. "eos,cgrp,protocol"
            spec["conf"] = {"debug": os.environ["TXN_EOS_DEBUG"]}
        client_err = open(tmp_path / "client.err", "w")  # noqa: SIM115 - closed in finally
        client = subprocess.Popen([sys.executable, str(CLIENTS_DIR / "txn_client.py"), json.dumps(spec)],
                                  stdout=subprocess.PIPE, stderr=client_err, text=True, cwd=ROOT,
                                  env=clean_env())
        started = time.monotonic()
        while kills < KILLS and client.poll() is None and time.monotonic() - started < KILL_BUDGET_S:
            time.sleep(rng.uniform(0.3, 2.0))
            server.kill()
            kills += 1
            time.sleep(rng.uniform(0.0, 0.5))
            t0 = time.monotonic()
            server.spawn()
            server.wait_ready()
            restart_s.append(time.monotonic() - t0)
        try:
            out, _ = client.communicate(timeout=max(started + CLIENT_TIMEOUT_S + GRACE_S - time.monotonic(), 1))
        except subprocess.TimeoutExpired:
            raise AssertionError(_hang_report(client, server, tmp_path)) from None
        err = _tail(tmp_path / "client.err", 3000)
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
        print(f"eos: {kills} kills in {time.monotonic() - started:.1f}s, restarts took "
              f"{sum(restart_s) / max(len(restart_s), 1):.2f}s on average (max {max(restart_s, default=0):.2f}s), "
              f"{answer}")
    finally:
        if client is not None and client.poll() is None:
            client.kill()
            client.wait()
        if client_err is not None:
            client_err.close()
        server.stop()


def test_send_offsets_to_transaction_after_the_only_node_restarted(tmp_path: Path) -> None:
    """The hang the kill loop met: a transaction with send_offsets_to_transaction, ``kill -9`` of the only node,
    a restart, and the next send_offsets_to_transaction of the same producer. librdkafka's re-bootstrap (every
    broker it knows is down) decommissions the broker its group-coordinator cache still names, and the call
    then waits forever; the eos client turns re-bootstrapping off, so the call commits."""
    server = KafkaServe(tmp_path / "data", ["--broker-heartbeat-interval-ms", "100",
                                            "--broker-session-timeout-ms", "400"], output=tmp_path / "serve.log")
    server.start()
    client = None
    try:
        server.create_topic("in", 1, {"cleanup.policy": "delete"})
        server.create_topic("out", 1, {"cleanup.policy": "delete"})
        server.api("POST", "/v1/topics/in/partitions/0/records",
                   {"records": [{"key": f"k{i}", "value": f"v{i}"} for i in range(3)]})
        spec = {"action": "offsets_across_restart", "bootstrap": server.bootstrap, "input": "in", "output": "out",
                "group": "g", "transactional_id": "probe", "timeout_s": 40, "txn_timeout_ms": 20000}
        client = subprocess.Popen([sys.executable, str(CLIENTS_DIR / "txn_client.py"), json.dumps(spec)],
                                  stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                                  text=True, cwd=ROOT, env=clean_env())
        assert client.stdout is not None and client.stdin is not None
        ready = client.stdout.readline()
        assert ready.strip() == "ready", ready + client.stdout.read()
        server.kill()
        time.sleep(1.0)  # the client notices every broker is down (and, by default, re-bootstraps)
        server.spawn()
        server.wait_ready()
        client.stdin.write("go\n")
        client.stdin.flush()
        out, _ = client.communicate(timeout=90)
        answer = json.loads([ln for ln in out.splitlines() if ln.startswith("{")][-1])
        assert answer.get("second") == "committed", answer
        got = run_client("confluent", {"action": "consume", "bootstrap": server.bootstrap, "topic": "out",
                                       "isolation": "read_committed", "timeout_s": 30})
        assert sorted(r["value"] for r in got["records"]) == ["out:v0", "out:v1"]
    finally:
        if client is not None and client.poll() is None:
            client.kill()
            client.wait()
        server.stop()
