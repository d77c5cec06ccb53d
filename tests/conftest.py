"""Small, shared fixtures. Heavy fixtures live in per-directory conftest.py files."""

from __future__ import annotations

import os
from collections.abc import Iterator
from typing import Any

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


_PG_ENV = "TIERCOMPACT_TEST_POSTGRES_URL"


def pytest_configure(config: pytest.Config) -> None:
    """Under pytest-xdist each worker gets its own PostgreSQL schema: TIERCOMPACT_TEST_POSTGRES_URL is
    rewritten (search_path) before any test reads it, so tests that reset the store (the contract tests'
    drop_all) or share it across processes (two-node tests) never meet another worker's tables."""
    worker = os.environ.get("PYTEST_XDIST_WORKER")
    url = os.environ.get(_PG_ENV)
    if not worker or not url:
        return
    import psycopg

    from metadata.sql import normalize_url
    from tests.contract.conftest import with_search_path

    schema = f"tcw_{worker}"
    with psycopg.connect(normalize_url(url).replace("postgresql+psycopg://", "postgresql://"),
                         autocommit=True) as conn:
        conn.execute(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE')
        conn.execute(f'CREATE SCHEMA "{schema}"')
    os.environ[_PG_ENV] = with_search_path(url, schema)


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Under pytest-xdist (``make test`` runs two workers, a test file per worker at a time, in the
    order collected): files holding a ``slow`` test are handed out first, so no long file starts when
    the other worker is nearly done. A serial run keeps the collection as it is."""
    if not hasattr(config, "workerinput"):
        return
    slow_files = {item.path for item in items if item.get_closest_marker("slow") is not None}
    items.sort(key=lambda item: item.path not in slow_files)  # stable: each file keeps its own order


#: the lock-order violations xdist's workers reported (kept by the controller)
_WORKER_VIOLATIONS = pytest.StashKey[list[str]]()


def _violation_lines() -> list[str]:
    return [f"  [{v.kind}] in {v.thread}: {v.message}" for v in locks.violations()]


@pytest.hookimpl(optionalhook=True)
def pytest_testnodedown(node: Any, error: object) -> None:
    """xdist's controller: keep a finished worker's lock-order violations (its own session cannot fail the run)."""
    found = getattr(node, "workeroutput", {}).get("lock_violations", [])
    node.config.stash.setdefault(_WORKER_VIOLATIONS, []).extend(found)


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    """Fail the run on any lock-order violation, even one a background thread swallowed (under xdist:
    a worker hands its violations to the controller, which fails the run)."""
    found = _violation_lines()
    workeroutput = getattr(session.config, "workeroutput", None)
    if workeroutput is not None:
        workeroutput["lock_violations"] = found
    found += session.config.stash.get(_WORKER_VIOLATIONS, [])
    if found:
        lines = [f"{len(found)} lock-order violation(s) (see log/locks.py for the hierarchy):", *found[:20]]
        reporter = session.config.pluginmanager.get_plugin("terminalreporter")
        if reporter is not None:
            reporter.write_line("\n".join(lines), red=True)
        session.exitstatus = pytest.ExitCode.TESTS_FAILED
