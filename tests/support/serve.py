"""A real ``tiercompact serve`` subprocess for tests: start it on a free port, wait until it
answers /healthz (failing with its output if it exits first), stop it with SIGTERM or kill -9.

One helper for every test that runs the service as a user does, so start-up, the health
wait and the teardown (whole process group, never an orphaned server) are written once.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import IO, Any, Self

TIERCOMPACT = Path(sys.executable).with_name("tiercompact")
#: how long a server may take to answer /healthz after start (imports, recovery)
STARTUP_BOUND_S = 60.0


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def clean_env(extra: Mapping[str, str] | None = None) -> dict[str, str]:
    """The test process's environment without TIERCOMPACT_*/AWS_* settings (a server must get
    only the options a test gives it), no Kafka listener unless asked for, plus ``extra``."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("TIERCOMPACT_", "AWS_"))}
    env["TIERCOMPACT_KAFKA_PORT"] = "0"  # no Kafka listener on the shared default 9092 (--kafka-port opens one)
    env.update(extra or {})
    return env


def http(url: str, method: str = "GET", body: Any = None, *, token: str | None = None,
         timeout: float = 30) -> Any:
    """One JSON request; raises urllib.error.HTTPError on a 4xx/5xx."""
    headers = {"Content-Type": "application/json"}
    if token:
        headers["Authorization"] = f"Bearer {token}"
    req = urllib.request.Request(url, method=method, headers=headers,
                                 data=None if body is None else json.dumps(body).encode())
    with urllib.request.urlopen(req, timeout=timeout) as r:  # noqa: S310 - loopback test server
        return json.loads(r.read() or b"null")


class ServeProcess:
    """``tiercompact serve --data-dir DIR --port P ARGS...`` in its own process group."""

    def __init__(self, data_dir: Path, args: Sequence[str] = (), *, env: Mapping[str, str] | None = None,
                 output: Path | None = None, command: Sequence[str] | None = None,
                 cwd: Path | None = None) -> None:
        self.data_dir = data_dir
        self.args = list(args)
        self.env = dict(env) if env is not None else clean_env()
        self.output = output
        self.command = list(command) if command is not None else [str(TIERCOMPACT)]
        self.cwd = cwd
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.proc: subprocess.Popen[bytes] | None = None
        self._out: IO[bytes] | None = None

    def start(self, bound_s: float = STARTUP_BOUND_S) -> Self:
        self.spawn()
        return self.wait_ready(bound_s)

    def spawn(self) -> None:
        """Start the process (on the same port and data dir as any earlier start)."""
        cmd = [*self.command, "serve", "--data-dir", str(self.data_dir), "--port", str(self.port), *self.args]
        self._out = open(self.output, "ab") if self.output is not None else None  # noqa: SIM115
        self.proc = subprocess.Popen(cmd, env=self.env, cwd=self.cwd, start_new_session=True,
                                     stdout=self._out or subprocess.DEVNULL,
                                     stderr=subprocess.STDOUT if self._out else subprocess.PIPE)

    def wait_ready(self, bound_s: float = STARTUP_BOUND_S) -> Self:
        """Wait until /healthz answers; fail with the server's output if it exits or takes too long."""
        assert self.proc is not None, "spawn() first"
        deadline = time.monotonic() + bound_s
        while time.monotonic() < deadline:
            try:
                urllib.request.urlopen(f"{self.url}/healthz", timeout=1).close()  # noqa: S310
                return self
            except OSError:
                if self.proc.poll() is not None:
                    raise AssertionError(f"serve exited with {self.proc.returncode}: {self.output_text()}") from None
                time.sleep(0.05)
        self.kill()
        raise AssertionError(f"serve did not answer /healthz within {bound_s:.0f}s: {self.output_text()}")

    def terminate(self) -> None:
        """SIGTERM to the process group, without waiting."""
        if self.proc is not None and self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGTERM)

    def output_text(self) -> str:
        if self.output is not None:
            return self.output.read_text(errors="replace")[-4000:]
        if self.proc is not None and self.proc.stderr is not None and self.proc.poll() is not None:
            return self.proc.stderr.read().decode(errors="replace")[-4000:]
        return ""

    def stop(self, timeout: float = 20) -> int:
        """SIGTERM to the process group; SIGKILL if it has not exited within ``timeout``."""
        if self.proc is None:
            return 0
        if self.proc.poll() is None:
            self.terminate()
            try:
                self.proc.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait()
        return self._closed()

    def kill(self) -> int:
        """kill -9 the process group (a crash: nothing is flushed or closed)."""
        if self.proc is None:
            return 0
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait()
        return self._closed()

    def _closed(self) -> int:
        assert self.proc is not None
        if self._out is not None:
            self._out.close()
            self._out = None
        return int(self.proc.returncode)


@contextmanager
def serving(data_dir: Path, args: Sequence[str] = (), **kw: Any) -> Iterator[ServeProcess]:
    """A started :class:`ServeProcess`, stopped (SIGTERM, then SIGKILL) on exit."""
    served = ServeProcess(data_dir, args, **kw)
    try:
        yield served.start()
    finally:
        served.stop()
