"""The SQL :class:`~metadata.erasures.ErasureReceiptStore`: one row per erasure and one per
partition of it; a partition's progress is fenced by its leader epoch like any write of it."""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from sqlalchemy import Connection, Row, and_, delete, insert, select, update

from log.errors import InvalidRequestError
from log.types import TopicPartition
from metadata.erasures import ErasureConfirmation, ErasurePartition, ErasureRecord
from metadata.sql.leadership import SqlLeadership
from metadata.sql.schema import erasure_confirmations, erasure_partitions, erasures


class SqlErasureReceiptStore(SqlLeadership):
    """Erasure receipts (see :class:`~metadata.erasures.ErasureReceiptStore`)."""

    def create_erasure(self, record: ErasureRecord) -> None:
        def fn(conn: Connection) -> None:
            conn.execute(insert(erasures).values(
                erasure_id=record.erasure_id, topic=record.topic, created_ms=record.created_ms,
                deadline_ms=record.deadline_ms, keys=json.dumps(list(record.keys)), encoding=record.encoding))
            if record.partitions:
                conn.execute(insert(erasure_partitions), [
                    {"erasure_id": record.erasure_id, "partition_id": p.partition, "state": p.state,
                     "updated_ms": p.updated_ms, "detail": json.dumps(p.detail), "error": p.error}
                    for p in record.partitions])

        self._write_global("create_erasure", fn)

    def _erasure_records(self, conn: Connection, rows: Sequence[Row[Any]]) -> list[ErasureRecord]:
        if not rows:
            return []
        parts: dict[str, list[ErasurePartition]] = {r.erasure_id: [] for r in rows}
        for p in conn.execute(select(erasure_partitions).where(erasure_partitions.c.erasure_id.in_(list(parts)))
                              .order_by(erasure_partitions.c.erasure_id, erasure_partitions.c.partition_id)):
            parts[p.erasure_id].append(ErasurePartition(p.partition_id, p.state, p.updated_ms, json.loads(p.detail),
                                                        p.error))
        return [ErasureRecord(r.erasure_id, r.topic, r.created_ms, r.deadline_ms, tuple(json.loads(r.keys)),
                              r.encoding, tuple(parts[r.erasure_id])) for r in rows]

    def get_erasure(self, erasure_id: str) -> ErasureRecord | None:
        def fn(conn: Connection) -> ErasureRecord | None:
            rows = conn.execute(select(erasures).where(erasures.c.erasure_id == erasure_id)).all()
            found = self._erasure_records(conn, rows)
            return found[0] if found else None

        return self._read("get_erasure", fn)

    def list_erasures(self, *, topic: str | None = None, states: Sequence[str] | None = None,
                      limit: int = 1000) -> list[ErasureRecord]:
        if limit < 1:
            raise InvalidRequestError(f"limit={limit} must be >= 1")

        def fn(conn: Connection) -> list[ErasureRecord]:
            stmt = select(erasures)
            if topic is not None:
                stmt = stmt.where(erasures.c.topic == topic)
            if states is not None:
                stmt = stmt.where(erasures.c.erasure_id.in_(
                    select(erasure_partitions.c.erasure_id).where(erasure_partitions.c.state.in_(list(states)))))
            rows = conn.execute(stmt.order_by(erasures.c.created_ms.desc(), erasures.c.erasure_id)
                                .limit(limit)).all()
            return self._erasure_records(conn, rows)

        return self._read("list_erasures", fn)

    def update_erasure_partition(self, erasure_id: str, topic: str, part: ErasurePartition, *,
                                 leader_epoch: int | None = None) -> None:
        tp = TopicPartition(topic, part.partition)

        def fn(conn: Connection) -> None:
            if leader_epoch is not None:
                self._fence(conn, tp, leader_epoch, "erasure progress")
            where = and_(erasure_partitions.c.erasure_id == erasure_id,
                         erasure_partitions.c.partition_id == part.partition)
            conn.execute(update(erasure_partitions).where(where).values(
                state=part.state, updated_ms=part.updated_ms, detail=json.dumps(part.detail), error=part.error))

        self._write(tp, "update_erasure_partition", fn)

    def confirm_erasure(self, erasure_id: str, confirmation: ErasureConfirmation) -> None:
        c = erasure_confirmations.c

        def fn(conn: Connection) -> None:
            conn.execute(delete(erasure_confirmations).where(
                c.erasure_id == erasure_id, c.partition_id == confirmation.partition,
                c.broker_id == confirmation.broker_id))
            conn.execute(insert(erasure_confirmations).values(
                erasure_id=erasure_id, partition_id=confirmation.partition, broker_id=confirmation.broker_id,
                confirmed_ms=confirmation.confirmed_ms, detail=json.dumps(confirmation.detail)))

        self._write_global("confirm_erasure", fn)

    def erasure_confirmations(self, erasure_id: str) -> list[ErasureConfirmation]:
        c = erasure_confirmations.c
        rows = self._read("erasure_confirmations", lambda conn: conn.execute(
            select(erasure_confirmations).where(c.erasure_id == erasure_id)
            .order_by(c.partition_id, c.broker_id)).all())
        return [ErasureConfirmation(r.partition_id, r.broker_id, r.confirmed_ms, json.loads(r.detail)) for r in rows]
