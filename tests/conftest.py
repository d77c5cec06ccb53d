"""Small, shared fixtures. Heavy fixtures live in per-directory conftest.py files."""

from __future__ import annotations

import os
from collections.abc import Iterator

import pytest

from log.clock import MockClock


@pytest.fixture(autouse=True)
def _clean_environ(monkeypatch: pytest.MonkeyPatch) -> None:
    """Tests never see the developer's TIERCOMPACT_* or AWS_* settings (TIERCOMPACT_TEST_* stay)."""
    for k in list(os.environ):
        if (k.startswith("TIERCOMPACT_") and not k.startswith("TIERCOMPACT_TEST_")) or k.startswith("AWS_"):
            monkeypatch.delenv(k, raising=False)


@pytest.fixture
def clock() -> MockClock:
    return MockClock()


@pytest.fixture(scope="session")
def moto_server_url() -> Iterator[str]:
    """A moto S3 server over real HTTP on a free port, shared by the whole session
    (use with boto3/S3ObjectStore ``endpoint_url=`` and any access key, e.g. "testing")."""
    from moto.server import ThreadedMotoServer

    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    host, port = server.get_host_and_port()
    try:
        yield f"http://{host}:{port}"
    finally:
        server.stop()
