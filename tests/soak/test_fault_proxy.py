"""The fault proxy does what the soak counts on: each mode breaks S3 calls the way it says."""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import boto3
import pytest
from botocore.config import Config

from tests.support.fault_proxy import FaultProxy


@pytest.fixture
def proxied(moto_server_url: str) -> Iterator[tuple[FaultProxy, Any]]:
    host, port = moto_server_url.removeprefix("http://").split(":")
    proxy = FaultProxy((host, int(port)), seed=3).start()
    s3 = boto3.client("s3", endpoint_url=proxy.url, region_name="us-east-1", aws_access_key_id="testing",
                      aws_secret_access_key="testing",
                      config=Config(retries={"max_attempts": 1, "mode": "standard"}, connect_timeout=3,
                                    read_timeout=10))
    s3.create_bucket(Bucket="proxy-test")
    s3.put_object(Bucket="proxy-test", Key="k", Body=b"x" * 1000)
    try:
        yield proxy, s3
    finally:
        proxy.stop()


def _get(s3: Any, **kw: Any) -> bytes:
    return s3.get_object(Bucket="proxy-test", Key="k", **kw)["Body"].read()  # type: ignore[no-any-return]


def test_modes(proxied: tuple[FaultProxy, Any]) -> None:
    proxy, s3 = proxied
    assert _get(s3) == b"x" * 1000
    for mode in ("refuse", "503", "truncate"):
        proxy.set_mode(mode)
        with pytest.raises(Exception):  # noqa: B017 - botocore raises a different class per mode
            _get(s3)
    proxy.set_mode("delay", delay_s=0.5)
    t0 = time.monotonic()
    assert _get(s3) == b"x" * 1000
    assert time.monotonic() - t0 >= 0.5
    proxy.set_mode("corrupt")
    body = _get(s3, Range="bytes=0-99")  # ranged reads carry no checksum: the damage gets through
    assert len(body) == 100 and body != b"x" * 100
    proxy.set_mode("pass")
    assert _get(s3) == b"x" * 1000
    stats = proxy.stats()
    assert {"refuse", "503", "truncate", "delay", "corrupt"} <= set(stats["faults"])  # type: ignore[arg-type]


def test_truncate_heads_switch(proxied: tuple[FaultProxy, Any]) -> None:
    proxy, s3 = proxied
    proxy.set_mode("truncate")
    proxy.truncate_heads = False
    assert s3.head_object(Bucket="proxy-test", Key="k")["ContentLength"] == 1000
    proxy.truncate_heads = True
    with pytest.raises(Exception):  # noqa: B017 - a cut header block: botocore's outcome varies
        head = s3.head_object(Bucket="proxy-test", Key="k")
        assert head["ContentLength"] == 1000


def test_slow_answers_every_request_late_and_correctly(proxied: tuple[FaultProxy, Any]) -> None:
    """``slow`` delays each request on a kept-alive connection, not just the connection's first."""
    proxy, s3 = proxied
    proxy.set_mode("slow", delay_s=0.4)
    t0 = time.monotonic()
    for _ in range(3):
        assert _get(s3) == b"x" * 1000
    s3.put_object(Bucket="proxy-test", Key="k2", Body=b"y" * 100)
    assert time.monotonic() - t0 >= 4 * 0.4
    proxy.set_mode("pass")
    assert _get(s3) == b"x" * 1000 and proxy.stats()["faults"]["slow"] >= 1  # type: ignore[index]


def test_trickle_sends_answers_at_the_rate(proxied: tuple[FaultProxy, Any]) -> None:
    proxy, s3 = proxied
    proxy.set_mode("trickle", rate=2000)
    t0 = time.monotonic()
    assert _get(s3) == b"x" * 1000  # 1000 bytes of body (and a few hundred of head) at 2000 B/s
    assert time.monotonic() - t0 >= 0.5
    proxy.set_mode("pass")
    assert proxy.stats()["faults"]["trickle"] >= 1  # type: ignore[index]
