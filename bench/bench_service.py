"""Load test of the HTTP service on loopback -> bench/results/service.json.

A real ``tiercompact serve`` process (127.0.0.1, a free port, a fresh data dir, the
embedded defaults, 2 cleaner threads plus the tiered one, intervals shortened by flags)
and, in this separate process, the load generator: for ~20 s (5 s with BENCH_QUICK=1)
several producer threads append keyed records with updates and tombstones, reader threads
page through partitions, and an admin thread rolls, tiers and cleans while the background
cleaner and tiering loop run too. Afterwards every partition is cleaned once more and read
from offset 0: the newest record of every key must be the one the producers' acknowledged
appends say it is (no record lost), and no request may have failed or hung (every request
has a 60 s timeout, counted as a failure). Finally the server gets SIGTERM: the time it
takes to exit and its exit status are reported too.
Reports requests/s and latency percentiles per kind of request.

Before that, the throughput phases (``throughput`` in the JSON): 8 clients, each one
keep-alive connection sending its next request as soon as the last is answered, from the
small asyncio load generator of :mod:`bench.loadgen` in this process (cheap per request, so
the client's own CPU matters little); first produce requests of 100 records (16-byte keys,
100-byte values) to 8 partitions, then reads of 100 records from random offsets of what was
produced. The topic keeps everything (cleanup.policy=delete, no retention limit) so that no
background cleaning round competes with the requests for the server's CPU. Each phase
reports requests/s, p50/p99/max latency, the server's CPU seconds per request (from /proc: on
a shared machine the steadier figure) and the load average before and after, since the 2
cores may be busy with other work.
"""

from __future__ import annotations

import contextlib
import json
import os
import random
import resource
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections import defaultdict
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import orjson
import psutil

from bench import loadgen
from bench.common import peak_rss_mb, quick, write_result

TOPIC = "load"
PARTITIONS = 4
PRODUCERS = 4
READERS = 4
KEYS = 400
BATCH = 50


class Stats:
    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.latency: dict[str, list[float]] = defaultdict(list)
        self.failures: list[str] = []

    def timed(self, kind: str, fn: Any) -> httpx.Response:
        t0 = time.perf_counter()
        try:
            r = fn()
        except httpx.HTTPError as e:
            with self.lock:
                self.failures.append(f"{kind}: {type(e).__name__}: {e}")
            raise
        dt = time.perf_counter() - t0
        with self.lock:
            self.latency[kind].append(dt)
            if r.status_code >= 400:
                self.failures.append(f"{kind}: HTTP {r.status_code} {r.text[:200]}")
        return r


def _pct(xs: list[float], p: float) -> float:
    if not xs:
        return 0.0
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(round(p / 100 * (len(xs) - 1))))]


class ServeProcess:
    """``tiercompact serve`` in its own process; stopped with SIGTERM (stop_s, exit_code)."""

    def __init__(self, root: Path, extra_args: tuple[str, ...] = (), shortened: bool = True) -> None:
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            self.port = s.getsockname()[1]
        self.url = f"http://127.0.0.1:{self.port}"
        self.log_path = root / "serve.log"
        env = {k: v for k, v in os.environ.items() if not k.startswith("TIERCOMPACT_")}  # production locks
        with open(self.log_path, "wb") as log:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "service.cli", "serve", "--data-dir", str(root / "data"), "--port",
                 str(self.port), "--cleaner-threads", "2", "--log-level", "warning",
                 *(("--tiering-interval-ms", "500", "--roll-check-interval-ms", "200", "--cleaner-backoff-ms", "200")
                   if shortened else ()),
                 *(extra_args or ("--kafka-port", "0"))],
                stdout=subprocess.DEVNULL, stderr=log, env=env, cwd=Path(__file__).resolve().parents[1])
        self.stop_s: float | None = None
        self.exit_code: int | None = None

    def wait_ready(self, timeout: float = 60.0) -> None:
        deadline = time.monotonic() + timeout
        while True:
            with contextlib.suppress(httpx.TransportError):
                if httpx.get(f"{self.url}/healthz", timeout=1).status_code == 200:
                    return
            if self.proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"tiercompact serve did not start:\n{self.log_path.read_text()[-3000:]}")
            time.sleep(0.05)

    def stop(self) -> None:
        t0 = time.perf_counter()
        self.proc.send_signal(signal.SIGTERM)
        try:
            self.exit_code = self.proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.exit_code = self.proc.wait()
        self.stop_s = round(time.perf_counter() - t0, 2)


