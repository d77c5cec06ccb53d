"""The cluster registry in SQL (SQLite or PostgreSQL): its own tables beside the segment metadata, created if missing."""

from __future__ import annotations

import uuid
from pathlib import Path
from typing import Any

from sqlalchemy import (
    BigInteger,
    Column,
    Integer,
    MetaData,
    String,
    Table,
    create_engine,
    delete,
    event,
    insert,
    select,
    update,
)
from sqlalchemy import exc as sa_exc
from sqlalchemy.engine import Engine, make_url
from sqlalchemy.pool import StaticPool

from log.errors import InvalidConfigError
from metadata.cluster import BrokerRegistration, ClusterRegistry, DuplicateBrokerError

_meta = MetaData()

brokers_table = Table(
    "kafka_brokers", _meta,
    Column("broker_id", Integer, primary_key=True, autoincrement=False),
    Column("host", String(255), nullable=False),
    Column("port", Integer, nullable=False),
    Column("rack", String(255), nullable=True),
    Column("incarnation", String(64), nullable=False),
    Column("heartbeat_ms", BigInteger, nullable=False),
)

topic_ids_table = Table(
    "kafka_topic_ids", _meta,
    Column("topic", String(249), primary_key=True),
    Column("topic_id", String(36), nullable=False),
)


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


def _row(r: Any) -> BrokerRegistration:
    return BrokerRegistration(int(r.broker_id), r.host, int(r.port), r.incarnation, int(r.heartbeat_ms), r.rack)


class SqlClusterRegistry(ClusterRegistry):
    """:class:`ClusterRegistry` on the metadata store's database (tables ``kafka_brokers``, ``kafka_topic_ids``)."""

    def __init__(self, url: str, *, lock_timeout_ms: int = 5_000) -> None:
        self._engine = open_engine(url, lock_timeout_ms=lock_timeout_ms)
        _meta.create_all(self._engine, checkfirst=True)

    def register(self, reg: BrokerRegistration, *, session_timeout_ms: int) -> None:
        with self._engine.begin() as conn:
            old = conn.execute(select(brokers_table).where(brokers_table.c.broker_id == reg.broker_id)
                               .with_for_update()).first()
            values = {"host": reg.host, "port": reg.port, "rack": reg.rack, "incarnation": reg.incarnation,
                      "heartbeat_ms": reg.heartbeat_ms}
            if old is None:
                try:
                    conn.execute(insert(brokers_table).values(broker_id=reg.broker_id, **values))
                except sa_exc.IntegrityError:
                    raise DuplicateBrokerError(f"broker id {reg.broker_id} was registered by another node at the "
                                               f"same moment; give each node its own --broker-id") from None
                return
            prev = _row(old)
            if prev.incarnation != reg.incarnation and prev.alive(reg.heartbeat_ms, session_timeout_ms):
                raise DuplicateBrokerError(
                    f"broker id {reg.broker_id} is registered by a live node at {prev.host}:{prev.port} (heartbeat "
                    f"{reg.heartbeat_ms - prev.heartbeat_ms} ms ago); give each node sharing the metadata store "
                    f"its own --broker-id, or wait {session_timeout_ms} ms after stopping the other one")
            conn.execute(update(brokers_table).where(brokers_table.c.broker_id == reg.broker_id).values(**values))

    def heartbeat(self, broker_id: int, incarnation: str, now_ms: int) -> bool:
        with self._engine.begin() as conn:
            n = conn.execute(update(brokers_table)
                             .where(brokers_table.c.broker_id == broker_id,
                                    brokers_table.c.incarnation == incarnation)
                             .values(heartbeat_ms=now_ms)).rowcount
        return n == 1

    def deregister(self, broker_id: int, incarnation: str) -> None:
        with self._engine.begin() as conn:
            conn.execute(delete(brokers_table).where(brokers_table.c.broker_id == broker_id,
                                                     brokers_table.c.incarnation == incarnation))

    def brokers(self) -> list[BrokerRegistration]:
        with self._engine.connect() as conn:
            rows = conn.execute(select(brokers_table).order_by(brokers_table.c.broker_id)).all()
        return [_row(r) for r in rows]

    def topic_id(self, topic: str) -> uuid.UUID:
        with self._engine.connect() as conn:
            found = conn.execute(select(topic_ids_table.c.topic_id)
                                 .where(topic_ids_table.c.topic == topic)).scalar_one_or_none()
        if found is not None:
            return uuid.UUID(found)
        try:
            with self._engine.begin() as conn:
                conn.execute(insert(topic_ids_table).values(topic=topic, topic_id=str(uuid.uuid4())))
        except sa_exc.IntegrityError:
            pass  # another node named it first: theirs is the id
        with self._engine.connect() as conn:
            return uuid.UUID(conn.execute(select(topic_ids_table.c.topic_id)
                                          .where(topic_ids_table.c.topic == topic)).scalar_one())

    def topic_ids(self) -> dict[str, uuid.UUID]:
        with self._engine.connect() as conn:
            rows = conn.execute(select(topic_ids_table.c.topic, topic_ids_table.c.topic_id)).all()
        return {r.topic: uuid.UUID(r.topic_id) for r in rows}

    def forget_topic_id(self, topic: str) -> None:
        with self._engine.begin() as conn:
            conn.execute(delete(topic_ids_table).where(topic_ids_table.c.topic == topic))

    def close(self) -> None:
        self._engine.dispose()
