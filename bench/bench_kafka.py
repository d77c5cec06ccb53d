"""Kafka listener throughput against a real ``tiercompact serve`` -> bench/results/kafka.json.

One ``tiercompact serve`` process (HTTP API plus the Kafka listener on free ports); the load comes from
confluent-kafka in a separate process (:mod:`bench.kafka_client`, one process per phase). For 1 and 8 partitions:
produce 1 KiB records (lz4, acks=all, linger.ms=5; distinct text values that lz4 compresses about 2-fold, the
ratio seen reported per phase) as fast as the producer goes, then at half that rate for the
produce latency (p50/p99, librdkafka's per-message figure), then 100-byte records; consume the 1 KiB topic from
local segments, then turn on ``remote.storage.enable`` with a ``local.retention.ms`` of 1 ms (PATCH of its config:
nothing is uploaded in the background while the local phases run), roll and tier every partition through the HTTP
API (the local copies go, removed a second later: ``FILE_DELETE_DELAY_MS``) and consume it again from the remote
segments. Each phase reports MB/s, records/s and the
server's CPU seconds (psutil on the server's pid) per GB; the HTTP API's produce and read figures (the throughput
phases of ``bench service``) are measured against the same server in the same run. The targets per server
CPU-second are checked and the JSON says whether each is met. BENCH_QUICK=1 runs every phase briefly.

The two 1 KiB produce phases, full rate and half rate, whose figures the targets judge, run three times each and
report the median run (by MB per server CPU-second, and by p99 latency): on a small shared machine one 8-second run
can land 10-40% off the next. Every run's figures stay in the JSON (``runs``). Transactions and consumer groups are
measured by ``bench txn`` and ``bench groups``.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import httpx
import psutil
from prometheus_client.parser import text_string_to_metric_families

from bench import bench_service
from bench.common import quick, write_result

ROOT = Path(__file__).resolve().parents[1]
#: produce MB (1 KiB records) and local fetch MB per server CPU-second; p99 produce latency at half load
TARGETS = {"produce_mb_per_cpu_s": 300.0, "fetch_local_mb_per_cpu_s": 1000.0, "p99_produce_ms_at_half_load": 10.0}


def _free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _cpu_s(proc: psutil.Process) -> float:
    t = proc.cpu_times()
    return t.user + t.system


def _client(spec: dict[str, Any]) -> dict[str, Any]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("TIERCOMPACT_")}
    env["PYTHONPATH"] = str(ROOT)
    out = subprocess.run([sys.executable, "-m", "bench.kafka_client", json.dumps(spec)], capture_output=True,
                         text=True, cwd=ROOT, env=env, timeout=900)
    if out.returncode != 0:
        raise RuntimeError(f"kafka client failed: {out.stderr[-3000:]}")
    return dict(json.loads(out.stdout.strip().splitlines()[-1]))


def _client_versions() -> dict[str, str]:
    """confluent-kafka's and its librdkafka's versions: how much a ProduceRequest carries, and how well lz4 frames
    compress, changed between librdkafka releases."""
    import confluent_kafka

    return {"confluent_kafka": confluent_kafka.__version__, "librdkafka": confluent_kafka.libversion()[0]}


#: the server's CPU share while idle (its background threads), measured before the phases
IDLE = {"cpu_share": 0.0}


def _idle_share(server: psutil.Process, seconds: float) -> float:
    cpu0 = _cpu_s(server)
    time.sleep(seconds)
    return (_cpu_s(server) - cpu0) / seconds


class _Counters:
    """What the server's /metrics say of ``api`` so far: its requests answered (every version), the time histogram of
    those requests (Kafka's TotalTimeMs: from a request's arrival to its answer being ready), and the record batch
    bytes appended (Kafka's BytesInPerSec, every topic: what came over the wire, compressed)."""

    def __init__(self, c: httpx.Client, api: str) -> None:
        self.requests = self.bytes_in = 0.0
        self.buckets: dict[float, float] = {}
        for family in text_string_to_metric_families(c.get("/metrics").text):
            for sample in family.samples:
                if sample.labels.get("request") == api and sample.name == "kafka_network_requestmetrics_requests_total":
                    self.requests += sample.value
                elif sample.labels.get("request") == api and \
                        sample.name == "kafka_network_requestmetrics_totaltimems_bucket":
                    le = float(sample.labels["le"])
                    self.buckets[le] = self.buckets.get(le, 0.0) + sample.value
                elif sample.name == "kafka_server_brokertopicmetrics_bytesin_total":
                    self.bytes_in += sample.value

    def server_ms_at(self, before: _Counters, q: float) -> float | None:
        """The upper bound of the histogram bucket holding the ``q`` quantile of the requests answered since
        ``before`` (the server's side of the latency: no linger, no client, no network)."""
        counts = sorted((le, n - before.buckets.get(le, 0.0)) for le, n in self.buckets.items())
        total = counts[-1][1] if counts else 0.0
        for le, n in counts:
            if total and n >= q * total:
                return le
        return None


def _phase(server: psutil.Process, spec: dict[str, Any], c: httpx.Client) -> dict[str, Any]:
    api = "Produce" if spec["action"] == "produce" else "Fetch"
    before = _Counters(c, api)
    times0, t0 = server.cpu_times(), time.perf_counter()
    load = os.getloadavg()[0]
    r = _client(spec)
    times, wall = server.cpu_times(), time.perf_counter() - t0
    user, system = times.user - times0.user, times.system - times0.system
    cpu = user + system
    after = _Counters(c, api)
    requests = after.requests - before.requests  # the client's warm-up included, as in the CPU figure
    mb = r["bytes"] / 1e6
    net = max(cpu - IDLE["cpu_share"] * wall, 1e-9)  # less what the idle server spends in the same time
    r.update({"mb_per_s": round(mb / r["seconds"], 1), "records_per_s": round(r["records"] / r["seconds"]),
              "server_cpu_s": round(cpu, 2), "server_cpu_s_per_gb": round(cpu / max(mb / 1000, 1e-9), 2),
              "mb_per_server_cpu_s": round(mb / max(cpu, 1e-9), 1),
              "mb_per_server_cpu_s_net_of_idle": round(mb / net, 1), "seconds": round(r["seconds"], 2),
              "client_process_seconds": round(wall, 2), "loadavg_before": round(load, 2),
              # librdkafka sends one ProduceRequest per partition batch: what the per-request costs are spread over
              "requests": int(requests), "server_cpu_us_per_request": round(cpu / max(requests, 1) * 1e6),
              # the kernel's share: on a virtual machine, page cache growing into memory the host has not yet
              # backed costs several times what it does on bare metal, and varies from run to run with it
              "server_user_s": round(user, 2), "server_system_s": round(system, 2)})
    if api == "Produce":
        # the record bytes over what the batches took on the wire (lz4), the warm-up's included on both sides
        wire = after.bytes_in - before.bytes_in
        r["wire_mb"] = round(wire / 1e6, 1)
        r["compression_ratio"] = round(r["sent_bytes"] / max(wire, 1), 2)
        # the server's share of the latency, as bucket bounds of its Produce time histogram
        r["server_p50_ms_at_most"] = after.server_ms_at(before, 0.5)
        r["server_p99_ms_at_most"] = after.server_ms_at(before, 0.99)
    return r


#: the bench topics' file.delete.delay.ms: the local copies ``_tier_all`` drops are removed while the remote consume
#: phase runs, not a minute later in the next partition count's produce phases. (With Kafka's 60 s, the 1-partition
#: topic's gigabytes went during the 8-partition half-load runs, which then measured a disk busy freeing blocks:
#: 80-100 ms p99 before removal was paced, log/file_remover.py, and still the worst run after.) At 1 s or more the
#: removal is paced, as with the default.
FILE_DELETE_DELAY_MS = 1000


def _create(c: httpx.Client, name: str, partitions: int) -> None:
    config: dict[str, Any] = {"cleanup.policy": "delete", "retention.ms": -1, "retention.bytes": -1,
                              "segment.bytes": 256 * 1024 * 1024, "file.delete.delay.ms": FILE_DELETE_DELAY_MS}
    c.post("/v1/topics", json={"name": name, "partitions": partitions, "config": config}).raise_for_status()


def _make_remote(c: httpx.Client, name: str) -> None:
    """Tier the topic from now on, keeping no local copy of a tiered segment (set after the local phases, so no
    upload runs in the background while they are measured)."""
    c.patch(f"/v1/topics/{name}/config", json={"config": {
        "remote.storage.enable": True, "local.retention.ms": 1, "local.retention.bytes": -1}}).raise_for_status()


def _tier_all(c: httpx.Client, topic: str, partitions: int) -> int:
    """Roll and tier every partition; answers how many segments are left with a local copy (0 wanted)."""
    left = 0
    for p in range(partitions):
        path = f"/v1/topics/{topic}/partitions/{p}"
        c.post(f"{path}/roll", timeout=300).raise_for_status()
        deadline = time.monotonic() + 120
        while True:
            c.post(f"{path}/tier", timeout=300).raise_for_status()
            segs = c.get(path).json()["segments"]
            local = [s for s in segs[:-1] if s["tier"] != "remote"]
            if not local or time.monotonic() > deadline:
                left += len(local)
                break
            time.sleep(0.2)
    return left


#: runs of each produce phase the targets judge (the median one is reported)
TARGET_RUNS = 3
#: what each run of a judged phase keeps in ``runs``
_RUN_FIELDS = ("mb_per_s", "mb_per_server_cpu_s", "server_cpu_us_per_request", "requests", "p50_ms", "p99_ms",
               "server_p99_ms_at_most", "round_trip_p99_ms", "server_user_s", "server_system_s")


def _median_phase(server: psutil.Process, spec: dict[str, Any], c: httpx.Client, by: str) -> dict[str, Any]:
    """:func:`_phase` TARGET_RUNS times (once with BENCH_QUICK); the run with the median ``by``, and every run's
    main figures under ``runs``."""
    runs = [_phase(server, spec, c) for _ in range(1 if quick() else TARGET_RUNS)]
    chosen = sorted(runs, key=lambda r: r[by])[len(runs) // 2]
    return {**chosen, "runs": [{k: r.get(k) for k in _RUN_FIELDS} for r in runs], "median_of": by}


def run_partitions(srv: bench_service.ServeProcess, bootstrap: str, partitions: int, seconds: float,
                   c: httpx.Client) -> dict[str, Any]:
    server = psutil.Process(srv.proc.pid)
    big, small = f"kib-{partitions}", f"small-{partitions}"
    _create(c, big, partitions)
    _create(c, small, partitions)
    common = {"bootstrap": bootstrap, "partitions": partitions}
    warm = 0.5 if quick() else 1.0
    peak = _median_phase(server, {**common, "action": "produce", "topic": big, "value_bytes": 1024 - 16,
                                  "seconds": seconds, "rate": 0, "warmup": warm}, c, "mb_per_server_cpu_s")
    half = _median_phase(server, {**common, "action": "produce", "topic": big, "value_bytes": 1024 - 16,
                                  "seconds": seconds, "rate": max(1, peak["records_per_s"] // 2), "warmup": warm},
                         c, "p99_ms")
    # the same half load at acks=1 (answered after the append, no sync): the latency floor of this machine and
    # client, against which the acks=all figure shows what the sync costs (not judged)
    half_acks1 = _phase(server, {**common, "action": "produce", "topic": big, "value_bytes": 1024 - 16,
                                 "seconds": seconds, "rate": max(1, peak["records_per_s"] // 2), "warmup": warm,
                                 "acks": "1"}, c)
    # and at acks=0 (no answer awaited: librdkafka reports a record delivered once its request is written to the
    # socket): the floor of the client alone (linger.ms, lz4, the delivery callbacks) on this machine, which no
    # server can go below; acks=all's p99 less this floor is what the server and its sync add (not judged)
    half_acks0 = _phase(server, {**common, "action": "produce", "topic": big, "value_bytes": 1024 - 16,
                                 "seconds": seconds, "rate": max(1, peak["records_per_s"] // 2), "warmup": warm,
                                 "acks": "0"}, c)
    small_r = _phase(server, {**common, "action": "produce", "topic": small, "value_bytes": 100 - 16,
                              "seconds": seconds, "rate": 0, "warmup": warm}, c)
    total = sum(c.get(f"/v1/topics/{big}/partitions/{p}").json()["log_end_offset"] for p in range(partitions))
    local = _phase(server, {**common, "action": "consume", "topic": big, "records": total}, c)
    _make_remote(c, big)
    left = _tier_all(c, big, partitions)
    remote = _phase(server, {**common, "action": "consume", "topic": big, "records": total}, c)
    remote["segments_left_local"] = left
    return {"produce_1kib": peak, "produce_1kib_half_rate": half, "produce_1kib_half_rate_acks1": half_acks1,
            "produce_1kib_half_rate_acks0": half_acks0,
            "produce_100b": small_r,
            "fetch_local": local, "fetch_remote": remote}


def main() -> None:
    seconds = 2.0 if quick() else 8.0
    root = Path(tempfile.mkdtemp(prefix="tiercompact-bench-kafka-"))
    kport = _free_port()
    args = ("--kafka-port", str(kport), "--advertised-listener", f"127.0.0.1:{kport}")
    results: dict[str, Any] = {}
    try:
        with bench_service.serve(root, args, shortened=False) as srv:
            IDLE["cpu_share"] = _idle_share(psutil.Process(srv.proc.pid), 2.0 if quick() else 5.0)
            with httpx.Client(base_url=srv.url, timeout=60) as c:
                for partitions in (1, 8):
                    results[f"{partitions}_partitions"] = run_partitions(srv, f"127.0.0.1:{kport}", partitions,
                                                                         seconds, c)
            http = bench_service.throughput(srv, seconds)
    finally:
        shutil.rmtree(root, ignore_errors=True)
    record_bytes = bench_service.TPUT_VALUE_BYTES + 15
    http_side = {}
    for kind in ("produce", "read"):
        r = http[kind]
        mb = r["records_per_sec"] * record_bytes / 1e6
        http_side[kind] = {**r, "mb_per_s": round(mb, 2),
                           "mb_per_server_cpu_s": round(mb / max(r["server_cpu_share"], 1e-9), 1)}
    worst_produce = min(results[k]["produce_1kib"]["mb_per_server_cpu_s"] for k in results)
    worst_fetch = min(results[k]["fetch_local"]["mb_per_server_cpu_s"] for k in results)
    worst_p99 = max(results[k]["produce_1kib_half_rate"]["p99_ms"] for k in results)
    met = {"produce_mb_per_cpu_s": worst_produce >= TARGETS["produce_mb_per_cpu_s"],
           "fetch_local_mb_per_cpu_s": worst_fetch >= TARGETS["fetch_local_mb_per_cpu_s"],
           "p99_produce_ms_at_half_load": worst_p99 <= TARGETS["p99_produce_ms_at_half_load"]}
    write_result("kafka", {
        "client": "confluent-kafka (librdkafka) in a separate process per phase; lz4, acks=all, linger.ms=5; "
                  "every record's value distinct text (about 2-fold with lz4)",
        "client_versions": _client_versions(),
        "seconds_per_phase": seconds, "results": results,
        "server": "tiercompact serve with its default intervals (2 cleaner threads); server CPU is the whole "
                  "process's (psutil) while the client process runs; *_net_of_idle takes off what the idle "
                  "server spends in the same time",
        "server_idle_cpu_share": round(IDLE["cpu_share"], 4),
        "http": {"records_per_request": bench_service.TPUT_RECORDS, "record_bytes": record_bytes,
                 "partitions": http["partitions"], **http_side},
        "targets": TARGETS, "measured": {"produce_mb_per_cpu_s": worst_produce,
                                         "fetch_local_mb_per_cpu_s": worst_fetch,
                                         "p99_produce_ms_at_half_load": worst_p99},
        "targets_met": met, "target_runs": 1 if quick() else TARGET_RUNS,
        "loadavg_end": [round(x, 2) for x in os.getloadavg()],
    })
    bad = [(k, ph) for k, v in results.items() for ph, r in v.items()
           if r.get("errors") or r.get("complete") is False or r.get("segments_left_local")]
    if bad:
        raise AssertionError(f"kafka bench phases failed: {bad}")


if __name__ == "__main__":
    main()
