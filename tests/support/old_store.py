"""A SQLite metadata store as an older tiercompact left it, for the schema-upgrade tests."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from sqlalchemy import Table, create_engine, delete, insert, inspect

from metadata.sql import SqlRemoteLogMetadataManager
from metadata.sql.schema import SCHEMA_VERSION, schema_version


@contextmanager
def store_at_version(tmp_path: Path, version: int, *added_later: Table) -> Iterator[str]:
    """Yield the URL of a store of schema ``version``: today's schema without ``added_later`` (the tables later
    versions added), its version row set to ``version``. The body opens it (which upgrades it); afterwards the
    store must be at SCHEMA_VERSION."""
    url = f"sqlite:///{tmp_path / 'old.db'}"
    SqlRemoteLogMetadataManager(url).close()
    engine = create_engine(url)
    try:
        for table in added_later:
            table.drop(engine)
        with engine.begin() as conn:
            conn.execute(delete(schema_version))
            conn.execute(insert(schema_version).values(version=version))
        assert not any(inspect(engine).has_table(t.name) for t in added_later)
        yield url
        with engine.connect() as conn:
            assert conn.execute(schema_version.select()).scalars().all() == [SCHEMA_VERSION]
        assert all(inspect(engine).has_table(t.name) for t in added_later)
    finally:
        engine.dispose()
