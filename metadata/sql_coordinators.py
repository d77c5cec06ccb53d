"""Coordinator slot claims in SQL (SQLite or PostgreSQL): table ``kafka_coordinators``, compare-and-swap on the epoch."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from sqlalchemy import BigInteger, Column, Integer, MetaData, String, Table, insert, select, update
from sqlalchemy import exc as sa_exc
from sqlalchemy.engine import Connection

from metadata.coordinators import NO_OWNER, CoordinatorClaim, CoordinatorFencedError, CoordinatorStore
from metadata.sql.standalone import StandaloneSqlStore

_meta = MetaData()

coordinators_table = Table(
    "kafka_coordinators", _meta,
    Column("kind", String(16), primary_key=True),
    Column("slot", Integer, primary_key=True, autoincrement=False),
    Column("broker_id", Integer, nullable=False),
    Column("incarnation", String(64), nullable=False),
    Column("epoch", BigInteger, nullable=False),
    Column("claimed_ms", BigInteger, nullable=False),
)


def _row(r: Any) -> CoordinatorClaim:
    return CoordinatorClaim(r.kind, int(r.slot), int(r.broker_id), r.incarnation, int(r.epoch), int(r.claimed_ms))


def fence(conn: Connection, kind: str, slot: int, broker_id: int, epoch: int) -> None:
    """In a writer's transaction: fail unless ``broker_id`` holds the slot at ``epoch``.

    An UPDATE (not a SELECT) so the row is write-locked until the writer commits: a concurrent
    claim is ordered entirely before (the write is fenced) or after (the write preceded it).
    """
    t = coordinators_table
    n = conn.execute(update(t).where(t.c.kind == kind, t.c.slot == slot, t.c.broker_id == broker_id,
                                     t.c.epoch == epoch).values(epoch=t.c.epoch)).rowcount
    if n != 1:
        raise CoordinatorFencedError(f"{kind} coordinator slot {slot}: broker {broker_id} at epoch {epoch} was "
                                     f"superseded; another node coordinates it now")


def _insert_if_absent(conn: Connection) -> Any:
    if conn.dialect.name == "postgresql":
        from sqlalchemy.dialects.postgresql import insert as pg_insert

        return pg_insert(coordinators_table).on_conflict_do_nothing(index_elements=["kind", "slot"])
    from sqlalchemy.dialects.sqlite import insert as sqlite_insert

    return sqlite_insert(coordinators_table).on_conflict_do_nothing(index_elements=["kind", "slot"])


class FencedSqlStore(StandaloneSqlStore):
    """A standalone store whose writes are fenced on a coordinator claim in ``kafka_coordinators``."""

    _metadata: tuple[MetaData, ...] = (_meta,)

    @contextmanager
    def _fenced(self, kind: str, slot: int, broker_id: int, epoch: int) -> Iterator[Connection]:
        """A write transaction that first checks ``broker_id`` holds the slot at ``epoch`` (see :func:`fence`)."""
        with self.engine.begin() as conn:
            fence(conn, kind, slot, broker_id, epoch)
            yield conn


class SqlCoordinatorStore(StandaloneSqlStore, CoordinatorStore):
    """:class:`CoordinatorStore` on the metadata store's database."""

    _metadata = (_meta,)

    def claims(self, kind: str) -> dict[int, CoordinatorClaim]:
        t = coordinators_table
        with self.engine.connect() as conn:
            rows = conn.execute(select(t).where(t.c.kind == kind)).all()
        return {int(r.slot): _row(r) for r in rows}

    def claim(self, kind: str, slot: int, broker_id: int, incarnation: str, now_ms: int, *,
              expected_epoch: int | None) -> CoordinatorClaim | None:
        t = coordinators_table
        try:
            with self.engine.begin() as conn:
                if expected_epoch is None:
                    conn.execute(insert(t).values(kind=kind, slot=slot, broker_id=broker_id, incarnation=incarnation,
                                                  epoch=0, claimed_ms=now_ms))
                    return CoordinatorClaim(kind, slot, broker_id, incarnation, 0, now_ms)
                n = conn.execute(update(t).where(t.c.kind == kind, t.c.slot == slot, t.c.epoch == expected_epoch)
                                 .values(broker_id=broker_id, incarnation=incarnation, epoch=expected_epoch + 1,
                                         claimed_ms=now_ms)).rowcount
        except sa_exc.IntegrityError:
            return None  # another node inserted the first claim
        except sa_exc.OperationalError:
            return None  # a lock timeout: the next round tries again
        if n != 1:
            return None
        return CoordinatorClaim(kind, slot, broker_id, incarnation, expected_epoch + 1, now_ms)

    def claim_many(self, kind: str, wanted: dict[int, int | None], broker_id: int, incarnation: str,
                   now_ms: int) -> list[CoordinatorClaim]:
        """Every compare-and-swap in one transaction (one commit for a node taking over many slots)."""
        t = coordinators_table
        out = []
        try:
            with self.engine.begin() as conn:
                for slot, expected in sorted(wanted.items()):
                    if expected is None:
                        # RETURNING tells whether the row went in (rowcount of ON CONFLICT DO NOTHING is not
                        # reliable across drivers)
                        n = len(conn.execute(_insert_if_absent(conn).values(
                            kind=kind, slot=slot, broker_id=broker_id, incarnation=incarnation, epoch=0,
                            claimed_ms=now_ms).returning(t.c.slot)).all())
                        epoch = 0
                    else:
                        n = conn.execute(update(t).where(t.c.kind == kind, t.c.slot == slot, t.c.epoch == expected)
                                         .values(broker_id=broker_id, incarnation=incarnation, epoch=expected + 1,
                                                 claimed_ms=now_ms)).rowcount
                        epoch = expected + 1
                    if n == 1:
                        out.append(CoordinatorClaim(kind, slot, broker_id, incarnation, epoch, now_ms))
        except (sa_exc.IntegrityError, sa_exc.OperationalError):
            return []  # contention: the next round tries again
        return out

    def release(self, kind: str, slot: int, broker_id: int, epoch: int) -> bool:
        t = coordinators_table
        with self.engine.begin() as conn:
            n = conn.execute(update(t).where(t.c.kind == kind, t.c.slot == slot, t.c.broker_id == broker_id,
                                             t.c.epoch == epoch).values(broker_id=NO_OWNER)).rowcount
        return n == 1

    def release_all(self, kind: str, broker_id: int, incarnation: str) -> int:
        t = coordinators_table
        with self.engine.begin() as conn:
            return int(conn.execute(update(t).where(t.c.kind == kind, t.c.broker_id == broker_id,
                                                    t.c.incarnation == incarnation)
                                    .values(broker_id=NO_OWNER)).rowcount)

    def holds(self, kind: str, slot: int, broker_id: int, epoch: int) -> bool:
        t = coordinators_table
        with self.engine.connect() as conn:
            r = conn.execute(select(t.c.broker_id, t.c.epoch).where(t.c.kind == kind, t.c.slot == slot)).first()
        return r is not None and int(r.broker_id) == broker_id and int(r.epoch) == epoch
