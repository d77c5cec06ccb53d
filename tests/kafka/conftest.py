"""The Kafka suite's harness: a real ``tiercompact serve`` (HTTP + Kafka listener) shared by the session, and
real Kafka clients (confluent-kafka, kafka-python, aiokafka) each run in its own process.

``kafka_server`` is one server for the whole directory (make topic names unique: ``topic_name``);
``KafkaServe`` starts more (another node, other flags) and ``run_client`` / ``run_clients`` run the
client scripts of tests/kafka/clients/ (``{"action": "produce"|"consume"|..., ...}`` in, JSON out; see
each script for its actions and tests/kafka/clients/common.py for the ``steps`` form).
"""

from __future__ import annotations

import itertools
import json
import os
import socket
import subprocess
import sys
import time
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import pytest

from tests.support.serve import ServeProcess, clean_env, free_port, http

ROOT = Path(__file__).resolve().parents[2]
CLIENTS_DIR = Path(__file__).resolve().parent / "clients"
CLIENTS = {"confluent": CLIENTS_DIR / "confluent_client.py", "kafka-python": CLIENTS_DIR / "kafka_python_client.py",
           "aiokafka": CLIENTS_DIR / "aiokafka_client.py"}
#: every client script run_client can start: the three libraries, the transactional tools built on confluent-kafka,
#: and the readers and admin clients of each library (``{"library": ..., "action": ...}``)
SCRIPTS = {**CLIENTS, "txn": CLIENTS_DIR / "txn_client.py", "reader": CLIENTS_DIR / "reader_client.py"}
CODECS = ("none", "gzip", "snappy", "lz4", "zstd")
CLIENT_TIMEOUT_S = 120.0


class KafkaServe(ServeProcess):
    """``tiercompact serve`` of this checkout with a Kafka listener on a free port (advertised as 127.0.0.1)."""

    def __init__(self, data_dir: Path, args: Sequence[str] = (), *, kafka_port: int | None = None,
                 env: dict[str, str] | None = None, output: Path | None = None) -> None:
        self.kafka_port = kafka_port or free_port()
        super().__init__(data_dir, ["--kafka-port", str(self.kafka_port),
                                    "--advertised-listener", f"127.0.0.1:{self.kafka_port}",
                                    "--log-level", "warning", *args],
                         env=clean_env({"PYTHONPATH": str(ROOT), **(env or {})}),
                         output=output, command=[sys.executable, "-m", "service.cli"], cwd=ROOT)

    @property
    def bootstrap(self) -> str:
        return f"127.0.0.1:{self.kafka_port}"

    def wait_ready(self, bound_s: float = 60.0) -> KafkaServe:
        super().wait_ready(bound_s)
        deadline = time.monotonic() + bound_s
        while True:
            try:
                socket.create_connection(("127.0.0.1", self.kafka_port), timeout=1).close()
                return self
            except OSError:
                if time.monotonic() > deadline or (self.proc is not None and self.proc.poll() is not None):
                    raise AssertionError(f"the Kafka listener did not open: {self.output_text()}") from None
                time.sleep(0.05)

    def api(self, method: str, path: str, body: Any = None, *, token: str | None = None) -> Any:
        return http(self.url + path, method, body, token=token)

    def create_topic(self, name: str, partitions: int = 1, config: dict[str, Any] | None = None,
                     *, token: str | None = None) -> Any:
        return self.api("POST", "/v1/topics", {"name": name, "partitions": partitions, "config": config or {}},
                        token=token)


def _client_cmd(client: str, spec: dict[str, Any]) -> list[str]:
    return [sys.executable, str(SCRIPTS[client]), json.dumps(spec)]


def _answer(client: str, proc: subprocess.CompletedProcess[str] | Any, out: str, err: str) -> dict[str, Any]:
    lines = [ln for ln in out.splitlines() if ln.startswith("{")]
    if not lines:
        raise AssertionError(f"{client} client printed no answer (exit {proc.returncode}):\n{out[-3000:]}\n"
                             f"{err[-3000:]}")
    answer: dict[str, Any] = json.loads(lines[-1])
    return answer


def run_client(client: str, spec: dict[str, Any], *, timeout: float = CLIENT_TIMEOUT_S,
               check: bool = True) -> dict[str, Any]:
    """Run one client script in its own process; its JSON answer (an ``error`` answer fails unless ``check=False``)."""
    proc = subprocess.run(_client_cmd(client, spec), capture_output=True, text=True, timeout=timeout, cwd=ROOT,
                          env=clean_env())
    answer = _answer(client, proc, proc.stdout, proc.stderr)
    if check and "error" in answer:
        raise AssertionError(f"{client} failed: {answer['error']}\n{answer.get('trace', '')}\n{proc.stderr[-3000:]}")
    return answer


def run_clients(jobs: Sequence[tuple[str, dict[str, Any]]], *, timeout: float = CLIENT_TIMEOUT_S,
                check: bool = True) -> list[dict[str, Any]]:
    """Several client processes at once (each its own process); their answers in ``jobs`` order."""
    procs = [(client, subprocess.Popen(_client_cmd(client, spec), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                       text=True, cwd=ROOT, env=clean_env())) for client, spec in jobs]
    answers = []
    deadline = time.monotonic() + timeout
    try:
        for client, p in procs:
            out, err = p.communicate(timeout=max(deadline - time.monotonic(), 1))
            answer = _answer(client, p, out, err)
            if check and "error" in answer:
                raise AssertionError(f"{client} failed: {answer['error']}\n{answer.get('trace', '')}\n{err[-3000:]}")
            answers.append(answer)
    finally:
        for _client, p in procs:
            if p.poll() is None:
                p.kill()
                p.wait()
    return answers


@pytest.fixture(scope="session")
def kafka_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[KafkaServe]:
    """One ``tiercompact serve`` with a Kafka listener for the whole Kafka suite (no credentials)."""
    root = tmp_path_factory.mktemp("kafka-serve")
    server = KafkaServe(root / "data", ["--cleaner-threads", "1"], output=root / "serve.log")
    server.start()
    try:
        yield server
    finally:
        code = server.stop()
        if code not in (0, -15):
            print(f"the shared Kafka server exited with {code}: {server.output_text()}", file=sys.stderr)


_names = itertools.count()


@pytest.fixture
def topic_name(request: pytest.FixtureRequest) -> str:
    """A topic name unique within the session (the server is shared)."""
    base = "".join(c if c.isalnum() else "-" for c in request.node.name)[:60].strip("-")
    return f"{base}-{os.getpid()}-{next(_names)}"
