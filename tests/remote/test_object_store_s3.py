"""S3ObjectStore specifics over moto's HTTP server: multipart abort, upload verification,
retries, error translation, lazy boto3 import."""

from __future__ import annotations

import os
import sys
import uuid
from collections.abc import Iterator
from typing import Any

import boto3
import pytest
from botocore.exceptions import ClientError, EndpointConnectionError

from log.errors import InvalidConfigError
from remote import load_object_store
from remote.errors import (
    RemoteStorageIOError,
    RemoteStorageNotInstalledError,
    RemoteStorageTransientError,
)
from remote.s3_store import MiB, S3ObjectStore

CREDS = {"access_key_id": "testing", "secret_access_key": "testing", "region": "us-east-1"}


def _raw(url: str) -> Any:
    return boto3.client("s3", endpoint_url=url, region_name="us-east-1", aws_access_key_id="testing",
                        aws_secret_access_key="testing")


@pytest.fixture
def s3(moto_server_url: str) -> Iterator[S3ObjectStore]:
    bucket = f"tc-{uuid.uuid4().hex[:12]}"
    _raw(moto_server_url).create_bucket(Bucket=bucket)
    store = S3ObjectStore(bucket, "p", endpoint_url=moto_server_url, multipart_threshold=5 * MiB,
                          part_size=5 * MiB, backoff_s=0.001, max_attempts=3, **CREDS)
    yield store
    store.close()


def _wrap(store: S3ObjectStore, method: str, fail: Any) -> list[int]:
    """Replace one client method; ``fail(n, real, kwargs)`` decides per call."""
    client = store._client()
    real = getattr(client, method)
    calls = [0]

    def wrapper(**kwargs: Any) -> Any:
        calls[0] += 1
        return fail(calls[0], real, kwargs)

    setattr(client, method, wrapper)
    return calls


def _client_error(code: str, status: int) -> ClientError:
    return ClientError({"Error": {"Code": code, "Message": code}, "ResponseMetadata": {"HTTPStatusCode": status}},
                       "Op")


def test_multipart_failure_is_aborted_and_leaves_nothing(s3: S3ObjectStore, moto_server_url: str) -> None:
    def fail_second(n: int, real: Any, kw: dict[str, Any]) -> Any:
        if n == 2:
            raise _client_error("AccessDenied", 403)
        return real(**kw)

    _wrap(s3, "upload_part", fail_second)
    with pytest.raises(RemoteStorageIOError, match="big.log"):
        s3.put("big.log", os.urandom(11 * MiB))
    raw = _raw(moto_server_url)
    assert raw.list_multipart_uploads(Bucket=s3.bucket).get("Uploads", []) == []
    assert not s3.exists("big.log")


def test_multipart_parts_are_retried(s3: S3ObjectStore) -> None:
    def flaky(n: int, real: Any, kw: dict[str, Any]) -> Any:
        if n in (1, 3):
            raise EndpointConnectionError(endpoint_url="http://x")
        return real(**kw)

    calls = _wrap(s3, "upload_part", flaky)
    data = os.urandom(11 * MiB)
    assert s3.put("big.log", data) == len(data)
    assert s3.get("big.log") == data
    assert calls[0] == 5  # 3 parts + 2 retries


