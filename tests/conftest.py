"""Small, shared fixtures. Heavy fixtures live in per-directory conftest.py files."""

from __future__ import annotations

import os
from collections.abc import Iterator

import pytest

# Every lock of the suite is an instrumented one (log/locks.py): set before any project
# module creates a lock; server subprocesses started by tests inherit it.
os.environ["TIERCOMPACT_LOCK_CHECK"] = "1"

from log import locks  # noqa: E402
from log.clock import MockClock  # noqa: E402


@pytest.fixture(autouse=True)
def _clean_environ(monkeypatch: pytest.MonkeyPatch) -> None:
    """Tests never see the developer's TIERCOMPACT_* or AWS_* settings (TIERCOMPACT_TEST_* stay)."""
    for k in list(os.environ):
        if k == locks.LOCK_CHECK_ENV:
            continue
        if (k.startswith("TIERCOMPACT_") and not k.startswith("TIERCOMPACT_TEST_")) or k.startswith("AWS_"):
            monkeypatch.delenv(k, raising=False)
    # `tiercompact serve` subprocesses of the suite open no Kafka listener unless they ask for one
    # (--kafka-port beats this): many run at once, and the default 9092 is one port
    monkeypatch.setenv("TIERCOMPACT_KAFKA_PORT", "0")


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


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    """Fail the run on any lock-order violation, even one a background thread swallowed."""
    found = locks.violations()
    if found:
        lines = [f"{len(found)} lock-order violation(s) (see log/locks.py for the hierarchy):"]
        lines += [f"  [{v.kind}] in {v.thread}: {v.message}" for v in found[:20]]
        reporter = session.config.pluginmanager.get_plugin("terminalreporter")
        if reporter is not None:
            reporter.write_line("\n".join(lines), red=True)
        session.exitstatus = pytest.ExitCode.TESTS_FAILED
