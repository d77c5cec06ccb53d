"""With the object store down, answer within a bound.

``POST .../tier`` used to block 50-320 s before its 503: botocore's retries times our S3
retries times the RemoteStorageManager's, for every object of the segment and again for the
abandon. Now retries form one bounded layer, and a circuit breaker fails calls at once while
the store is known to be down (503 with Retry-After); the tiering loop ends its pass.
"""

from __future__ import annotations

import logging
import os
import time
import uuid
import warnings
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import boto3
import pytest

from log.clock import MockClock
from log.local_log import RecordSpec
from remote.breaker import BreakerObjectStore, CircuitBreaker
from remote.errors import (
    ObjectNotFoundError,
    RemoteStorageChecksumError,
    RemoteStorageIOError,
    RemoteStorageTransientError,
    StoreUnavailableError,
)
from remote.file_store import FileObjectStore
from remote.s3_store import S3ObjectStore
from remote.storage_manager import RemoteStorageManager
from tests.remote.tiering import TP, TierEnv
from tests.remote.transit_faults import SwitchableForwarder

with warnings.catch_warnings():
    warnings.simplefilter("ignore")
    from fastapi.testclient import TestClient

CREDS = {"access_key_id": "testing", "secret_access_key": "testing", "region": "us-east-1"}
#: generous: the old code took 50-320 s; the new one answers in well under a second
BOUND_S = 10.0


class FakeTime:
    def __init__(self) -> None:
        self.t = 1000.0

    def __call__(self) -> float:
        return self.t


def _down(key: str = "k") -> RemoteStorageTransientError:
    return RemoteStorageTransientError("connection refused", key=key)


def _raise(e: Exception) -> Any:
    raise e


# ---- the breaker -----------------------------------------------------------------------------

def test_breaker_opens_after_consecutive_failures_and_fails_fast_until_the_cool_down_ends() -> None:
    now = FakeTime()
    b = CircuitBreaker(failure_threshold=3, cooldown_s=10, now=now)
    calls = []

    def fail() -> None:
        calls.append(1)
        raise _down()

    for _ in range(3):
        with pytest.raises(RemoteStorageTransientError):
            b.call("put", "k", fail)
    assert b.is_open and b.times_opened == 1
    with pytest.raises(StoreUnavailableError, match="unavailable.*connection refused.*retry in 10.0 s") as ei:
        b.call("put", "k", fail)
    assert len(calls) == 3  # not attempted
    assert ei.value.retriable and ei.value.retry_after_s == pytest.approx(10) and ei.value.key == "k"
    now.t += 6
    assert b.retry_after_s() == pytest.approx(4)
    now.t += 4.5  # half open: one call goes through; its failure reopens at once
    with pytest.raises(RemoteStorageTransientError):
        b.call("put", "k", fail)
    assert len(calls) == 4 and b.is_open and b.times_opened == 2
    now.t += 11
    assert b.call("get", "k", lambda: "ok") == "ok"  # success closes
    assert not b.is_open and b.retry_after_s() == 0
    with pytest.raises(RemoteStorageTransientError):
        b.call("put", "k", fail)
    assert not b.is_open  # the count restarted


@pytest.mark.parametrize("answer", [ObjectNotFoundError("gone", key="k"), RemoteStorageIOError("denied", key="k"),
                                    RemoteStorageChecksumError("damaged", key="k")])
def test_an_answer_from_the_store_is_not_an_outage(answer: Exception) -> None:
    b = CircuitBreaker(failure_threshold=2, cooldown_s=10, now=FakeTime())
    for _ in range(5):
        with pytest.raises(RemoteStorageTransientError):
            b.call("put", "k", lambda: _raise(_down()))
        with pytest.raises(type(answer)):
            b.call("get", "k", lambda: _raise(answer))
    assert not b.is_open


def test_breaker_store_is_picklable_and_starts_closed(tmp_path: Path) -> None:
    import pickle

    b = CircuitBreaker(failure_threshold=1, cooldown_s=60)
    store = BreakerObjectStore(FileObjectStore(tmp_path), b)
    b.record_failure(_down())
    assert b.is_open
    clone = pickle.loads(pickle.dumps(store))
    assert not clone.breaker.is_open and clone.breaker.failure_threshold == 1
    clone.put("k", b"v")
    assert clone.get("k") == b"v"


# ---- S3 against a refusing endpoint ----------------------------------------------------------

def _refusing_port() -> int:
    import socket

    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()  # nothing listens there now: connections are refused
    return port


def test_a_dead_store_fails_an_upload_within_a_bound_and_then_at_once(tmp_path: Path) -> None:
    store = BreakerObjectStore(
        S3ObjectStore("b", endpoint_url=f"http://127.0.0.1:{_refusing_port()}", max_attempts=1,
                      connect_timeout_s=1, **CREDS),
        CircuitBreaker(failure_threshold=3, cooldown_s=30))
    rsm = RemoteStorageManager(store, max_attempts=3, backoff_ms=50, max_total_ms=5_000)
    t0 = time.monotonic()
    with pytest.raises(RemoteStorageTransientError, match="'k'"):
        rsm._retry("upload k", lambda: store.put("k", b"v" * 100))
    assert time.monotonic() - t0 < BOUND_S
    assert store.breaker.is_open
    t0 = time.monotonic()
    with pytest.raises(StoreUnavailableError):
        rsm._retry("get k", lambda: store.get("k"))
    assert time.monotonic() - t0 < 1.0


def test_s3_retries_stop_at_the_total_time_budget() -> None:
    store = S3ObjectStore("b", endpoint_url=f"http://127.0.0.1:{_refusing_port()}", max_attempts=1000,
                          backoff_s=0.2, max_backoff_s=0.2, max_total_s=1.0, connect_timeout_s=1, **CREDS)
    t0 = time.monotonic()
    with pytest.raises(RemoteStorageTransientError):
        store.get("k")
    assert time.monotonic() - t0 < BOUND_S


