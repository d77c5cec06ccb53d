"""An engine of its own on the metadata store's URL (and a store base that opens it), for the stores not yet folded into the composed SQL store.

The coordinator stores (metadata/sql_coordinators.py, sql_group_offsets.py, sql_txn_state.py) still open
their own engine and tables through this; metadata/sql/__init__.py's recipe moves a store into the
package, onto the one engine of :class:`~metadata.sql.engine.SqlStore`.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from sqlalchemy import MetaData, create_engine, event
from sqlalchemy import exc as sa_exc
from sqlalchemy.engine import Engine, make_url
from sqlalchemy.pool import StaticPool

from log.errors import InvalidConfigError
from metadata.sql.schema import create_safely


def open_engine(url: str, *, lock_timeout_ms: int = 5_000) -> Engine:
    """A SQLAlchemy engine on the metadata store ``url`` (psycopg 3 for PostgreSQL; WAL for SQLite files)."""
    scheme, _sep, rest = url.partition("://")
    if scheme.split("+", 1)[0].lower() in ("postgresql", "postgres"):
        url = f"postgresql+psycopg://{rest}"
    try:
        sa_url = make_url(url)
    except sa_exc.ArgumentError as e:
        raise InvalidConfigError(f"metadata store URL {url!r} is malformed: {e}") from None
    if sa_url.get_backend_name() == "sqlite":
        if sa_url.database in (None, "", ":memory:"):
            return create_engine(url, poolclass=StaticPool, connect_args={"check_same_thread": False})
        Path(sa_url.database or "").expanduser().parent.mkdir(parents=True, exist_ok=True)
        engine = create_engine(url, connect_args={"check_same_thread": False, "timeout": lock_timeout_ms / 1000})

        @event.listens_for(engine, "connect")
        def _wal(dbapi_connection: Any, _record: Any) -> None:
            cur = dbapi_connection.cursor()
            cur.execute("PRAGMA journal_mode=WAL")
            cur.close()

        return engine
    return create_engine(url, pool_pre_ping=True, pool_size=2, max_overflow=4)


class StandaloneSqlStore:
    """A store on its own engine (or a shared ``engine`` it does not dispose), creating ``_metadata``'s tables in order."""

    _metadata: tuple[MetaData, ...] = ()

    def __init__(self, url: str = "", *, lock_timeout_ms: int = 5_000, engine: Any = None) -> None:
        self._own_engine = engine is None
        self.engine = engine if engine is not None else open_engine(url, lock_timeout_ms=lock_timeout_ms)
        # two nodes starting on an empty PostgreSQL store both create these tables: the schema's race-safe path
        create_safely(self.engine, self._create_tables)

    def _create_tables(self) -> None:
        for meta in self._metadata:
            meta.create_all(self.engine, checkfirst=True)

    def close(self) -> None:
        if self._own_engine:
            self.engine.dispose()
