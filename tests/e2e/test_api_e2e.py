"""End to end over real HTTP: a uvicorn server on a loopback port, driven with httpx.

create a compacted tiered topic -> produce a keyed workload with updates and tombstones ->
roll -> tier -> clean -> consume from offset 0 == the model's compacted view; then stop
the server, start a new one on the same data dir and read the same again.
"""

from __future__ import annotations

import random
import subprocess
import sys
import time
from pathlib import Path

import httpx

from service.config import load_config
from service.node import Node
from service.server import ServerThread

TOKEN = "e2e-token-0123"
AUTH = {"Authorization": f"Bearer {TOKEN}"}
P0 = "/v1/topics/orders/partitions/0"


def _node(data: Path) -> Node:
    return Node(load_config({"data_dir": data, "token": TOKEN, "cleaner_threads": 1,
                             "tiering_interval_ms": 3_600_000}, env={}))


def _consume(c: httpx.Client, isolation: str = "read_uncommitted") -> list[tuple[int, str | None, str | None]]:
    out, offset = [], 0
    while True:
        r = c.get(f"{P0}/records", params={"offset": offset, "max_records": 97, "isolation": isolation})
        assert r.status_code == 200, r.text
        page = r.json()
        if not page["records"]:
            assert page["next_offset"] >= page["high_watermark"] or isolation == "read_committed"
            return out
        out += [(x["offset"], x["key"], x["value"]) for x in page["records"]]
        offset = page["next_offset"]


def _compacted(model: list[tuple[int, str, str | None]]) -> list[tuple[int, str, str | None]]:
    last: dict[str, tuple[int, str, str | None]] = {}
    for rec in model:
        last[rec[1]] = rec
    return sorted(last.values())


def test_produce_roll_tier_clean_consume_restart(tmp_path: Path) -> None:
    data = tmp_path / "data"
    rng = random.Random(7)
    model: list[tuple[int, str, str | None]] = []
    with ServerThread(_node(data)) as srv, httpx.Client(base_url=srv.url, headers=AUTH, timeout=60) as c:
        assert c.get("/healthz").json() == {"status": "ok"}
        r = c.post("/v1/topics", json={"name": "orders", "config": {
            "cleanup.policy": "compact", "remote.storage.enable": True, "segment.bytes": 8192,
            "local.retention.ms": -1, "min.cleanable.dirty.ratio": 0.99}})
        assert r.status_code == 201, r.text
        for batch in range(40):
            recs = []
            for _ in range(25):
                key = f"k{rng.randrange(60)}"
                value = None if rng.random() < 0.1 else f"v{batch}-{rng.randrange(10**6)}"
                recs.append({"key": key, "value": value})
            r = c.post(f"{P0}/records", json={"records": recs, "compression": rng.choice(["none", "zstd", "lz4"])})
            assert r.status_code == 200, r.text
            base = r.json()["base_offset"]
            model += [(base + i, x["key"], x["value"]) for i, x in enumerate(recs)]
        assert _consume(c) == model
        assert c.post(f"{P0}/roll").json() == {"base_offset": 1000}
        tiered = c.post(f"{P0}/tier").json()
        assert tiered["copied"] and tiered["copied"][0] == 0
        part = c.get(P0).json()
        assert {s["tier"] for s in part["segments"]} >= {"both"}
        assert part["remote_size_bytes"] > 0
        stats = c.post(f"{P0}/clean").json()
        assert stats["records_read"] >= 1000 and stats["checkpoint"] == 1000
        assert c.post(f"{P0}/tier").json()["copied"] == []  # copied once, never again
        expected = _compacted(model)
        assert _consume(c) == expected
        assert _consume(c, "read_committed") == expected
        metrics = c.get("/metrics").text
        assert "remote_bytes_uploaded_total" in metrics
        uploaded = [ln for ln in metrics.splitlines() if ln.startswith("remote_bytes_uploaded_total ")]
        assert float(uploaded[0].split()[1]) > 0
    assert (data / "orders-0" / ".clean-shutdown").exists()

    with ServerThread(_node(data)) as srv, httpx.Client(base_url=srv.url, headers=AUTH, timeout=60) as c:
        assert _consume(c) == expected
        part = c.get(P0).json()
        assert part["log_end_offset"] == 1000 and part["cleaner_checkpoint"] == 1000
        r = c.post(f"{P0}/records", json={"records": [{"key": "k1", "value": "after-restart"}]})
        assert r.json()["base_offset"] == 1000


def test_serve_subprocess_answers_and_stops_on_sigterm(tmp_path: Path) -> None:
    """`tiercompact serve` as a real process: health, an authenticated write, graceful SIGTERM."""
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    proc = subprocess.Popen([sys.executable, "-m", "service.cli", "serve", "--data-dir", str(tmp_path / "d"),
                             "--port", str(port), "--token", TOKEN, "--log-level", "warning"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, cwd=Path(__file__).resolve().parents[2])
    try:
        url = f"http://127.0.0.1:{port}"
        deadline = time.monotonic() + 30
        while True:
            try:
                if httpx.get(f"{url}/healthz", timeout=1).status_code == 200:
                    break
            except httpx.TransportError:
                pass
            assert proc.poll() is None, proc.stderr.read() if proc.stderr else ""
            assert time.monotonic() < deadline
            time.sleep(0.05)
        assert httpx.post(f"{url}/v1/topics", json={"name": "t"}).status_code == 401
        assert httpx.post(f"{url}/v1/topics", json={"name": "t"}, headers=AUTH).status_code == 201
        assert httpx.post(f"{url}/v1/topics/t/partitions/0/records", json={"records": [{"key": "a", "value": "b"}]},
                          headers=AUTH).json()["base_offset"] == 0
    finally:
        proc.terminate()
        rc = proc.wait(timeout=60)
    # uvicorn shuts down gracefully, then re-raises the captured SIGTERM so the parent sees it
    assert rc in (0, -15)
    assert (tmp_path / "d" / "t-0" / ".clean-shutdown").exists()
