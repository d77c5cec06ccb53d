"""The ``shared_store_url`` fixture: one metadata store URL that several stores open, as nodes do (a SQLite
file, or a private schema of the PostgreSQL test database when configured)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.contract.conftest import private_postgres_schema


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def shared_store_url(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    if request.param == "sqlite":
        yield f"sqlite:///{tmp_path / 'm.db'}"
        return
    with private_postgres_schema("tc_meta") as url:
        yield url
