"""/v1/cleaner reports both cleaner pools as configured and as running, and /metrics
counts the cleans run through the API like the background threads' rounds."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from service.app import create_app
from tests.service.conftest import make_node

P0 = "/v1/topics/t/partitions/0"


def _status(tmp_path: Path, **options: object) -> dict:
    node = make_node(tmp_path, **options)
    node.start()
    try:
        with TestClient(create_app(node)) as c:
            r = c.get("/v1/cleaner")
            assert r.status_code == 200, r.text
            return dict(r.json())
    finally:
        node.shutdown()


def test_no_background_threads_are_reported_as_none(tmp_path: Path) -> None:
    """--cleaner-threads 0 used to be reported as 1 thread."""
    s = _status(tmp_path, cleaner_threads=0)
    assert s["threads"] == 0
    assert s["background_cleaning"] is False
    assert s["live_threads"] == 0
    assert s["pools"]["local"] == {"configured": 0, "live": 0, "dead": 0}
    assert s["pools"]["tiered"]["live"] == 0


@pytest.mark.parametrize(("local", "tiered"), [(1, 1), (2, 3), (1, 0)])
def test_both_pools_are_reported_configured_and_live(tmp_path: Path, local: int, tiered: int) -> None:
    s = _status(tmp_path, cleaner_threads=local, tiered_cleaner_threads=tiered)
    assert (s["threads"], s["tiered_threads"]) == (local, tiered)
    assert s["pools"] == {"local": {"configured": local, "live": local, "dead": 0},
                          "tiered": {"configured": tiered, "live": tiered, "dead": 0}}
    assert s["live_threads"] == local + tiered
    assert s["background_cleaning"] is True and s["dead_threads"] == 0


def _samples(client: TestClient) -> dict[str, float]:
    r = client.get("/metrics")
    assert r.status_code == 200, r.text
    out = {}
    for line in r.text.splitlines():
        if line and not line.startswith("#"):
            name, value = line.rsplit(" ", 1)
            out[name] = float(value)
    return out


@pytest.fixture
def small_map_client(tmp_path: Path) -> Iterator[TestClient]:
    node = make_node(tmp_path, dedupe_buffer_size=2048)  # 10 keys fill a visible share of the map
    with TestClient(create_app(node)) as c:
        yield c
    node.shutdown()


def test_cleans_run_through_the_api_feed_the_cleaner_metrics(small_map_client: TestClient) -> None:
    """cleaner_recopy_percent and max_buffer_utilization_percent stayed 0 after API cleans
    (only the background threads' rounds were counted)."""
    client = small_map_client
    assert client.post("/v1/topics", json={"name": "t", "config": {"cleanup.policy": "compact"}}).status_code == 201
    records = [{"key": f"k{i % 10}", "value": f"v{i}"} for i in range(200)]
    assert client.post(f"{P0}/records", json={"records": records}).status_code == 200
    assert client.post(f"{P0}/roll").status_code == 200
    before = _samples(client)
    assert before["cleaner_recopy_percent"] == 0 and before["max_buffer_utilization_percent"] == 0
    stats = client.post(f"{P0}/clean").json()
    assert 0 < stats["bytes_written"] < stats["bytes_read"]
    after = _samples(client)
    assert after["cleaner_recopy_percent"] == int(100 * stats["bytes_written"] / stats["bytes_read"])
    assert after["max_buffer_utilization_percent"] == int(100 * stats["buffer_utilization"])
    assert after["max_buffer_utilization_percent"] > 0
    assert after["max_clean_time_secs"] == int(stats["elapsed_ms"] / 1000)
