"""Requests stay bounded on a slow object store (Kafka's request.timeout.ms idea).

A store that answers every call correctly but late (no error: the circuit breaker stays
closed) used to stall ``POST .../tier`` for as long as the deferred-delete pass took: it held
the partition lock across every object deletion of every superseded segment. Now background
passes hold the lock around metadata writes only, and a request that still cannot get the
partition within ``request_timeout_ms`` answers 503 with Retry-After (REQUEST_TIMED_OUT on the
Kafka port).
"""

from __future__ import annotations

import threading
import time
import warnings
from collections.abc import Iterator
from pathlib import Path

import pytest

from log.errors import PartitionBusyError
from log.locks import BoundedLock, request_scope
from log.types import TopicPartition
from service.app import create_app
from service.config import load_config
from service.kafka.errors import REQUEST_TIMED_OUT, error_code
from service.node import Node
from tests.support.faults import SlowObjectStore

with warnings.catch_warnings():
    warnings.simplefilter("ignore")
    from fastapi.testclient import TestClient

P0 = "/v1/topics/t/partitions/0"
TP = TopicPartition("t", 0)
TIMEOUT_MS = 1500
DELAY_S = 0.15


@pytest.fixture
def node(tmp_path: Path) -> Iterator[Node]:
    n = Node(load_config({"data_dir": tmp_path / "data", "remote": (tmp_path / "objects").as_uri(),
                          "request_timeout_ms": TIMEOUT_MS, "tiering_interval_ms": 3_600_000,
                          "cleaner_threads": 0, "tiered_cleaner_threads": 0}, env={}))
    yield n
    n.shutdown()


def _slow(node: Node, delay_s: float) -> SlowObjectStore:
    slow = SlowObjectStore(node.remote.rsm.store, delay_s)
    node.remote.rsm.store = slow
    return slow


def _create_tiered_topic(c: TestClient) -> None:
    """Topic t: compacted, tiered, small segments, every local copy kept."""
    r = c.post("/v1/topics", json={"name": "t", "config": {
        "cleanup.policy": "compact", "segment.bytes": 1024, "min.cleanable.dirty.ratio": 0.01,
        "remote.storage.enable": True, "local.retention.ms": -1}})
    assert r.status_code == 201, r.text


def _with_superseded_segments(c: TestClient, node: Node) -> None:
    """A tiered topic whose remote segments a compaction superseded (waiting for deferred deletion)."""
    _create_tiered_topic(c)
    for rnd in range(3):
        for i in range(20):
            r = c.post(f"{P0}/records", json={"records": [{"key": f"k{i}", "value": f"v{rnd}-{i}" + "x" * 40}]})
            assert r.status_code == 200, r.text
        assert c.post(f"{P0}/roll").status_code == 200
    assert c.post(f"{P0}/tier").status_code == 200
    assert c.post(f"{P0}/clean").status_code == 200, "a tiered round supersedes the uploaded segments"
    assert len(node.remote.metadata.unreferenced_segments(TP)) >= 2


def _latest(c: TestClient) -> dict[str, str]:
    out: dict[str, str] = {}
    offset, end = 0, c.get(P0).json()["log_end_offset"]
    while offset < end:
        page = c.get(f"{P0}/records", params={"offset": offset, "max_records": 1000}).json()
        for rec in page["records"]:
            out[rec["key"]] = rec["value"]
        offset = page["next_offset"]
    return out


