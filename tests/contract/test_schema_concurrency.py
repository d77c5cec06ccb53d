"""Several nodes opening one fresh metadata store at once all get a working schema.

Regression (found by the two-process zombie test on PostgreSQL): two servers started
together both created the schema and one died with 'relation "tc_schema_version" already
exists'. PostgreSQL nodes now serialise schema creation on an advisory lock, and any
backend re-probes after losing such a race.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import create_engine, select

from metadata.sql import SqlRemoteLogMetadataManager, normalize_url
from metadata.sql.schema import SCHEMA_VERSION, schema_version
from tests.contract.conftest import private_postgres_schema

OPENERS = 6


@pytest.fixture(params=["sqlite-file", pytest.param("postgres", marks=pytest.mark.postgres)])
def fresh_store_url(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    if request.param == "sqlite-file":
        (tmp_path / "md").mkdir()
        yield f"sqlite:///{tmp_path}/md/metadata.db"
        return
    with private_postgres_schema("tc_race") as url:
        yield url


def _open_together(open_one: Any) -> tuple[list[Any], list[BaseException]]:
    """``open_one()`` in OPENERS threads released at once; answers what opened and what failed."""
    barrier = threading.Barrier(OPENERS)
    errors: list[BaseException] = []
    opened: list[Any] = []
    lock = threading.Lock()

    def run() -> None:
        barrier.wait()
        try:
            got = open_one()
        except BaseException as e:  # noqa: BLE001 - reported by the caller
            with lock:
                errors.append(e)
            return
        with lock:
            opened.append(got)

    threads = [threading.Thread(target=run) for _ in range(OPENERS)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    return opened, errors


def test_nodes_opening_a_fresh_store_together_all_succeed(fresh_store_url: str) -> None:
    managers, errors = _open_together(lambda: SqlRemoteLogMetadataManager(fresh_store_url))
    try:
        assert errors == []
        assert len(managers) == OPENERS
        engine = create_engine(normalize_url(fresh_store_url))
        with engine.connect() as conn:
            assert [r[0] for r in conn.execute(select(schema_version.c.version))] == [SCHEMA_VERSION]
        engine.dispose()
    finally:
        for m in managers:
            m.close()


@pytest.mark.parametrize("store", ["SqlGroupStore", "SqlTxnStateStore", "SqlCoordinatorStore"])
def test_coordinator_stores_opened_together_on_a_fresh_store_all_succeed(fresh_store_url: str, store: str) -> None:
    """Regression (found by the two-node Kafka tests on a fresh PostgreSQL schema): two nodes starting together
    both created the group tables and one died with a duplicate key in pg_type. The coordinators' own stores
    now create their tables through the schema's race-safe path too."""
    from metadata.sql_coordinators import SqlCoordinatorStore
    from metadata.sql_group_offsets import SqlGroupStore
    from metadata.sql_txn_state import SqlTxnStateStore

    cls = {"SqlGroupStore": SqlGroupStore, "SqlTxnStateStore": SqlTxnStateStore,
           "SqlCoordinatorStore": SqlCoordinatorStore}[store]
    opened, errors = _open_together(lambda: cls(fresh_store_url))
    try:
        assert errors == []
        assert len(opened) == OPENERS
    finally:
        for s in opened:
            s.close()
