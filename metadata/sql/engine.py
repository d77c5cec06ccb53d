"""The SQL store's engine and transaction policy: opening SQLite or PostgreSQL, bounding every
transaction, translating driver errors, and the locks that serialise what the backend cannot.

Every transaction is bounded, so a stalled writer (an old leader frozen while it holds the
partition's fence row) cannot block the others indefinitely: on PostgreSQL each connection
runs with ``lock_timeout``, ``statement_timeout`` and ``idle_in_transaction_session_timeout``
(the last ends the stalled session itself and releases its row locks); on SQLite the busy
timeout bounds the wait for the write lock. A PostgreSQL server that answers nothing at all (frozen, or cut off
by the network) is bounded client-side, by a deadline on every round trip (:mod:`metadata.sql.postgres_bound`).
Hitting a bound raises the retriable
:class:`~metadata.errors.MetadataStoreTimeoutError` (HTTP 503 with Retry-After).

:class:`SqlStore` is the base every store of :mod:`metadata.sql` extends, so one composed
class shares one engine among them.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterator
from contextlib import contextmanager, nullcontext
from pathlib import Path
from typing import Any, Self, TypeVar

from sqlalchemy import Connection, Table, create_engine, event
from sqlalchemy import exc as sa_exc
from sqlalchemy.engine import make_url
from sqlalchemy.pool import StaticPool

from log.clock import SYSTEM_CLOCK, Clock
from log.errors import InvalidConfigError
from log.locks import (
    RANK_LEAF,
    RANK_METADATA_CONNECTION,
    RANK_METADATA_PARTITION,
    RANK_METADATA_WRITE,
    ordered_lock,
    ordered_rlock,
)
from log.types import TopicPartition
from metadata.errors import MetadataError, MetadataStoreError, MetadataStoreTimeoutError
from metadata.sql.schema import create_schema

T = TypeVar("T")

#: default bounds of a metadata transaction (ServiceConfig exposes both)
DEFAULT_LOCK_TIMEOUT_MS = 5_000
DEFAULT_STATEMENT_TIMEOUT_MS = 30_000
#: PostgreSQL SQLSTATEs of the bounds above: lock_not_available, query_canceled,
#: idle_in_transaction_session_timeout
_PG_TIMEOUT_STATES = {"55P03": "lock_timeout", "57014": "statement_timeout",
                      "25P03": "idle_in_transaction_session_timeout"}


def normalize_url(url: str) -> str:
    """``postgresql://`` / ``postgres://`` / ``postgresql+psycopg2://`` -> ``postgresql+psycopg://``
    (psycopg 3 is the installed driver)."""
    scheme, sep, rest = url.partition("://")
    base = scheme.split("+", 1)[0].lower()
    if base in ("postgresql", "postgres"):
        return f"postgresql+psycopg://{rest}"
    return url


class SqlStore:
    """One SQLAlchemy engine (``sqlite:///...``, ``postgresql://...``) with its schema created,
    and bounded, error-translated transactions over it.

    Thread-safe: PostgreSQL and SQLite files use a connection pool; ``sqlite:///:memory:``
    shares one connection (StaticPool), so its operations are serialised by a lock. On
    SQLite, writes from this process are serialised too (SQLite has one writer anyway);
    other processes wait on SQLite's busy timeout.
    """

    def __init__(
        self,
        url: str,
        *,
        clock: Clock = SYSTEM_CLOCK,
        lock_timeout_ms: int = DEFAULT_LOCK_TIMEOUT_MS,
        statement_timeout_ms: int = DEFAULT_STATEMENT_TIMEOUT_MS,
        echo: bool = False,
    ) -> None:
        for name, value in (("lock_timeout_ms", lock_timeout_ms), ("statement_timeout_ms", statement_timeout_ms)):
            if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= 2**31 - 1:
                raise InvalidConfigError(f"metadata store {name}={value!r} is invalid: must be an integer in "
                                         f"1..{2**31 - 1} (milliseconds)")
        self.lock_timeout_ms = lock_timeout_ms
        self.statement_timeout_ms = statement_timeout_ms
        #: PostgreSQL: the client-side bound of one round trip (metadata.sql.postgres_bound); None: none
        self.answer_timeout_s: float | None = None
        self._url = normalize_url(url)
        self._clock = clock
        try:
            sa_url = make_url(self._url)
        except sa_exc.ArgumentError as e:
            raise InvalidConfigError(f"metadata store URL {url!r} is malformed: {e}") from None
        backend = sa_url.get_backend_name()
        self._sqlite = backend == "sqlite"
        memory = self._sqlite and sa_url.database in (None, "", ":memory:")
        with self._errors("open"):
            if memory:
                self._engine = create_engine(self._url, echo=echo, poolclass=StaticPool,
                                             connect_args={"check_same_thread": False})
            elif self._sqlite:
                Path(sa_url.database or "").expanduser().parent.mkdir(parents=True, exist_ok=True)
                self._engine = create_engine(
                    self._url, echo=echo,
                    connect_args={"check_same_thread": False, "timeout": lock_timeout_ms / 1000})
                event.listen(self._engine, "connect", _sqlite_on_connect)
            elif backend == "postgresql":
                connect_args: dict[str, Any] = {}
                if "connect_timeout" not in sa_url.query:
                    connect_args["connect_timeout"] = max(2, -(-statement_timeout_ms // 1000))
                self._engine = create_engine(self._url, echo=echo, pool_pre_ping=True, connect_args=connect_args,
                                             pool_timeout=max(1.0, statement_timeout_ms / 1000))
                from metadata.sql import postgres_bound

                if postgres_bound.supported():  # every round trip bounded client-side too (a server that stalls)
                    self.answer_timeout_s = postgres_bound.answer_timeout_s(statement_timeout_ms)
                    event.listen(self._engine, "do_connect", functools.partial(
                        _connect_bounded, cls=postgres_bound.bounded_connection_class(self.answer_timeout_s)))
                event.listen(self._engine, "connect", functools.partial(
                    _postgres_on_connect, lock_timeout_ms=lock_timeout_ms,
                    statement_timeout_ms=statement_timeout_ms))
            else:
                raise InvalidConfigError(f"metadata store URL {url!r}: unsupported database {backend!r}")
            create_schema(self._engine)
        # one connection for every thread: every operation must hold the lock
        self._all_lock: Any = (ordered_rlock("metadata.connection", RANK_METADATA_CONNECTION) if memory
                               else nullcontext())
        self._write_lock: Any = ordered_rlock("metadata.write", RANK_METADATA_WRITE) if self._sqlite else nullcontext()
        self._guard = ordered_lock("metadata.partition_locks", RANK_LEAF)
        self._tp_locks: dict[TopicPartition, Any] = {}
        self._closed = False

    def __repr__(self) -> str:
        return f"{type(self).__name__}({make_url(self._url).render_as_string(hide_password=True)!r})"

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        """Release connections. Idempotent."""
        if not self._closed:
            self._closed = True
            self._engine.dispose()

    @contextmanager
    def _errors(self, what: str) -> Iterator[None]:
        try:
            yield
        except MetadataError:
            raise
        except sa_exc.SQLAlchemyError as e:
            orig = getattr(e, "orig", None)
            code = getattr(orig, "sqlstate", None) or getattr(getattr(orig, "diag", None), "sqlstate", None)
            timeout = self._timeout_message(what, code, str(orig or e))
            if getattr(orig, "no_answer", False):  # postgres_bound.StoreNoAnswer: the client-side bound
                timeout = (f"metadata store {what} timed out: {str(orig).strip()} (the client-side bound: "
                           f"statement_timeout + grace). Retriable: retry in a second")
            if timeout is not None:
                raise MetadataStoreTimeoutError(timeout) from None
            retriable = (isinstance(e, sa_exc.OperationalError | sa_exc.TimeoutError)
                         or bool(getattr(e, "connection_invalidated", False))
                         or code in ("40001", "40P01", "55P03"))
            raise MetadataStoreError(
                f"metadata store {what} failed: {type(e).__name__}: {str(orig or e).strip()}"
                + (" (retriable)" if retriable else ""), retriable=retriable) from None

    def _timeout_message(self, what: str, code: str | None, detail: str) -> str | None:
        """The message of a transaction that hit one of its bounds, or None for other errors."""
        first = detail.strip().splitlines()[0] if detail.strip() else ""
        if code in _PG_TIMEOUT_STATES:
            bound = _PG_TIMEOUT_STATES[code]
            ms = self.lock_timeout_ms if bound == "lock_timeout" else self.statement_timeout_ms
            return (f"metadata store {what} timed out ({bound}={ms} ms: {first}); another transaction, e.g. a "
                    f"stalled old leader, held the partition's rows. Retriable: retry in a second")
        if self._sqlite and ("database is locked" in detail or "database is busy" in detail):
            return (f"metadata store {what} timed out: SQLite stayed locked by another writer for the busy "
                    f"timeout ({self.lock_timeout_ms} ms). Retriable: retry in a second")
        return None

    def _tp_lock(self, tp: TopicPartition) -> Any:
        """The lock serialising this process's writes of ``tp`` (and its cached state)."""
        with self._guard:
            lock = self._tp_locks.get(tp)
            if lock is None:
                lock = self._tp_locks[tp] = ordered_rlock("metadata.partition", RANK_METADATA_PARTITION,
                                                          label=str(tp))
            return lock

    def _write(self, tp: TopicPartition, what: str, fn: Callable[[Connection], T]) -> T:
        """Run ``fn`` in one write transaction of ``tp``, under the partition's lock."""
        if self._closed:
            raise MetadataStoreError("metadata manager is closed")
        with self._tp_lock(tp), self._errors(what), self._all_lock, self._write_lock, \
                self._engine.begin() as conn:
            return fn(conn)

    def _write_global(self, what: str, fn: Callable[[Connection], T]) -> T:
        """One write transaction not tied to a partition's lock (erasures, topic configs)."""
        if self._closed:
            raise MetadataStoreError("metadata manager is closed")
        with self._errors(what), self._all_lock, self._write_lock, self._engine.begin() as conn:
            return fn(conn)

    def _read(self, what: str, fn: Callable[[Connection], T]) -> T:
        if self._closed:
            raise MetadataStoreError("metadata manager is closed")
        with self._errors(what), self._all_lock, self._engine.connect() as conn:
            return fn(conn)

    def _insert_or_ignore(self, conn: Connection, table: Table, values: dict[str, Any], keys: list[str]) -> bool:
        """Insert a row unless one with the same ``keys`` exists (``ON CONFLICT DO NOTHING``, which
        waits for a concurrent inserter instead of failing); True if this call inserted it."""
        stmt: Any
        if self._engine.dialect.name == "postgresql":
            from sqlalchemy.dialects.postgresql import insert as pg_insert

            stmt = pg_insert(table)
        else:
            from sqlalchemy.dialects.sqlite import insert as sqlite_insert

            stmt = sqlite_insert(table)
        stmt = stmt.values(**values).on_conflict_do_nothing(index_elements=keys)
        if self._engine.dialect.insert_returning:  # psycopg reports rowcount -1 for this statement
            return conn.execute(stmt.returning(*(table.c[k] for k in keys))).first() is not None
        return bool(conn.execute(stmt).rowcount == 1)

    def _forget_partition(self, conn: Connection, tp: TopicPartition) -> None:
        """Delete ``tp``'s rows of this store's tables (``delete_partition``, in its transaction).
        Every store with rows per partition extends it and calls ``super()``."""


def _connect_bounded(_dialect: Any, _record: Any, cargs: Any, cparams: Any, *, cls: Any) -> Any:
    # as the dialect's own connect (psycopg.connect), with the bounded connection class
    return cls.connect(*cargs, **cparams)


def _postgres_on_connect(dbapi_connection: Any, _record: Any, *, lock_timeout_ms: int,
                         statement_timeout_ms: int) -> None:
    # session settings rather than libpq "options", so a URL's own ?options=... (search_path)
    # keeps working; SET is not transactional here because the connection is in autocommit
    # until SQLAlchemy begins
    cur = dbapi_connection.cursor()
    cur.execute(f"SET lock_timeout = {int(lock_timeout_ms)}")
    cur.execute(f"SET statement_timeout = {int(statement_timeout_ms)}")
    cur.execute(f"SET idle_in_transaction_session_timeout = {int(statement_timeout_ms)}")
    cur.close()
    dbapi_connection.commit()


def _sqlite_on_connect(dbapi_connection: Any, _record: Any) -> None:
    # WAL lets readers run while a writer commits; FULL sync keeps fencing decisions durable
    cur = dbapi_connection.cursor()
    cur.execute("PRAGMA journal_mode=WAL")
    cur.execute("PRAGMA synchronous=FULL")
    cur.close()