@contextlib.contextmanager
def serve(root: Path, extra_args: tuple[str, ...] = (), shortened: bool = True) -> Iterator[ServeProcess]:
    """``shortened``: the cleaner's and tiering loop's intervals cut short (the load test's background work)."""
    srv = ServeProcess(root, extra_args, shortened)
    try:
        srv.wait_ready()
        yield srv
    finally:
        if srv.exit_code is None:
            srv.stop()


TPUT_TOPIC = "tput"
TPUT_CLIENTS = 8
TPUT_RECORDS = 100
TPUT_VALUE_BYTES = 100
TPUT_KEYS = 10_000


def _cpu_s(proc: psutil.Process) -> float:
    t = proc.cpu_times()
    return t.user + t.system


def _phase(srv: ServeProcess, name: str, requests: list[list[bytes]], seconds: float,
           check: Any = None) -> dict[str, Any]:
    server = psutil.Process(srv.proc.pid)
    loadgen.run("127.0.0.1", srv.port, requests, min(1.0, seconds / 4), check)  # warm-up, not counted
    load_before = os.getloadavg()
    cpu0, client0 = _cpu_s(server), time.process_time()
    out = loadgen.run("127.0.0.1", srv.port, requests, seconds, check)
    server_cpu, client_cpu = _cpu_s(server) - cpu0, time.process_time() - client0
    n = len(out.latencies)
    lat = sorted(out.latencies)
    return {
        "clients": len(requests), "records_per_request": TPUT_RECORDS, "requests": n,
        "seconds": round(out.elapsed_s, 2), "requests_per_sec": round(n / out.elapsed_s, 1),
        "records_per_sec": round(n * TPUT_RECORDS / out.elapsed_s),
        "p50_ms": round(_pct(lat, 50) * 1000, 2), "p99_ms": round(_pct(lat, 99) * 1000, 2),
        "max_ms": round(lat[-1] * 1000, 2) if lat else 0.0,
        "server_cpu_ms_per_request": round(server_cpu / max(n, 1) * 1000, 3),
        "server_cpu_share": round(server_cpu / out.elapsed_s, 2),
        "client_cpu_share": round(client_cpu / out.elapsed_s, 2),
        "loadavg_before": [round(x, 2) for x in load_before],
        "loadavg_after": [round(x, 2) for x in os.getloadavg()],
        "failed_requests": len(out.failures), "failures_sample": out.failures[:3],
        "name": name,
    }


def throughput(srv: ServeProcess, seconds: float) -> dict[str, Any]:
    """Produce then read requests of 100 records from 8 clients; see the module docstring."""
    host = f"127.0.0.1:{srv.port}"
    with httpx.Client(base_url=srv.url, timeout=60) as c:
        # cleanup.policy=delete with unlimited retention: no background round competes with the
        # requests for the server's CPU (the load test below runs them together)
        c.post("/v1/topics", json={"name": TPUT_TOPIC, "partitions": TPUT_CLIENTS, "config": {
            "cleanup.policy": "delete", "retention.ms": -1, "retention.bytes": -1, "remote.storage.enable": True,
            "local.retention.ms": -1, "segment.bytes": 64 * 1024 * 1024}}).raise_for_status()
    rng = random.Random(7)
    produce = []
    for client in range(TPUT_CLIENTS):
        reqs = []
        for _ in range(64):
            recs = [{"key": f"key-{rng.randrange(TPUT_KEYS):011d}",
                     "value": "".join(rng.choices("abcdefghijklmnopqrstuvwxyz0123456789", k=TPUT_VALUE_BYTES))}
                    for _ in range(TPUT_RECORDS)]
            body = json.dumps({"records": recs}, separators=(",", ":")).encode()
            reqs.append(loadgen.build_request("POST", f"/v1/topics/{TPUT_TOPIC}/partitions/{client}/records",
                                              host, body))
        produce.append(reqs)
    res_produce = _phase(srv, "produce", produce, seconds)
    with httpx.Client(base_url=srv.url, timeout=60) as c:
        ends = [c.get(f"/v1/topics/{TPUT_TOPIC}/partitions/{p}").json()["log_end_offset"]
                for p in range(TPUT_CLIENTS)]
    reads = [[loadgen.build_request(
        "GET", f"/v1/topics/{TPUT_TOPIC}/partitions/{client}/records?offset={rng.randrange(max(end - TPUT_RECORDS, 1))}"
               f"&max_records={TPUT_RECORDS}", host) for _ in range(256)]
        for client, end in enumerate(ends)]

    def check_read(_: int, body: bytes) -> str | None:
        # orjson: the load generator shares the 2 cores with the server, and json.loads of a
        # page of 100 records cost it a fifth of a core at 1,000 reads/s
        got = len(orjson.loads(body)["records"])
        return None if got == TPUT_RECORDS else f"read returned {got} records, not {TPUT_RECORDS}"

    res_read = _phase(srv, "read", reads, seconds, check_read)
    return {"produce": res_produce, "read": res_read,
            "value_bytes": TPUT_VALUE_BYTES, "key_bytes": 15, "partitions": TPUT_CLIENTS,
            "topic_config": "cleanup.policy=delete, retention.ms=-1 (no background rounds during the phases)",
            "targets": {"requests_per_sec": 1500, "p99_ms": 50},
            "load_generator": "bench.loadgen: asyncio, one keep-alive connection per client, in the bench "
                              "process (separate from the server)"}


