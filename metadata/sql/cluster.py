"""The SQL :class:`~metadata.cluster.ClusterRegistry`: one row per registered broker (``kafka_brokers``), the
cluster id (``kafka_cluster``) and one row per topic id (``kafka_topic_ids``)."""

from __future__ import annotations

import uuid
from typing import Any

from sqlalchemy import Connection, delete, select, update

from metadata.cluster import BrokerRegistration, DuplicateBrokerError, new_cluster_id, same_directory
from metadata.sql.engine import SqlStore
from metadata.sql.schema import brokers, cluster, topic_ids


def _row(r: Any) -> BrokerRegistration:
    return BrokerRegistration(int(r.broker_id), r.host, int(r.port), r.incarnation, int(r.heartbeat_ms), r.rack)


class SqlClusterRegistry(SqlStore):
    """Brokers and topic ids shared by every node on the store (see :class:`~metadata.cluster.ClusterRegistry`)."""

    def register(self, reg: BrokerRegistration, *, session_timeout_ms: int) -> None:
        values = {"host": reg.host, "port": reg.port, "rack": reg.rack, "incarnation": reg.incarnation,
                  "heartbeat_ms": reg.heartbeat_ms}

        def fn(conn: Connection) -> None:
            old = conn.execute(select(brokers).where(brokers.c.broker_id == reg.broker_id).with_for_update()).first()
            if old is None:
                if not self._insert_or_ignore(conn, brokers, {"broker_id": reg.broker_id, **values}, ["broker_id"]):
                    raise DuplicateBrokerError(f"broker id {reg.broker_id} was registered by another node at the "
                                               f"same moment; give each node its own --broker-id")
                return
            prev = _row(old)
            if prev.incarnation != reg.incarnation and prev.alive(reg.heartbeat_ms, session_timeout_ms) and \
                    not same_directory(prev.incarnation, reg.incarnation):
                raise DuplicateBrokerError(
                    f"broker id {reg.broker_id} is registered by a live node at {prev.host}:{prev.port} (heartbeat "
                    f"{reg.heartbeat_ms - prev.heartbeat_ms} ms ago); give each node sharing the metadata store "
                    f"its own --broker-id, or wait {session_timeout_ms} ms after stopping the other one")
            conn.execute(update(brokers).where(brokers.c.broker_id == reg.broker_id).values(**values))

        self._write_global("register_broker", fn)

    def heartbeat(self, broker_id: int, incarnation: str, now_ms: int) -> bool:
        stmt = (update(brokers).where(brokers.c.broker_id == broker_id, brokers.c.incarnation == incarnation)
                .values(heartbeat_ms=now_ms))
        return bool(self._write_global("broker_heartbeat", lambda c: c.execute(stmt).rowcount) == 1)

    def deregister(self, broker_id: int, incarnation: str) -> None:
        stmt = delete(brokers).where(brokers.c.broker_id == broker_id, brokers.c.incarnation == incarnation)
        self._write_global("deregister_broker", lambda c: c.execute(stmt))

    def brokers(self) -> list[BrokerRegistration]:
        rows = self._read("brokers", lambda c: c.execute(select(brokers).order_by(brokers.c.broker_id)).all())
        return [_row(r) for r in rows]

    def cluster_id(self) -> str:
        return self._read_or_create("cluster_id", select(cluster.c.cluster_id).where(cluster.c.id == 1), cluster,
                                    {"id": 1, "cluster_id": new_cluster_id()}, ["id"])

    def topic_id(self, topic: str) -> uuid.UUID:
        return uuid.UUID(self._read_or_create("topic_id", select(topic_ids.c.topic_id).where(topic_ids.c.topic == topic),
                                              topic_ids, {"topic": topic, "topic_id": str(uuid.uuid4())}, ["topic"]))

    def _read_or_create(self, what: str, stmt: Any, table: Any, row: dict[str, Any], keys: list[str]) -> str:
        """The one value ``stmt`` selects; if there is none yet, ``row`` is inserted first. Another node may insert
        its own row at the same moment: then the value both return is the one stored first."""
        found = self._read(what, lambda c: c.execute(stmt).scalar_one_or_none())
        if found is not None:
            return str(found)

        def fn(conn: Connection) -> str:
            self._insert_or_ignore(conn, table, row, keys)
            return str(conn.execute(stmt).scalar_one())

        return str(self._write_global(f"create_{what}", fn))

    def topic_ids(self) -> dict[str, uuid.UUID]:
        rows = self._read("topic_ids", lambda c: c.execute(select(topic_ids.c.topic, topic_ids.c.topic_id)).all())
        return {r.topic: uuid.UUID(r.topic_id) for r in rows}

    def forget_topic_id(self, topic: str) -> None:
        self._write_global("forget_topic_id",
                           lambda c: c.execute(delete(topic_ids).where(topic_ids.c.topic == topic)))
