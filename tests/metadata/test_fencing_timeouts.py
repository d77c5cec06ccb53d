"""Bounded metadata transactions.

A stalled old leader holding the partition's fence row (PostgreSQL) or SQLite's write lock
must not block the new leader's POST leadership indefinitely: the wait is bounded by the
lock / busy timeout, and the caller gets the retriable MetadataStoreTimeoutError, which
the API answers with 503 and a Retry-After header.
"""

from __future__ import annotations

import sqlite3
import time
import warnings
from collections.abc import Iterator
from pathlib import Path

import pytest

with warnings.catch_warnings():
    warnings.simplefilter("ignore")
    from fastapi.testclient import TestClient

from log.errors import InvalidConfigError
from log.types import TopicPartition
from metadata.errors import MetadataStoreTimeoutError
from metadata.sql import SqlRemoteLogMetadataManager, normalize_url
from service.app import create_app
from service.config import ServiceConfigError, load_config
from service.node import Node
from tests.contract.conftest import private_postgres_schema

TP = TopicPartition("orders", 0)


def _hold_sqlite_write_lock(path: Path) -> sqlite3.Connection:
    """A second connection that took SQLite's write lock and stalls (never commits)."""
    conn = sqlite3.connect(path, isolation_level=None, timeout=0.1)
    conn.execute("BEGIN IMMEDIATE")
    return conn


def test_sqlite_write_lock_held_by_another_connection_times_out_and_is_retriable(tmp_path: Path) -> None:
    db = tmp_path / "metadata.db"
    with SqlRemoteLogMetadataManager(f"sqlite:///{db}", lock_timeout_ms=100) as m:
        m.become_leader(TP, 0, 0)
        stalled = _hold_sqlite_write_lock(db)
        try:
            with pytest.raises(MetadataStoreTimeoutError, match="busy timeout \\(100 ms\\)") as e:
                m.become_leader(TP, 1, 1, start_offset=10)
            assert e.value.retriable and e.value.retry_after_s >= 1
        finally:
            stalled.rollback()
            stalled.close()
        assert m.become_leader(TP, 1, 1, start_offset=10).leader_epoch == 1  # the retry succeeds


def test_timeouts_are_validated() -> None:
    with pytest.raises(InvalidConfigError, match="lock_timeout_ms=0"):
        SqlRemoteLogMetadataManager("sqlite:///:memory:", lock_timeout_ms=0)
    with pytest.raises(InvalidConfigError, match="statement_timeout_ms"):
        SqlRemoteLogMetadataManager("sqlite:///:memory:", statement_timeout_ms=2**31)
    with pytest.raises(ServiceConfigError, match="metadata_lock_timeout_ms"):
        load_config({"metadata_lock_timeout_ms": 0}, env={})
    with pytest.raises(ServiceConfigError, match="broker_id"):
        load_config({"broker_id": 2**31}, env={})


@pytest.fixture
def api(tmp_path: Path) -> Iterator[tuple[Node, TestClient]]:
    node = Node(load_config({"data_dir": tmp_path / "data", "metadata_lock_timeout_ms": 100,
                             "cleaner_threads": 0, "tiering_interval_ms": 3_600_000}, env={})).start()
    with TestClient(create_app(node)) as c:
        yield node, c
    node.shutdown()


def test_post_leadership_answers_503_with_retry_after_while_a_stalled_writer_holds_the_lock(
        api: tuple[Node, TestClient], tmp_path: Path) -> None:
    node, c = api
    assert c.post("/v1/topics", json={"name": "orders", "config": {"remote.storage.enable": True}}).status_code == 201
    stalled = _hold_sqlite_write_lock(tmp_path / "data" / "metadata.db")
    try:
        r = c.post("/v1/topics/orders/partitions/0/leadership", json={"leader_epoch": 3, "broker_id": 0})
        assert r.status_code == 503, r.text
        assert int(r.headers["Retry-After"]) >= 1
        assert "timed out" in r.json()["error"] and "retry" in r.json()["error"].lower()
    finally:
        stalled.rollback()
        stalled.close()
    r = c.post("/v1/topics/orders/partitions/0/leadership", json={"leader_epoch": 3, "broker_id": 0})
    assert r.status_code == 200 and r.json()["leader_epoch"] == 3, r.text


# ---------------------------------------------------------------- PostgreSQL


@pytest.fixture
def pg_schema_url() -> Iterator[str]:
    """TIERCOMPACT_TEST_POSTGRES_URL with a private schema (search_path), dropped afterwards."""
    with private_postgres_schema() as url:
        yield url


