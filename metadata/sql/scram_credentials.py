"""The SQL :class:`~metadata.scram_credentials.ScramCredentialStore`: one row per user and mechanism
(``kafka_scram_credentials``)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from sqlalchemy import Connection, delete, select, update

from metadata.scram_credentials import ScramCredential, ScramCredentialNotFoundError
from metadata.sql.engine import SqlStore
from metadata.sql.schema import scram_credentials


def _credential(r: Any) -> ScramCredential:
    return ScramCredential(r.user_name, r.mechanism, int(r.iterations), bytes(r.salt), bytes(r.stored_key),
                           bytes(r.server_key))


class SqlScramCredentialStore(SqlStore):
    """SCRAM credentials shared by every node on the store (see :class:`~metadata.scram_credentials.ScramCredentialStore`)."""

    def scram_credentials(self, user: str | None = None) -> list[ScramCredential]:
        t = scram_credentials
        stmt = select(t).order_by(t.c.user_name, t.c.mechanism)
        if user is not None:
            stmt = stmt.where(t.c.user_name == user)
        return [_credential(r) for r in self._read("scram_credentials", lambda c: c.execute(stmt).all())]

    def alter_scram_credentials(self, user: str, upserts: Sequence[ScramCredential],
                                deletions: Sequence[str]) -> None:
        t = scram_credentials
        if any(c.user != user for c in upserts):
            raise ValueError("every upserted credential must be the altered user's")
        now = self._clock.milliseconds()

        def fn(conn: Connection) -> None:
            for mechanism in deletions:
                gone = conn.execute(delete(t).where(t.c.user_name == user, t.c.mechanism == mechanism)).rowcount
                if gone != 1:  # raising rolls back the deletions already made
                    raise ScramCredentialNotFoundError(f"user {user!r} has no {mechanism} credential to delete")
            for c in upserts:
                values = {"iterations": c.iterations, "salt": c.salt, "stored_key": c.stored_key,
                          "server_key": c.server_key, "updated_ms": now}
                key = {"user_name": user, "mechanism": c.mechanism}
                # insert, or (the row is there, or a concurrent alterer's insert won) replace: the last one stays
                if not self._insert_or_ignore(conn, t, {**key, **values}, ["user_name", "mechanism"]):
                    conn.execute(update(t).where(t.c.user_name == user, t.c.mechanism == c.mechanism)
                                 .values(**values))

        self._write_global("alter_scram_credentials", fn)
