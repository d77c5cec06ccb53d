"""SIGTERM ends a real `tiercompact serve` within 10 s with status 0, whatever it is doing.

Each test starts the console script's `serve` as a subprocess (lock checking inherited from
tests/conftest.py), keeps it busy, sends SIGTERM and waits at most 10 s for the exit.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from log import locks
from tests.support.serve import ServeProcess

ROOT = Path(__file__).resolve().parents[2]
STOP_BOUND_S = 10.0
TIERED = {"cleanup.policy": "compact", "remote.storage.enable": True, "segment.bytes": 4096,
          "min.cleanable.dirty.ratio": 0.01, "local.retention.ms": 0}


class Served(ServeProcess):
    def log(self) -> str:
        return self.output.read_text(errors="replace") if self.output is not None else ""


@contextlib.contextmanager
def serve(tmp_path: Path, *flags: str) -> Iterator[Served]:
    served = Served(tmp_path / "d", ["--log-level", "info", "--tiering-interval-ms", "100",
                                     "--roll-check-interval-ms", "100", "--cleaner-backoff-ms", "100", *flags],
                    env={**os.environ, locks.LOCK_CHECK_ENV: "1"}, output=tmp_path / "serve.stderr",
                    command=[sys.executable, "-m", "service.cli"], cwd=ROOT)
    try:
        yield served.start()
    finally:
        served.kill()


def sigterm_and_wait(served: Served) -> tuple[int, float]:
    t0 = time.monotonic()
    served.proc.send_signal(signal.SIGTERM)
    try:
        rc = served.proc.wait(timeout=STOP_BOUND_S)
    except subprocess.TimeoutExpired:
        pytest.fail(f"serve still running {STOP_BOUND_S:.0f} s after SIGTERM; its log:\n{served.log()[-4000:]}")
    return rc, time.monotonic() - t0


def produce(c: httpx.Client, topic: str, r: int, n: int = 40) -> None:
    c.post(f"/v1/topics/{topic}/partitions/0/records",
           json={"records": [{"key": f"k{i}", "value": f"v{r}-{i}" * 4} for i in range(n)]})


def slow_topic(c: httpx.Client) -> None:
    """Topic "slow": ten rolled segments of dirty records (for a clean throttled to a crawl)."""
    assert c.post("/v1/topics", json={"name": "slow", "config": {
        "cleanup.policy": "compact", "segment.bytes": 4096, "min.cleanable.dirty.ratio": 0.01}}).status_code == 201
    for r in range(10):
        produce(c, "slow", r)
        c.post("/v1/topics/slow/partitions/0/roll")


def test_sigterm_under_load_exits_0_within_10_s(tmp_path: Path) -> None:
    with serve(tmp_path) as served:
        with httpx.Client(base_url=served.url, timeout=30) as c:
            for t in ("orders", "users"):
                assert c.post("/v1/topics", json={"name": t, "config": TIERED}).status_code == 201
                for r in range(5):
                    produce(c, t, r)
                    c.post(f"/v1/topics/{t}/partitions/0/roll")
        stop = threading.Event()
        answered = [0]

        def load(topic: str) -> None:
            with httpx.Client(base_url=served.url, timeout=15) as c:
                r = 5
                while not stop.is_set():
                    try:
                        produce(c, topic, r)
                        c.post(f"/v1/topics/{topic}/partitions/0/roll")
                        c.post(f"/v1/topics/{topic}/partitions/0/tier")
                        c.post(f"/v1/topics/{topic}/partitions/0/clean", params={"wait": "false"})
                        c.get(f"/v1/topics/{topic}/partitions/0/records", params={"offset": 0})
                        c.get(f"/v1/topics/{topic}/partitions/0")
                        c.get("/metrics")
                        answered[0] += 1
                    except httpx.HTTPError:
                        if served.proc.poll() is not None:
                            return
                    r += 1

        clients = [threading.Thread(target=load, args=(t,)) for t in ("orders", "users", "orders")]
        for t in clients:
            t.start()
        time.sleep(3)  # cleaner, tiering, jobs and requests all in flight
        try:
            rc, took = sigterm_and_wait(served)
        finally:
            stop.set()
            for t in clients:
                t.join(30)
        log = served.log()
        assert answered[0] > 0
        assert rc == 0, log[-4000:]
        assert took < STOP_BOUND_S
        assert "lock-order violation" not in log
        assert "did not finish" not in log  # the watchdog did not have to step in


def test_sigterm_during_a_long_throttled_clean_exits_0_within_10_s(tmp_path: Path) -> None:
    """A clean job throttled to 50 bytes/s would take hours (its thread sleeps in the throttle,
    out of reach of any abort check): the stop abandons it, leaves the logs for recovery, and
    the data is intact at the next start."""
    with serve(tmp_path, "--io-max-bytes-per-second", "50", "--cleaner-threads", "0") as served:
        with httpx.Client(base_url=served.url, timeout=30) as c:
            slow_topic(c)
            end = c.get("/v1/topics/slow/partitions/0").json()["log_end_offset"]
            # Kafka's throttler first checks the rate once check_interval_ms (300 ms) of its period
            # has passed; the compiled kernels clean these 12 KB in ~20 ms, so start after that
            time.sleep(0.5)
            job = c.post("/v1/topics/slow/partitions/0/clean", params={"wait": "false"})
            assert job.status_code == 202
            r = c.post("/v1/topics/slow/partitions/0/records", json={"records": [{"key": "k0", "value": "last"}]})
            assert r.json()["base_offset"] == end
            deadline = time.monotonic() + 20  # a loaded machine may start the job late
            while c.get(f"/v1/jobs/{job.json()['job_id']}").json()["state"] != "running":
                assert time.monotonic() < deadline, "the clean job never started"
                time.sleep(0.1)
            time.sleep(1.5)  # the job is inside its round, sleeping in the throttle
        rc, _ = sigterm_and_wait(served)
        assert rc == 0, served.log()[-4000:]
        assert "lock-order violation" not in served.log()
        assert "stopped (not cleanly)" in served.log(), served.log()[-3000:]  # abandoned, not waited for
        assert not (tmp_path / "d" / "slow-0" / ".clean-shutdown").exists()
    # restart on the same data dir: every record still readable, the latest value of k0 wins
    with serve(tmp_path, "--cleaner-threads", "0") as served, httpx.Client(base_url=served.url, timeout=30) as c:
        records, offset = [], 0
        while True:
            page = c.get("/v1/topics/slow/partitions/0/records", params={"offset": offset}).json()
            if not page["records"]:
                break
            records += page["records"]
            offset = page["next_offset"]
        latest = {rec["key"]: rec["value"] for rec in records}
        assert latest["k0"] == "last" and len(latest) == 40
        assert offset == end + 1
        rc, _ = sigterm_and_wait(served)
        assert rc == 0


def test_a_request_still_running_when_the_drain_time_ends_gets_a_503(tmp_path: Path) -> None:
    """Regression: uvicorn cancels requests still running once a stop's drain time is over, and
    answered them with a plain-text 500 "Internal Server Error" (the CancelledError reached it).
    Such a request now gets the API's JSON error with 503 and Retry-After: its outcome is
    unknown and a retry is the client's move, not a server bug."""
    with serve(tmp_path, "--io-max-bytes-per-second", "50", "--cleaner-threads", "0") as served:
        with httpx.Client(base_url=served.url, timeout=30) as c:
            slow_topic(c)
        time.sleep(0.5)  # past the throttler's first check interval (see the test above)
        answer: list[httpx.Response] = []

        def clean_and_wait() -> None:
            with httpx.Client(base_url=served.url, timeout=30) as c:
                answer.append(c.post("/v1/topics/slow/partitions/0/clean", params={"wait": "true"}))

        t = threading.Thread(target=clean_and_wait)
        t.start()
        time.sleep(2.0)  # the request is inside the round, sleeping in the throttle
        rc, _ = sigterm_and_wait(served)
        t.join(30)
        assert rc == 0, served.log()[-4000:]
        assert answer, "the waiting request got no answer at all"
        r = answer[0]
        assert r.status_code == 503, (r.status_code, r.text)
        assert "stopping" in r.json()["error"] and "retry" in r.json()["error"]
        assert r.headers.get("retry-after")
        assert "Exception in ASGI application" not in served.log()