@pytest.mark.postgres
def test_postgres_fence_row_held_by_a_stalled_leader_times_out(pg_schema_url: str) -> None:
    import psycopg

    with SqlRemoteLogMetadataManager(pg_schema_url, lock_timeout_ms=200, statement_timeout_ms=5_000) as m:
        m.become_leader(TP, 0, 0)
        schema = pg_schema_url.rsplit("%3D", 1)[1]
        conninfo = normalize_url(pg_schema_url.split("?")[0]).replace("postgresql+psycopg://", "postgresql://")
        with psycopg.connect(conninfo, options=f"-csearch_path={schema}") as stalled:
            # the old leader's open transaction locked the fence row and then stalled
            stalled.execute("SELECT leader_epoch FROM tc_leaders WHERE topic = %s AND partition_id = %s FOR UPDATE",
                            (TP.topic, TP.partition))
            with pytest.raises(MetadataStoreTimeoutError, match="lock_timeout=200 ms") as e:
                m.become_leader(TP, 1, 1, start_offset=10)
            assert e.value.retriable
            stalled.rollback()
        assert m.become_leader(TP, 1, 1, start_offset=10).leader_epoch == 1
        assert m.leader_state(TP).broker_id == 1  # type: ignore[union-attr]


@pytest.mark.postgres
def test_postgres_sessions_carry_the_configured_bounds(pg_schema_url: str) -> None:
    m = SqlRemoteLogMetadataManager(pg_schema_url, lock_timeout_ms=1234, statement_timeout_ms=5678)
    try:
        with m._engine.connect() as conn:
            got = {name: conn.exec_driver_sql(f"SHOW {name}").scalar_one()
                   for name in ("lock_timeout", "statement_timeout", "idle_in_transaction_session_timeout")}
    finally:
        m.close()
    assert got == {"lock_timeout": "1234ms", "statement_timeout": "5678ms",
                   "idle_in_transaction_session_timeout": "5678ms"}


@pytest.mark.postgres
def test_a_postgres_that_answers_nothing_is_bounded_client_side_and_the_store_recovers(pg_schema_url: str) -> None:
    """Regression: a PostgreSQL that stopped answering (a server frozen by a hung disk or a paused VM, a network
    dropping packets) hung every metadata call for as long as TCP kept the connection open, hours: the server's
    statement_timeout cannot end a statement whose server answers nothing. Each round trip is now bounded
    client-side (statement_timeout + grace); the stuck connection is closed, and the next call after the server
    answers again works on a new one."""
    import threading

    from sqlalchemy.engine import make_url

    from metadata.errors import MetadataStoreError
    from metadata.sql.postgres_bound import supported
    from tests.support.fault_proxy import FaultProxy

    assert supported()  # the psycopg this project requires (3.3+) bounds its waits
    u = make_url(pg_schema_url)
    proxy = FaultProxy((u.host or "127.0.0.1", u.port or 5432)).start()
    try:
        url = u.set(host="127.0.0.1", port=proxy.port).render_as_string(hide_password=False)
        with SqlRemoteLogMetadataManager(url, lock_timeout_ms=200, statement_timeout_ms=1_000) as m:
            m.become_leader(TP, 0, 0)
            for call in (lambda: m.leader_state(TP), lambda: m.become_leader(TP, 1, 1, start_offset=5)):
                proxy.set_stalled(True)
                outcome: list[BaseException | object] = []

                def run(call=call, outcome=outcome) -> None:  # type: ignore[no-untyped-def]
                    try:
                        outcome.append(call())
                    except BaseException as e:  # noqa: BLE001 - handed to the test thread
                        outcome.append(e)

                t0 = time.monotonic()
                worker = threading.Thread(target=run, daemon=True)
                worker.start()
                worker.join(20)  # the old code waits here for hours
                took = time.monotonic() - t0
                assert not worker.is_alive(), "a metadata call hung on a PostgreSQL that answers nothing"
                (err,) = outcome
                assert isinstance(err, MetadataStoreError) and err.retriable, err
                assert took < 10, took  # the round trip's bound (2 s), and a reconnect's connect_timeout (2 s)
                proxy.set_stalled(False)
                # the server answers again: the next call works, on a connection that never stalled
                assert m.leader_state(TP) is not None
            assert m.become_leader(TP, 1, 1, start_offset=5).leader_epoch == 1
            assert m.answer_timeout_s == 2.0  # statement_timeout + as much again (at most 5 s more)
    finally:
        proxy.stop()