def main() -> None:
    duration = 5.0 if quick() else 20.0
    tput_seconds = 3.0 if quick() else 10.0
    if os.environ.get("BENCH_SERVICE_ONLY_THROUGHPUT"):
        root = Path(tempfile.mkdtemp(prefix="tiercompact-bench-service-"))
        with serve(root) as srv:
            print(json.dumps(throughput(srv, tput_seconds), indent=2))
        shutil.rmtree(root, ignore_errors=True)
        return
    root = Path(tempfile.mkdtemp(prefix="tiercompact-bench-service-"))
    stats = Stats()
    model: dict[int, dict[str, tuple[int, str | None]]] = {p: {} for p in range(PARTITIONS)}
    model_lock = threading.Lock()
    stop = threading.Event()
    produced = [0]

    with serve(root) as srv:
        tput = throughput(srv, tput_seconds)
        base = srv.url

        def producer(pid: int) -> None:
            rng = random.Random(pid)
            with httpx.Client(base_url=base, timeout=60) as c:
                seq = 0
                while not stop.is_set():
                    p = rng.randrange(PARTITIONS)
                    recs = []
                    for _ in range(BATCH):
                        k = f"key-{rng.randrange(KEYS)}"
                        v = None if rng.random() < 0.05 else f"p{pid}-{seq}-{'x' * rng.randrange(20, 200)}"
                        seq += 1
                        recs.append((k, v))
                    r = stats.timed("produce", lambda p=p, recs=recs: c.post(
                        f"/v1/topics/{TOPIC}/partitions/{p}/records",
                        json={"records": [{"key": k, "value": v} for k, v in recs], "compression": "lz4"}))
                    if r.status_code != 200:
                        continue
                    b = r.json()["base_offset"]
                    with model_lock:
                        m = model[p]
                        for i, (k, v) in enumerate(recs):
                            if k not in m or m[k][0] < b + i:
                                m[k] = (b + i, v)
                        produced[0] += len(recs)

        def reader(rid: int) -> None:
            rng = random.Random(1000 + rid)
            with httpx.Client(base_url=base, timeout=60) as c:
                while not stop.is_set():
                    p = rng.randrange(PARTITIONS)
                    r = stats.timed("describe", lambda p=p: c.get(f"/v1/topics/{TOPIC}/partitions/{p}"))
                    if r.status_code != 200:
                        continue
                    hw = r.json()["log_end_offset"]
                    offset = rng.randrange(max(hw, 1))
                    for _ in range(3):
                        r = stats.timed("read", lambda p=p, o=offset: c.get(
                            f"/v1/topics/{TOPIC}/partitions/{p}/records", params={"offset": o, "max_records": 200}))
                        if r.status_code != 200:
                            break
                        page = r.json()
                        offs = [x["offset"] for x in page["records"]]
                        if offs != sorted(offs) or (offs and offs[0] < offset):
                            with stats.lock:
                                stats.failures.append(f"read: offsets out of order from {offset}: {offs[:5]}")
                        if not offs:
                            break
                        offset = page["next_offset"]

        def admin() -> None:
            rng = random.Random(99)
            with httpx.Client(base_url=base, timeout=120) as c:
                while not stop.wait(1.0):
                    p = rng.randrange(PARTITIONS)
                    path = f"/v1/topics/{TOPIC}/partitions/{p}"
                    stats.timed("roll", lambda path=path: c.post(f"{path}/roll"))
                    stats.timed("tier", lambda path=path: c.post(f"{path}/tier"))
                    stats.timed("clean", lambda path=path: c.post(f"{path}/clean"))
                    stats.timed("metrics", lambda: c.get("/metrics"))

        with httpx.Client(base_url=base, timeout=60) as c:
            r = c.post("/v1/topics", json={"name": TOPIC, "partitions": PARTITIONS, "config": {
                "cleanup.policy": "compact", "remote.storage.enable": True, "segment.bytes": 256 * 1024,
                "segment.ms": 2000, "min.cleanable.dirty.ratio": 0.2, "local.retention.ms": -1}})
            r.raise_for_status()

        threads = ([threading.Thread(target=producer, args=(i,)) for i in range(PRODUCERS)]
                   + [threading.Thread(target=reader, args=(i,)) for i in range(READERS)]
                   + [threading.Thread(target=admin)])
        t0 = time.perf_counter()
        for t in threads:
            t.start()
        time.sleep(duration)
        stop.set()
        for t in threads:
            t.join(120)
        elapsed = time.perf_counter() - t0

        # final check: clean once more, read everything, compare the newest record of every key
        lost = 0
        final_records = 0
        with httpx.Client(base_url=base, timeout=120) as c:
            for p in range(PARTITIONS):
                path = f"/v1/topics/{TOPIC}/partitions/{p}"
                c.post(f"{path}/roll").raise_for_status()
                c.post(f"{path}/tier").raise_for_status()
                c.post(f"{path}/clean").raise_for_status()
                seen: dict[str, tuple[int, str | None]] = {}
                offset = 0
                while True:
                    page = c.get(f"{path}/records", params={"offset": offset, "max_records": 5000}).json()
                    if not page["records"]:
                        break
                    for x in page["records"]:
                        seen[x["key"]] = (x["offset"], x["value"])
                    final_records += len(page["records"])
                    offset = page["next_offset"]
                lost += sum(1 for k, v in model[p].items() if seen.get(k) != v)
            metrics = c.get("/metrics").text
            cleaner = c.get("/v1/cleaner").json()
        srv.stop()
    server_log = srv.log_path.read_text(errors="replace")
    shutil.rmtree(root, ignore_errors=True)

    total = sum(len(v) for v in stats.latency.values())
    per_kind = {k: {"requests": len(v), "per_sec": round(len(v) / elapsed, 1),
                    "p50_ms": round(statistics.median(v) * 1000, 2), "p99_ms": round(_pct(v, 99) * 1000, 2),
                    "max_ms": round(max(v) * 1000, 2)} for k, v in sorted(stats.latency.items())}
    all_lat = [x for v in stats.latency.values() for x in v]
    result = {
        "duration_s": round(elapsed, 2), "partitions": PARTITIONS, "producer_threads": PRODUCERS,
        "reader_threads": READERS, "records_per_produce": BATCH, "keys_per_partition": KEYS,
        "requests": total, "requests_per_sec": round(total / elapsed, 1),
        "p99_ms": round(_pct(all_lat, 99) * 1000, 2),
        "records_produced": produced[0], "records_produced_per_sec": round(produced[0] / elapsed, 1),
        "final_records_read": final_records, "keys_lost_or_wrong": lost,
        "failed_requests": len(stats.failures), "failures_sample": stats.failures[:5],
        "cleaner_rounds_seen": len(cleaner["last_runs"]), "dead_cleaner_threads": cleaner["dead_threads"],
        "metrics_exposed": all(n in metrics for n in ("max_clean_time_secs", "remote_bytes_uploaded_total")),
        "by_kind": per_kind, "client_peak_rss_mb": round(peak_rss_mb(), 1),
        "server_peak_rss_mb": round(resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024.0, 1),
        "load_generator": "separate process (this one) against a `tiercompact serve` subprocess",
        "sigterm_stop_s": srv.stop_s, "sigterm_exit_code": srv.exit_code,
        "server_errors_logged": server_log.count(" ERROR "),
        "throughput": tput,
        "loadavg_end": [round(x, 2) for x in os.getloadavg()],
        "ok": lost == 0 and not stats.failures and srv.exit_code == 0
              and not tput["produce"]["failed_requests"] and not tput["read"]["failed_requests"],
    }
    write_result("service", result)
    if not result["ok"]:
        raise AssertionError(f"service load test failed: {lost} keys lost/wrong, failures {stats.failures[:3]}, "
                             f"exit code after SIGTERM {srv.exit_code}")


if __name__ == "__main__":
    main()
