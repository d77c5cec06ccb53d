"""Partition leadership and the fenced compare-and-swap every partition write runs first.

Fencing is compare-and-swap inside the write's own transaction (pyiceberg's
``SqlCatalog.commit_table`` pattern): every write first runs

    UPDATE tc_leaders SET fence_token = :fresh WHERE topic = :t AND partition_id = :p
                                             AND leader_epoch = :epoch [RETURNING leader_epoch]

and proceeds only if that row changed. The check is ``=`` rather than ``<=``: epochs only
advance through ``become_leader`` (``WHERE leader_epoch < :new``), so a writer with a higher
epoch than the registered one has not become leader yet and is refused too. The UPDATE
also takes the partition's row lock (PostgreSQL) or the write lock (SQLite), so all
writes of a partition are serialised and every later read in the transaction is current.

How "the row changed" is observed depends on the dialect: ``RETURNING`` when supported
(SQLite >= 3.35, PostgreSQL), else ``rowcount`` when the driver reports it reliably, else a
re-read of the fresh token ``FOR UPDATE`` inside the transaction (``fence_strategy``
forces one, for tests).
"""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from typing import Any

from sqlalchemy import Connection, delete, insert, select, update

from log.errors import InvalidConfigError, InvalidRequestError
from log.types import TopicPartition
from metadata.errors import FencedLeaderEpochError
from metadata.sql.engine import SqlStore
from metadata.sql.schema import epochs, leaders
from metadata.sql.schema import tp_where as _tp_where
from metadata.types import LeaderState, PartitionVersion

_FENCE_STRATEGIES = ("returning", "rowcount", "reread")


