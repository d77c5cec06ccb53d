"""Consumer-group members in their own processes (tests/kafka/clients/group_member.py) and the group as the HTTP API shows it."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from tests.kafka.conftest import CLIENTS_DIR, ROOT, KafkaServe
from tests.support.serve import clean_env

MEMBER_SCRIPT = CLIENTS_DIR / "group_member.py"


class GroupMember:
    """One member process; its events (JSON lines) are collected as it prints them."""

    def __init__(self, client: str, spec: dict[str, Any], stop_file: Path) -> None:
        self.client = client
        self.stop_file = stop_file
        self.events: list[dict[str, Any]] = []
        self.proc = subprocess.Popen([sys.executable, str(MEMBER_SCRIPT),
                                      json.dumps({**spec, "client": client, "stop_file": str(stop_file)})],
                                     stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=ROOT,
                                     env=clean_env())
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            if line.startswith("{"):
                self.events.append(json.loads(line))

    def stop(self, timeout: float = 30) -> None:
        """Close the consumer (it leaves the group) and wait for the process."""
        self.stop_file.touch()
        try:
            self.proc.wait(timeout)
        finally:
            if self.proc.poll() is None:
                self.proc.kill()
        self._reader.join(5)

    def kill9(self) -> None:
        os.kill(self.proc.pid, signal.SIGKILL)
        self.proc.wait(10)
        self._reader.join(5)

    def stderr(self) -> str:
        return self.proc.stderr.read() if self.proc.stderr is not None and self.proc.poll() is not None else ""

    def records(self) -> list[tuple[int, int, str]]:
        return [(e["p"], e["o"], e["v"]) for e in list(self.events) if e["event"] == "record"]


def run_member(client: str, spec: dict[str, Any], tmp: Path, timeout: float = 90) -> list[dict[str, Any]]:
    """A member that consumes ``spec["expect"]`` records (commits them) and leaves; its events."""
    m = GroupMember(client, {"max_s": timeout - 5, **spec}, tmp / f"stop-{time.monotonic_ns()}")
    m.proc.wait(timeout)
    m._reader.join(5)
    if not any(e["event"] == "closed" for e in m.events):
        raise AssertionError(f"{client} member did not finish: {m.events[-5:]} {m.stderr()[-3000:]}")
    return m.events


def run_group_admin(spec: dict[str, Any], timeout: float = 60) -> dict[str, Any]:
    """confluent-kafka's AdminClient on groups (tests/kafka/clients/group_admin_client.py), in its own process."""
    proc = subprocess.run([sys.executable, str(CLIENTS_DIR / "group_admin_client.py"), json.dumps(spec)],
                          capture_output=True, text=True, timeout=timeout, cwd=ROOT, env=clean_env())
    lines = [ln for ln in proc.stdout.splitlines() if ln.startswith("{")]
    answer: dict[str, Any] = json.loads(lines[-1]) if lines else {"error": proc.stderr[-3000:]}
    if "error" in answer:
        raise AssertionError(f"group admin failed: {answer['error']}\n{answer.get('trace', '')}")
    return answer


def group(server: KafkaServe, group_id: str) -> dict[str, Any] | None:
    try:
        return server.api("GET", f"/v1/groups/{group_id}")  # type: ignore[no-any-return]
    except Exception:  # noqa: BLE001 - 404 before the first commit or join
        return None


def committed(server: KafkaServe, group_id: str) -> dict[int, int]:
    g = group(server, group_id)
    return {} if g is None else {o["partition"]: o["offset"] for o in g["offsets"]}


def wait_for(cond: Callable[[], Any], timeout_s: float, what: str) -> Any:
    deadline = time.monotonic() + timeout_s
    while True:
        got = cond()
        if got:
            return got
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout_s} s waiting for {what}")
        time.sleep(0.1)


def stable_with(server: KafkaServe, group_id: str, members: int, partitions: int) -> Callable[[], bool]:
    """The group is Stable with ``members`` members that together hold every one of ``partitions``."""
    def check() -> bool:
        g = group(server, group_id)
        if g is None or g["state"] != "Stable" or len(g["members"]) != members:
            return False
        held = sorted(p for m in g["members"] for ps in (m["assignment"] or {}).values() for p in ps)
        return held == list(range(partitions))
    return check


class OffsetSampler:
    """Samples the group's committed offsets every ``interval_s`` in a thread: each partition's history."""

    def __init__(self, server: KafkaServe, group_id: str, interval_s: float = 0.2) -> None:
        self.server, self.group_id, self.interval_s = server, group_id, interval_s
        self.history: dict[int, list[int]] = {}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.is_set():
            for p, o in committed(self.server, self.group_id).items():
                h = self.history.setdefault(p, [])
                if not h or h[-1] != o:
                    h.append(o)
            self._stop.wait(self.interval_s)

    def stop(self) -> dict[int, list[int]]:
        self._stop.set()
        self._thread.join(5)
        return self.history