def test_truncated_upload_is_detected_and_removed(s3: S3ObjectStore) -> None:
    def truncate(n: int, real: Any, kw: dict[str, Any]) -> Any:
        body = kw["Body"].getvalue()
        return real(**{**kw, "Body": body[: len(body) // 2]})

    _wrap(s3, "put_object", truncate)
    with pytest.raises(RemoteStorageIOError, match="truncated: sent 1000 bytes, stored 500"):
        s3.put("t.log", b"x" * 1000)
    assert not s3.exists("t.log")


def test_transient_errors_are_retried_then_surface(s3: S3ObjectStore) -> None:
    def slow_down(n: int, real: Any, kw: dict[str, Any]) -> Any:
        if n <= 2:
            raise _client_error("SlowDown", 503)
        return real(**kw)

    calls = _wrap(s3, "put_object", slow_down)
    s3.put("k", b"v")
    assert calls[0] == 3 and s3.get("k") == b"v"

    _wrap(s3, "get_object", lambda n, real, kw: (_ for _ in ()).throw(_client_error("InternalError", 500)))
    with pytest.raises(RemoteStorageTransientError, match="InternalError") as ei:
        s3.get("k")
    assert ei.value.retriable and ei.value.key == "k"


def test_missing_bucket_and_unreachable_endpoint(moto_server_url: str) -> None:
    store = S3ObjectStore("no-such-bucket-x", endpoint_url=moto_server_url, backoff_s=0.001, **CREDS)
    with pytest.raises(RemoteStorageIOError, match="bucket 'no-such-bucket-x' does not exist"):
        store.put("k", b"v")
    dead = S3ObjectStore("b", endpoint_url="http://127.0.0.1:1", backoff_s=0.001, max_attempts=2,
                         connect_timeout_s=0.5, **CREDS)
    with pytest.raises(RemoteStorageTransientError, match="'k'"):
        dead.get("k")


def test_missing_boto3_gives_an_install_hint(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "boto3", None)
    store = S3ObjectStore("b", **CREDS)
    with pytest.raises(RemoteStorageNotInstalledError, match=r"pip install 'tiercompact\[s3\]'"):
        store.get("k")


def test_url_parsing_and_options() -> None:
    s = load_object_store("s3://bucket/a/b/", endpoint_url="http://minio:9000", region="eu-west-1")
    assert isinstance(s, S3ObjectStore)
    assert (s.bucket, s.prefix, s.url, s.region) == ("bucket", "a/b", "s3://bucket/a/b", "eu-west-1")
    with pytest.raises(InvalidConfigError):
        load_object_store("s3:///nobucket")
    with pytest.raises(InvalidConfigError, match="at least"):
        S3ObjectStore("b", part_size=1024)
    with pytest.raises(InvalidConfigError, match="not supported"):
        load_object_store("gs://bucket/x")


def test_a_head_answer_cut_before_its_content_length_is_transient_not_a_key_error(s3: S3ObjectStore) -> None:
    """Regression (found by the soak's truncating proxy): botocore leaves ContentLength out of a
    HEAD whose headers were cut, and the builtin KeyError escaped the adapter (500 on POST tier,
    the tiered cleaner marked the partition uncleanable). It is a transient fault, retried."""
    s3.put("k.log", b"12345")

    def cut_first(n: int, real: Any, kw: dict[str, Any]) -> Any:
        resp = real(**kw)
        if n == 1:
            resp.pop("ContentLength", None)
        return resp

    _wrap(s3, "head_object", cut_first)
    assert s3.size("k.log") == 5  # the retry gets a whole answer

    _wrap(s3, "head_object", lambda n, real, kw: {k: v for k, v in real(**kw).items() if k != "ContentLength"})
    with pytest.raises(RemoteStorageTransientError, match="Content-Length"):
        s3.size("k.log")


def test_a_connection_broken_while_reading_a_body_is_transient(s3: S3ObjectStore) -> None:
    """Regression (soak F5): urllib3's ProtocolError ("Connection broken: ConnectionResetError")
    escaped the adapter while a body was read, and a clean answered 500. It is retried."""
    import urllib3.exceptions

    s3.put("k.log", b"12345")

    def reset_first(n: int, real: Any, kw: dict[str, Any]) -> Any:
        if n == 1:
            raise urllib3.exceptions.ProtocolError("Connection broken: ConnectionResetError(104)")
        return real(**kw)

    _wrap(s3, "get_object", reset_first)
    assert s3.get("k.log") == b"12345"
    _wrap(s3, "get_object", lambda n, real, kw: (_ for _ in ()).throw(
        urllib3.exceptions.ProtocolError("Connection broken")))
    with pytest.raises(RemoteStorageTransientError, match="Connection broken"):
        s3.get("k.log")


def test_a_download_slower_than_the_minimum_rate_fails_in_time(moto_server_url: str, tmp_path: Any) -> None:
    """A store that trickles: every socket read answers within the read timeout, so only the
    transfer's own bound (read timeout + size / min_transfer_rate) ends it; then it is retried."""
    import time

    from remote.errors import RemoteStorageTimeoutError
    from tests.support.fault_proxy import FaultProxy

    bucket = f"tc-{uuid.uuid4().hex[:12]}"
    _raw(moto_server_url).create_bucket(Bucket=bucket)
    _raw(moto_server_url).put_object(Bucket=bucket, Key="p/k", Body=b"z" * 40_000)
    host, port = moto_server_url.removeprefix("http://").split(":")
    proxy = FaultProxy((host, int(port)), seed=1).start()
    store = S3ObjectStore(bucket, "p", endpoint_url=proxy.url, read_timeout_s=1.0, min_transfer_rate=40_000,
                          max_attempts=2, max_total_s=1.0, backoff_s=0.01, **CREDS)
    try:
        proxy.set_mode("trickle", rate=8_000)  # fast enough to fit a small answer, 5 s for the body
        assert store.get_range("k", 0, 100) == b"z" * 100  # 100 bytes may take 1 s + 2.5 ms
        for read in (lambda: store.get("k"), lambda: store.get_range("k", 0, 40_000),
                     lambda: store.get_to_file("k", tmp_path / "k.bin")):
            t0 = time.monotonic()
            with pytest.raises(RemoteStorageTimeoutError, match="slower than 40000 B/s"):
                read()
            assert time.monotonic() - t0 < 4.0  # one attempt: 1 s + 40,000 / 40,000 s, and the last piece
        assert not (tmp_path / "k.bin").exists()
        proxy.set_mode("pass")
        assert store.get("k") == b"z" * 40_000
        assert store.get_to_file("k", tmp_path / "k.bin") == 40_000
    finally:
        store.close()
        proxy.stop()


def test_an_upload_slower_than_the_minimum_rate_fails_in_time(moto_server_url: str) -> None:
    import time

    from remote.errors import RemoteStorageTimeoutError
    from tests.support.fault_proxy import FaultProxy

    bucket = f"tc-{uuid.uuid4().hex[:12]}"
    _raw(moto_server_url).create_bucket(Bucket=bucket)
    host, port = moto_server_url.removeprefix("http://").split(":")
    proxy = FaultProxy((host, int(port)), seed=1).start()
    store = S3ObjectStore(bucket, "p", endpoint_url=proxy.url, read_timeout_s=1.0, min_transfer_rate=4 * MiB,
                          max_attempts=2, max_total_s=1.0, backoff_s=0.01, **CREDS)
    try:
        proxy.set_mode("trickle", rate=200_000)  # 8 MiB would take 42 s
        t0 = time.monotonic()
        with pytest.raises(RemoteStorageTimeoutError):
            store.put("big", os.urandom(8 * MiB))
        assert time.monotonic() - t0 < 6.0  # one attempt: 1 s + 2 s (and what socket buffers took at once)
        proxy.set_mode("pass")
        assert not store.exists("big")
        store.put("big", b"ok")
        assert store.get("big") == b"ok"
    finally:
        store.close()
        proxy.stop()


def test_a_paced_upload_body_stops_between_blocks_once_late() -> None:
    """What urllib3 sends from: blocks until the deadline, then RemoteStorageTimeoutError (none at the end)."""
    import time

    from remote.errors import RemoteStorageTimeoutError
    from remote.s3_store import _PacedUpload

    body = _PacedUpload(b"a" * 100, "k", time.monotonic() + 3600, "upload of 'k'")
    assert body.read(60) == b"a" * 60
    body._deadline = time.monotonic() - 1  # the attempt ran out of time
    with pytest.raises(RemoteStorageTimeoutError, match="upload of 'k'"):
        body.read(60)
    body.seek(100)
    assert body.read(10) == b""  # all sent: nothing left to stop


def test_min_transfer_rate_must_be_positive() -> None:
    with pytest.raises(InvalidConfigError, match="min_transfer_rate"):
        S3ObjectStore("b", min_transfer_rate=0)


def test_a_store_that_ends_the_connection_after_100_continue_fails_the_put_in_time() -> None:
    """A store (or a proxy) that answers a PUT with the ``100 Continue`` status line and then closes. botocore's
    wait for that interim answer read empty lines for ever, spinning a thread that no timeout stopped (the soak
    found a tiered-cleaner upload spinning for minutes). The store's PUTs carry no Expect header now, so the
    attempts fail as broken connections and the put gives up within its bounds."""
    import socket
    import threading

    expects: list[bool] = []
    listener = socket.create_server(("127.0.0.1", 0))
    stop = threading.Event()

    def serve() -> None:
        listener.settimeout(0.2)
        while not stop.is_set():
            try:
                conn, _addr = listener.accept()
            except TimeoutError:
                continue
            with conn:
                head = b""
                while b"\r\n\r\n" not in head:
                    chunk = conn.recv(65536)
                    if not chunk:
                        break
                    head += chunk
                expects.append(b"expect: 100-continue" in head.lower())
                conn.sendall(b"HTTP/1.1 100 Continue\r\n")  # ... and nothing more: the connection ends

    server = threading.Thread(target=serve, daemon=True)
    server.start()
    store = S3ObjectStore("b", "p", endpoint_url=f"http://127.0.0.1:{listener.getsockname()[1]}",
                          backoff_s=0.01, max_attempts=3, read_timeout_s=2, **CREDS)
    outcome: list[BaseException | None] = []

    def put() -> None:
        try:
            store.put("k", b"x" * 1000)
            outcome.append(None)
        except BaseException as e:  # noqa: BLE001 - inspected below
            outcome.append(e)

    worker = threading.Thread(target=put, daemon=True)
    worker.start()
    worker.join(30)
    stop.set()
    server.join(5)  # before the close: a thread still in accept() would fail on a closed socket
    store.close()
    listener.close()
    assert not worker.is_alive(), "the put never ended (spinning in botocore's 100-continue wait)"
    assert isinstance(outcome[0], RemoteStorageTransientError), outcome
    assert expects and not any(expects)