def test_tier_answers_within_the_bound_while_superseded_segments_are_deleted_slowly(node: Node) -> None:
    with TestClient(create_app(node)) as c:
        _with_superseded_segments(c, node)
        slow = _slow(node, DELAY_S)
        n_superseded = len(node.remote.metadata.unreferenced_segments(TP))
        deleted: list[str] = []
        pass_ = threading.Thread(target=lambda: deleted.extend(node.remote.delete_unreferenced(TP)))
        pass_.start()
        try:
            deadline = time.monotonic() + 5
            while slow.calls == 0 and time.monotonic() < deadline:
                time.sleep(0.01)
            assert slow.calls > 0, "the deferred-delete pass is deleting objects"
            slowest = 0.0
            while pass_.is_alive():
                t0 = time.monotonic()
                r = c.post(f"{P0}/tier")
                slowest = max(slowest, time.monotonic() - t0)
                assert r.status_code in (200, 503), r.text
                if r.status_code == 503:
                    assert r.headers["Retry-After"]
                time.sleep(0.05)
        finally:
            pass_.join(60)
        assert slowest < TIMEOUT_MS / 1000 + 1.0, f"POST tier took {slowest:.2f} s"
        assert len(deleted) == n_superseded, "nothing lost: the pass deleted every superseded segment"
        assert node.remote.metadata.unreferenced_segments(TP) == []
        assert _latest(c) == {f"k{i}": f"v2-{i}" + "x" * 40 for i in range(20)}


def test_a_request_that_cannot_get_the_partition_in_time_answers_503_with_retry_after(node: Node) -> None:
    with TestClient(create_app(node)) as c:
        r = c.post("/v1/topics", json={"name": "t", "config": {"remote.storage.enable": True}})
        assert r.status_code == 201, r.text
        held, release = threading.Event(), threading.Event()

        def background() -> None:  # a background pass (no request scope) holding the partition
            with node.remote._lock(TP):
                held.set()
                release.wait(30)

        t = threading.Thread(target=background)
        t.start()
        try:
            assert held.wait(5)
            t0 = time.monotonic()
            r = c.post(f"{P0}/tier")
            took = time.monotonic() - t0
        finally:
            release.set()
            t.join(5)
        assert r.status_code == 503, r.text
        assert int(r.headers["Retry-After"]) >= 1
        assert "request_timeout_ms" in r.json()["error"]
        assert TIMEOUT_MS / 1000 - 0.2 <= took < TIMEOUT_MS / 1000 + 1.0
        assert c.post(f"{P0}/tier").status_code == 200  # free again: the retry goes through


def test_the_bound_applies_to_requests_only() -> None:
    lock = threading.RLock()
    bounded = BoundedLock(lock, 0.05, "partition x-0")
    held, release = threading.Event(), threading.Event()

    def holder() -> None:
        with lock:
            held.set()
            release.wait(10)

    h = threading.Thread(target=holder)
    h.start()
    assert held.wait(5)
    done = threading.Event()

    def background() -> None:  # outside a request: waits as long as it takes
        with bounded:
            done.set()

    waiter = threading.Thread(target=background)
    try:
        with request_scope(), pytest.raises(PartitionBusyError, match="partition x-0 is busy"):
            with bounded:
                pass
        waiter.start()
        time.sleep(0.2)
        assert not done.is_set()
    finally:
        release.set()
        h.join(5)
    waiter.join(5)
    assert done.is_set()
    assert error_code(PartitionBusyError("busy")) == REQUEST_TIMED_OUT


def test_tier_answers_within_the_bound_while_a_background_copy_uploads_slowly(node: Node) -> None:
    with TestClient(create_app(node)) as c:
        r = c.post("/v1/topics", json={"name": "t", "config": {
            "cleanup.policy": "compact", "segment.bytes": 1024, "remote.storage.enable": True,
            "local.retention.ms": -1}})
        assert r.status_code == 201, r.text
        for i in range(60):
            assert c.post(f"{P0}/records", json={"records": [{"key": f"k{i}", "value": "x" * 60}]}).status_code == 200
        assert c.post(f"{P0}/roll").status_code == 200
        rolled = len(node.log("t", 0).all_segments()) - 1
        assert rolled >= 3
        slow = _slow(node, DELAY_S)
        copied: list[int] = []
        pass_ = threading.Thread(target=lambda: copied.extend(
            m.start_offset for m in node.remote.copy_rolled_segments(TP)))
        pass_.start()
        try:
            deadline = time.monotonic() + 5
            while slow.calls == 0 and time.monotonic() < deadline:
                time.sleep(0.01)
            t0 = time.monotonic()
            r = c.post(f"{P0}/tier")
            took = time.monotonic() - t0
            assert r.status_code == 200 and r.json()["copied"] == [], r.text  # the copy in flight does it
            assert took < TIMEOUT_MS / 1000, f"POST tier waited {took:.2f} s for the background upload"
        finally:
            pass_.join(120)
        assert len(copied) == rolled, "the background copy went on with every rolled segment"
        slow.delay_s = 0
        assert c.post(f"{P0}/tier").json()["copied"] == []  # nothing left: no segment was copied twice
        assert len(node.remote.metadata.list_remote_log_segments(TP)) == rolled