class SqlLeadership(SqlStore):
    """The leader and epoch lineage of each partition, and the fence (``_cas``, ``_fence``) the
    stores whose writes belong to a partition run in their transactions."""

    def __init__(self, url: str, *, fence_strategy: str | None = None, **options: Any) -> None:
        super().__init__(url, **options)
        dialect = self._engine.dialect
        if fence_strategy is None:
            fence_strategy = ("returning" if dialect.update_returning
                              else "rowcount" if dialect.supports_sane_rowcount else "reread")
        if fence_strategy not in _FENCE_STRATEGIES:
            raise InvalidConfigError(f"fence_strategy {fence_strategy!r} must be one of {_FENCE_STRATEGIES}")
        self.fence_strategy = fence_strategy

    def _ensure_partition(self, conn: Connection, tp: TopicPartition) -> None:
        values = {"topic": tp.topic, "partition_id": tp.partition, "leader_epoch": -1, "broker_id": -1,
                      "fence_token": uuid.uuid4().hex, "updated_ms": self._clock.milliseconds()}
        self._insert_or_ignore(conn, leaders, values, ["topic", "partition_id"])

    def _cas(self, conn: Connection, tp: TopicPartition, condition: Any, values: dict[str, Any]) -> bool:
        """Conditionally update the partition's leader row; True if it changed."""
        token = uuid.uuid4().hex
        stmt = update(leaders).where(_tp_where(leaders, tp), condition).values(
            fence_token=token, updated_ms=self._clock.milliseconds(), **values)
        if self.fence_strategy == "returning":
            return conn.execute(stmt.returning(leaders.c.leader_epoch)).first() is not None
        if self.fence_strategy == "rowcount":
            return conn.execute(stmt).rowcount == 1
        conn.execute(stmt)
        row = conn.execute(select(leaders.c.fence_token).where(_tp_where(leaders, tp)).with_for_update()).first()
        return row is not None and row[0] == token

    def _fence(self, conn: Connection, tp: TopicPartition, leader_epoch: int, action: str) -> None:
        if not self._cas(conn, tp, leaders.c.leader_epoch == leader_epoch, {}):
            row = conn.execute(select(leaders.c.leader_epoch, leaders.c.broker_id)
                               .where(_tp_where(leaders, tp))).first()
            cur = None if row is None or row[0] < 0 else row
            raise FencedLeaderEpochError(tp, leader_epoch, cur[0] if cur else None,
                                         cur[1] if cur else None, action)

    @staticmethod
    def _lineage(conn: Connection, tp: TopicPartition) -> dict[int, int]:
        rows = conn.execute(select(epochs.c.epoch, epochs.c.start_offset).where(_tp_where(epochs, tp))
                            .order_by(epochs.c.epoch))
        return dict(rows.all())  # type: ignore[arg-type]

    def become_leader(
        self, tp: TopicPartition, leader_epoch: int, broker_id: int, start_offset: int = 0
    ) -> LeaderState:
        state = LeaderState(tp, leader_epoch, broker_id)
        if start_offset < 0:
            raise InvalidRequestError(f"start_offset {start_offset} must be >= 0")

        def fn(conn: Connection) -> LeaderState:
            self._ensure_partition(conn, tp)
            if not self._cas(conn, tp, leaders.c.leader_epoch < leader_epoch,
                             {"leader_epoch": leader_epoch, "broker_id": broker_id}):
                row = conn.execute(select(leaders.c.leader_epoch, leaders.c.broker_id)
                                   .where(_tp_where(leaders, tp))).one()
                raise FencedLeaderEpochError(
                    tp, leader_epoch, row[0], row[1], "become_leader",
                    detail=f"broker {broker_id} cannot become leader of {tp} at epoch {leader_epoch}: broker "
                           f"{row[1]} already holds epoch {row[0]}; leader epochs must strictly increase "
                           f"(use leader_epoch {row[0] + 1} or higher)")
            prev = conn.execute(select(epochs.c.epoch, epochs.c.start_offset).where(_tp_where(epochs, tp))
                                .order_by(epochs.c.epoch.desc()).limit(1)).first()
            if prev is not None and start_offset < prev[1]:
                raise InvalidRequestError(
                    f"leader epoch {leader_epoch} of {tp} cannot start at offset {start_offset}: the previous "
                    f"epoch {prev[0]} started at {prev[1]}")
            conn.execute(insert(epochs).values(topic=tp.topic, partition_id=tp.partition, epoch=leader_epoch,
                                               start_offset=start_offset))
            return state

        return self._write(tp, "become_leader", fn)

    def leader_state(self, tp: TopicPartition) -> LeaderState | None:
        row = self._read("leader_state", lambda c: c.execute(
            select(leaders.c.leader_epoch, leaders.c.broker_id).where(_tp_where(leaders, tp))).first())
        return None if row is None or row[0] < 0 else LeaderState(tp, row[0], row[1])

    def partition_versions(self, topics: Sequence[str] | None = None) -> dict[TopicPartition, PartitionVersion]:
        """Every partition's change token (the fence token ``_cas`` renews in the transaction of
        each publish, state change, erasure step and leadership change) with its leader, in one
        query: a node follows what others publish by comparing tokens."""
        stmt = select(leaders.c.topic, leaders.c.partition_id, leaders.c.fence_token, leaders.c.leader_epoch,
                      leaders.c.broker_id)
        if topics is not None:
            stmt = stmt.where(leaders.c.topic.in_(list(topics)))
        rows = self._read("partition_versions", lambda c: c.execute(stmt).all())
        return {TopicPartition(r[0], r[1]): PartitionVersion(r[2], r[3], r[4]) for r in rows}

    def leader_epochs(self, tp: TopicPartition) -> list[tuple[int, int]]:
        return list(self._read("leader_epochs", lambda c: self._lineage(c, tp)).items())

    def advance_log_start_offset(self, tp: TopicPartition, offset: int, *, leader_epoch: int) -> int:
        def fn(conn: Connection) -> int:
            self._fence(conn, tp, leader_epoch, "delete records")
            cur = conn.execute(select(leaders.c.log_start_offset).where(_tp_where(leaders, tp))).scalar()
            if cur is not None and cur >= offset:
                return int(cur)
            conn.execute(update(leaders).where(_tp_where(leaders, tp)).values(log_start_offset=offset))
            return offset

        if offset < 0:
            raise InvalidRequestError(f"log start offset {offset} must be >= 0")
        return self._write(tp, "advance_log_start_offset", fn)

    def log_start_offset(self, tp: TopicPartition) -> int:
        row = self._read("log_start_offset", lambda c: c.execute(
            select(leaders.c.log_start_offset).where(_tp_where(leaders, tp))).first())
        return 0 if row is None or row[0] is None else int(row[0])

    def _forget_partition(self, conn: Connection, tp: TopicPartition) -> None:
        super()._forget_partition(conn, tp)
        for table in (leaders, epochs):
            conn.execute(delete(table).where(_tp_where(table, tp)))