def test_the_tiering_loop_ends_its_pass_when_the_store_is_known_down(tmp_path: Path, clock: MockClock) -> None:
    breaker = CircuitBreaker(failure_threshold=1, cooldown_s=60)
    env = TierEnv(tmp_path, clock)
    env.rsm.store = BreakerObjectStore(env.store, breaker)  # faults are injected below the breaker
    for p in range(3):
        log = env.create(type(TP)(f"t{p}", 0))
        for i in range(30):
            log.append_records([RecordSpec(b"k%d" % i, b"v" * 100)])
        log.roll()
    env.store.inject("put", "transient")
    out = env.rlm.run_once()
    attempted = [tp for tp, res in out.items() if res.errors]
    assert len(attempted) == 1 and breaker.is_open  # the first failure opened it; the pass ended there
    assert env.store.calls["put"] <= 3
    env.close()


# ---- the service: POST tier answers 503 quickly, Retry-After, then recovers ------------------

@pytest.fixture
def moto_behind_switch(monkeypatch: pytest.MonkeyPatch) -> Iterator[tuple[str, SwitchableForwarder]]:
    from moto.server import ThreadedMotoServer

    logging.getLogger("werkzeug").setLevel(logging.ERROR)
    for k, v in (("AWS_ACCESS_KEY_ID", "testing"), ("AWS_SECRET_ACCESS_KEY", "testing"),
                 ("AWS_DEFAULT_REGION", "us-east-1")):
        monkeypatch.setenv(k, v)
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    host, port = server.get_host_and_port()
    fwd = SwitchableForwarder((host, port)).start()
    bucket = f"tc-{uuid.uuid4().hex[:12]}"
    boto3.client("s3", endpoint_url=fwd.url, region_name="us-east-1").create_bucket(Bucket=bucket)
    yield bucket, fwd
    fwd.stop()
    server.stop()


def test_post_tier_answers_503_within_seconds_when_the_store_is_down_and_recovers(
        tmp_path: Path, moto_behind_switch: tuple[str, SwitchableForwarder]) -> None:
    from service.app import create_app
    from service.config import load_config
    from service.node import Node

    bucket, fwd = moto_behind_switch
    node = Node(load_config({"data_dir": tmp_path / "data", "remote": f"s3://{bucket}/p", "s3_endpoint": fwd.url,
                             "s3_region": "us-east-1", "remote_breaker_cooldown_ms": 1500,
                             "remote_connect_timeout_ms": 1000, "cleaner_threads": 0,
                             "tiered_cleaner_threads": 0}, env={}))
    try:
        with TestClient(create_app(node)) as c:
            cfg = {"remote.storage.enable": True, "cleanup.policy": "compact,delete", "segment.bytes": 4096,
                   "retention.ms": -1}
            assert c.post("/v1/topics", json={"name": "t", "partitions": 1, "config": cfg}).status_code == 201
            log = node.log("t", 0)
            for i in range(60):
                log.append_records([RecordSpec(b"k%d" % (i % 9), os.urandom(100))])
            log.roll()

            fwd.set_down(True)
            t0 = time.monotonic()
            r = c.post("/v1/topics/t/partitions/0/tier")
            first = time.monotonic() - t0
            assert r.status_code == 503, r.text
            assert first < BOUND_S, f"POST tier took {first:.1f} s with the store down"
            assert "error" in r.json()

            t0 = time.monotonic()
            r = c.post("/v1/topics/t/partitions/0/tier")
            again = time.monotonic() - t0
            assert r.status_code == 503 and "unavailable" in r.json()["error"]
            assert 1 <= int(r.headers["Retry-After"]) <= 2
            assert again < BOUND_S / 2
            assert c.get("/healthz").status_code == 200
            metrics = c.get("/metrics").text
            assert "remote_store_unavailable 1.0" in metrics and "remote_store_outages_total 1.0" in metrics
            assert node.metadata.list_remote_log_segments(log.topic_partition) == []

            fwd.set_down(False)
            time.sleep(1.6)  # the cool-down ends: calls go through again
            r = c.post("/v1/topics/t/partitions/0/tier")
            assert r.status_code == 200, r.text
            assert r.json()["copied"]
            assert "remote_store_unavailable 0.0" in c.get("/metrics").text
            print(f"\nPOST tier with the store down: first answer {first:.2f} s, then {again:.3f} s")
    finally:
        node.shutdown()


def test_service_options_bound_the_store_calls(tmp_path: Path) -> None:
    from service.config import load_config
    from service.node import Node

    node = Node(load_config({"data_dir": tmp_path / "data", "remote": "s3://b/p", "s3_endpoint": "http://127.0.0.1:1",
                             "remote_retry_attempts": 2, "remote_timeout_ms": 1500, "remote_connect_timeout_ms": 700,
                             "remote_read_timeout_ms": 900, "remote_breaker_failures": 4,
                             "remote_breaker_cooldown_ms": 2500, "s3_verify_etag": False}, env={}))
    try:
        opts = node.store_options()
        assert opts["max_attempts"] == 1  # one retry layer: the RemoteStorageManager's
        assert (opts["max_total_s"], opts["connect_timeout_s"], opts["read_timeout_s"]) == (1.5, 0.7, 0.9)
        assert opts["verify_etag"] is False
        assert (node.storage_manager._max_attempts, node.storage_manager._max_total_ms) == (2, 1500)
        assert (node.store_breaker.failure_threshold, node.store_breaker.cooldown_s) == (4, 2.5)
    finally:
        node.shutdown()
