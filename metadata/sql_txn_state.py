"""Transaction state in SQL (SQLite or PostgreSQL): table ``kafka_txn_state``, every write fenced on the txn coordinator's epoch."""

from __future__ import annotations

import json
from typing import Any

from sqlalchemy import (
    BigInteger,
    Column,
    Integer,
    MetaData,
    String,
    Table,
    Text,
    delete,
    insert,
    select,
    update,
)
from sqlalchemy.engine import Connection

from log.types import TopicPartition
from metadata.coordinators import TRANSACTION
from metadata.sql_coordinators import FencedSqlStore
from metadata.txn_state import TxnRecord, TxnStateStore

_meta = MetaData()

txn_state_table = Table(
    "kafka_txn_state", _meta,
    Column("transactional_id", String(255), primary_key=True),
    Column("slot", Integer, nullable=False, index=True),
    Column("producer_id", BigInteger, nullable=False),
    Column("producer_epoch", Integer, nullable=False),
    Column("last_producer_id", BigInteger, nullable=False),
    Column("last_producer_epoch", Integer, nullable=False),
    Column("timeout_ms", Integer, nullable=False),
    Column("state", String(32), nullable=False),
    Column("partitions", Text, nullable=False),
    Column("groups", Text, nullable=False),
    Column("txn_start_ms", BigInteger, nullable=False),
    Column("update_ms", BigInteger, nullable=False),
    Column("coordinator_epoch", BigInteger, nullable=False),
)


def _record(r: Any) -> TxnRecord:
    return TxnRecord(r.transactional_id, int(r.producer_id), int(r.producer_epoch), int(r.timeout_ms), r.state,
                     int(r.last_producer_id), int(r.last_producer_epoch),
                     {TopicPartition(t, int(p)) for t, p in json.loads(r.partitions)}, set(json.loads(r.groups)),
                     int(r.txn_start_ms), int(r.update_ms))


def _values(rec: TxnRecord, slot: int, coordinator_epoch: int) -> dict[str, Any]:
    parts = sorted([tp.topic, tp.partition] for tp in rec.partitions)
    return {"slot": slot, "producer_id": rec.producer_id, "producer_epoch": rec.producer_epoch,
            "last_producer_id": rec.last_producer_id, "last_producer_epoch": rec.last_producer_epoch,
            "timeout_ms": rec.timeout_ms, "state": rec.state, "partitions": json.dumps(parts),
            "groups": json.dumps(sorted(rec.groups)), "txn_start_ms": rec.txn_start_ms, "update_ms": rec.update_ms,
            "coordinator_epoch": coordinator_epoch}


class SqlTxnStateStore(FencedSqlStore, TxnStateStore):
    """:class:`TxnStateStore` on the metadata store's database (shares the coordinator claims' engine when given)."""

    _metadata = (*FencedSqlStore._metadata, _meta)

    def load_slot(self, slot: int) -> list[TxnRecord]:
        t = txn_state_table
        with self.engine.connect() as conn:
            return [_record(r) for r in conn.execute(select(t).where(t.c.slot == slot)).all()]

    def all(self) -> list[TxnRecord]:
        t = txn_state_table
        with self.engine.connect() as conn:
            return [_record(r) for r in conn.execute(select(t).order_by(t.c.transactional_id)).all()]

    def get(self, transactional_id: str) -> TxnRecord | None:
        t = txn_state_table
        with self.engine.connect() as conn:
            r = conn.execute(select(t).where(t.c.transactional_id == transactional_id)).first()
        return None if r is None else _record(r)

    def put(self, record: TxnRecord, *, slot: int, broker_id: int, coordinator_epoch: int) -> None:
        values = _values(record, slot, coordinator_epoch)
        with self._fenced(TRANSACTION, slot, broker_id, coordinator_epoch) as conn:
            self._upsert(conn, record.transactional_id, values)

    @staticmethod
    def _upsert(conn: Connection, tid: str, values: dict[str, Any]) -> None:
        t = txn_state_table
        n = conn.execute(update(t).where(t.c.transactional_id == tid).values(**values)).rowcount
        if n == 0:
            conn.execute(insert(t).values(transactional_id=tid, **values))

    def delete(self, transactional_id: str, *, slot: int, broker_id: int, coordinator_epoch: int) -> None:
        t = txn_state_table
        with self._fenced(TRANSACTION, slot, broker_id, coordinator_epoch) as conn:
            conn.execute(delete(t).where(t.c.transactional_id == transactional_id))
