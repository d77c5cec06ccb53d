"""PostgreSQL connections whose every round trip has a client-side deadline, so a stalled server cannot hang a caller.

The server-side bounds (``statement_timeout``, ``lock_timeout``, see :mod:`metadata.sql.engine`) end a statement
that runs too long, but only a server that still answers can send that error. A server frozen by a hung disk or a
paused VM, or a network that drops packets, answers nothing, and libpq waits on the socket for as long as TCP
keeps the connection open: hours. Every thread then blocked in the metadata store (a Kafka Metadata request, an
HTTP route, a leadership heartbeat) stays blocked, and the node stops answering.

psycopg runs every round trip (a statement, a commit, the pool's pre-ping) through ``Connection.wait``, which takes
a deadline since psycopg 3.3. :func:`bounded_connection_class` gives a connection class whose ``wait`` applies
``answer_timeout_s`` when the caller gave none. A round trip past it closes the connection (its protocol state is
unknown: it never goes back to the pool, as SQLAlchemy takes a closed connection for a disconnect) and raises
:class:`StoreNoAnswer`, which the engine reports as the retriable ``MetadataStoreTimeoutError`` (HTTP 503 with
Retry-After, Kafka's REQUEST_TIMED_OUT family).
"""

from __future__ import annotations

import inspect
from typing import Any

import psycopg
from psycopg import errors as pg_errors

#: how long past ``statement_timeout`` a round trip may wait for the server's answer (or its timeout error): the
#: server's own bound fires first whenever the server still runs; this catches one that answers nothing
MAX_GRACE_S = 5.0


class StoreNoAnswer(psycopg.OperationalError):
    """PostgreSQL answered nothing within the connection's ``answer_timeout_s``; the connection was closed."""

    no_answer = True  # what the engine's error translation looks for (without importing psycopg for SQLite)


def answer_timeout_s(statement_timeout_ms: int) -> float:
    """The client-side bound of one round trip: ``statement_timeout`` plus as much again, at most MAX_GRACE_S."""
    s = statement_timeout_ms / 1000
    return s + min(MAX_GRACE_S, s)


def supported() -> bool:
    """Whether this psycopg's ``Connection.wait`` takes a deadline (psycopg 3.3 and later)."""
    return "timeout" in inspect.signature(psycopg.Connection.wait).parameters


class _BoundedConnection(psycopg.Connection):  # type: ignore[type-arg]
    __slots__ = ()
    answer_timeout_s: float = 35.0

    def wait(self, gen: Any, interval: float = 0.1, timeout: float | None = None) -> Any:
        if timeout is not None:  # psycopg's own bounded waits (cancelling after Ctrl-C) keep theirs
            return super().wait(gen, interval, timeout)
        try:
            return super().wait(gen, interval, self.answer_timeout_s)
        except pg_errors._WaitTimeout:  # noqa: SLF001 - psycopg's error for exactly this wait's deadline
            self.close()
            raise StoreNoAnswer(f"PostgreSQL answered nothing within {self.answer_timeout_s:g} s (the server or "
                                "the network to it stalled); the connection was closed") from None


def bounded_connection_class(timeout_s: float) -> type[psycopg.Connection]:  # type: ignore[type-arg]
    """A psycopg connection class whose round trips wait at most ``timeout_s`` for the server."""
    return type("BoundedConnection", (_BoundedConnection,), {"__slots__": (), "answer_timeout_s": timeout_s})