def test_the_kafka_port_answers_request_timed_out_within_the_bound(node: Node) -> None:
    from service.kafka.listener import KafkaListener, KafkaListenerConfig
    from tests.kafka.test_produce_wire import Wire, answer, batch, produce

    node.start()
    node.create_topic("t", 1, {"remote.storage.enable": True})
    node.remote.forget_leader(TP)  # the produce path resolves the leader under the partition lock
    listener = KafkaListener(node, KafkaListenerConfig(host="127.0.0.1", port=0)).start()
    wire = Wire(listener.port)
    held, release = threading.Event(), threading.Event()

    def background() -> None:
        with node.remote._lock(TP):
            held.set()
            release.wait(30)

    t = threading.Thread(target=background)
    t.start()
    try:
        assert held.wait(5)
        t0 = time.monotonic()
        p = answer(produce(wire, {"t": {0: batch([(b"k", b"v")])}}), "t")
        took = time.monotonic() - t0
        assert p.error_code == REQUEST_TIMED_OUT, p
        assert took < TIMEOUT_MS / 1000 + 1.0
        release.set()
        t.join(5)
        assert answer(produce(wire, {"t": {0: batch([(b"k", b"v")])}}), "t").error_code == 0  # the retry lands
    finally:
        release.set()
        t.join(5)
        wire.sock.close()
        listener.stop()


def test_a_waited_clean_slower_than_its_timeout_answers_202_and_goes_on_as_a_job(node: Node) -> None:
    """POST .../clean?wait=true on a store that answers every call late: past timeout_s the request answers 202 with
    a job id instead of waiting for the whole round (a soak saw one wait 8 minutes); the round still completes, and
    the job says so. A round that ends in time answers its stats as before."""
    with TestClient(create_app(node)) as c:
        _create_tiered_topic(c)
        for rnd in range(2):
            for i in range(20):
                assert c.post(f"{P0}/records", json={"records": [{"key": f"k{i}", "value": f"w{rnd}-{i}"}]}) \
                    .status_code == 200
            assert c.post(f"{P0}/roll").status_code == 200
        assert c.post(f"{P0}/tier").status_code == 200
        _slow(node, 0.05)
        t0 = time.monotonic()
        r = c.post(f"{P0}/clean", params={"wait": "true", "timeout_s": 0.2})
        took = time.monotonic() - t0
        assert r.status_code == 202, r.text
        assert took < 0.2 + 1.0, f"the waited clean answered after {took:.2f} s"
        body = r.json()
        assert body["state"] == "running" and body["timeout_s"] == 0.2
        deadline = time.monotonic() + 120
        while (job := c.get(f"/v1/jobs/{body['job_id']}").json())["state"] == "running":
            assert time.monotonic() < deadline, job
            time.sleep(0.1)
        assert job["state"] == "succeeded", job
        assert job["stats"], job
        assert _latest(c) == {f"k{i}": f"w1-{i}" for i in range(20)}
        node.remote.rsm.store = node.remote.rsm.store.inner  # the store is healthy again
        r = c.post(f"{P0}/clean", params={"wait": "true"})
        assert r.status_code == 200 and "job_id" not in r.json(), r.text


def test_a_waited_clean_keeps_its_errors_status_codes(node: Node) -> None:
    with TestClient(create_app(node)) as c:
        assert c.post("/v1/topics/nope/partitions/0/clean", params={"wait": "true"}).status_code == 404
        assert c.post("/v1/topics", json={"name": "t", "config": {"cleanup.policy": "compact"}}).status_code == 201
        assert c.post(f"{P0}/clean", params={"wait": "true", "timeout_s": 0}).status_code == 400
        assert c.post(f"{P0}/clean", params={"wait": "true"}).status_code == 200
