"""Group offsets and metadata in SQL (SQLite or PostgreSQL): own tables, every write fenced on the coordinator's epoch."""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from contextlib import AbstractContextManager
from typing import Any

from sqlalchemy import (
    BigInteger,
    Column,
    Integer,
    MetaData,
    String,
    Table,
    Text,
    and_,
    delete,
    insert,
    inspect,
    or_,
    select,
)
from sqlalchemy.engine import Connection

from log.types import TopicPartition
from metadata.coordinators import GROUP
from metadata.group_offsets import CommittedOffset, CoordinatorFence, GroupRecord, GroupStore
from metadata.sql_coordinators import FencedSqlStore

_meta = MetaData()


def _offset_columns() -> list[Column[Any]]:
    return [Column("committed_offset", BigInteger, nullable=False),
            Column("leader_epoch", Integer, nullable=False),
            Column("metadata", Text, nullable=True),
            Column("commit_ms", BigInteger, nullable=False),
            Column("slot", Integer, nullable=False)]


offsets_table = Table(
    "kafka_group_offsets", _meta,
    Column("group_id", String(255), primary_key=True),
    Column("topic", String(249), primary_key=True),
    Column("partition", Integer, primary_key=True, autoincrement=False),
    *_offset_columns(),
)

txn_offsets_table = Table(
    "kafka_group_txn_offsets", _meta,
    Column("producer_id", BigInteger, primary_key=True, autoincrement=False),
    Column("group_id", String(255), primary_key=True),
    Column("topic", String(249), primary_key=True),
    Column("partition", Integer, primary_key=True, autoincrement=False),
    Column("producer_epoch", Integer, nullable=False),
    *_offset_columns(),
)

groups_table = Table(
    "kafka_groups", _meta,
    Column("group_id", String(255), primary_key=True),
    Column("slot", Integer, nullable=False),
    Column("state", String(32), nullable=False),
    Column("protocol_type", String(255), nullable=True),
    Column("protocol", String(255), nullable=True),
    Column("generation", Integer, nullable=False),
    Column("leader", String(512), nullable=True),
    Column("members", Text, nullable=False),
    Column("updated_ms", BigInteger, nullable=False),
)


def _committed(r: Any) -> CommittedOffset:
    return CommittedOffset(int(r.committed_offset), int(r.leader_epoch), r.metadata, int(r.commit_ms))


def _tp_filter(table: Table, tps: Iterable[TopicPartition]) -> Any:
    return or_(*(and_(table.c.topic == tp.topic, table.c.partition == tp.partition) for tp in tps))


def _upsert(conn: Connection, table: Table, keys: tuple[str, ...]) -> Any:
    """INSERT ... ON CONFLICT (keys) DO UPDATE every other column (SQLite and PostgreSQL both have it)."""
    if conn.dialect.name == "postgresql":
        from sqlalchemy.dialects.postgresql import insert as pg_insert

        pg = pg_insert(table)
        return pg.on_conflict_do_update(index_elements=list(keys),
                                        set_={c.name: pg.excluded[c.name] for c in table.c if c.name not in keys})
    from sqlalchemy.dialects.sqlite import insert as sqlite_insert

    lite = sqlite_insert(table)
    return lite.on_conflict_do_update(index_elements=list(keys),
                                      set_={c.name: lite.excluded[c.name] for c in table.c if c.name not in keys})


def _record(r: Any) -> GroupRecord:
    return GroupRecord(r.group_id, int(r.slot), r.state, r.protocol_type, r.protocol, int(r.generation), r.leader,
                       json.loads(r.members), int(r.updated_ms))


def delete_topic_offsets(conn: Connection, topic: str) -> int:
    """In a topic deletion's transaction: every group's committed and pending transactional offsets of
    ``topic`` (Kafka's GroupMetadataManager.cleanupGroupMetadata on onPartitionsDeleted); not fenced, as the
    topic is gone for every coordinator. Nothing when no node made the group tables. How many rows went."""
    gone = 0
    for t in (offsets_table, txn_offsets_table):
        if inspect(conn).has_table(t.name):
            gone += conn.execute(delete(t).where(t.c.topic == topic)).rowcount
    return gone


class SqlGroupStore(FencedSqlStore, GroupStore):
    """:class:`GroupStore` on the metadata store (tables ``kafka_group_offsets``, ``kafka_group_txn_offsets``,
    ``kafka_groups``), fenced through ``kafka_coordinators``."""

    _metadata = (*FencedSqlStore._metadata, _meta)

    def _fenced_by(self, fence: CoordinatorFence) -> AbstractContextManager[Connection]:
        return self._fenced(GROUP, fence.slot, fence.broker_id, fence.epoch)

    def commit(self, group_id: str, offsets: Mapping[TopicPartition, CommittedOffset],
               fence: CoordinatorFence) -> None:
        with self._fenced_by(fence) as conn:
            self._upsert(conn, group_id, offsets, fence.slot)

    def _upsert(self, conn: Connection, group_id: str, offsets: Mapping[TopicPartition, CommittedOffset],
                slot: int) -> None:
        if not offsets:
            return
        conn.execute(_upsert(conn, offsets_table, ("group_id", "topic", "partition")),
                     [{"group_id": group_id, "topic": tp.topic, "partition": tp.partition,
                       "committed_offset": o.offset, "leader_epoch": o.leader_epoch,
                       "metadata": o.metadata, "commit_ms": o.commit_ms, "slot": slot}
                      for tp, o in offsets.items()])

    def offsets(self, group_id: str, tps: Iterable[TopicPartition] | None = None) -> dict[TopicPartition,
                                                                                          CommittedOffset]:
        t = offsets_table
        wanted = None if tps is None else {(tp.topic, tp.partition) for tp in tps}
        if wanted is not None and not wanted:
            return {}
        with self.engine.connect() as conn:  # one cached statement; a group has few partitions
            rows = conn.execute(select(t).where(t.c.group_id == group_id)).all()
        return {TopicPartition(r.topic, int(r.partition)): _committed(r) for r in rows
                if wanted is None or (r.topic, int(r.partition)) in wanted}

    def delete_offsets(self, group_id: str, tps: Iterable[TopicPartition], fence: CoordinatorFence) -> None:
        t = offsets_table
        tps = list(tps)
        if not tps:
            return
        with self._fenced_by(fence) as conn:
            conn.execute(delete(t).where(t.c.group_id == group_id, _tp_filter(t, tps)))

    def save_group(self, record: GroupRecord, fence: CoordinatorFence) -> None:
        g = groups_table
        with self._fenced_by(fence) as conn:
            conn.execute(delete(g).where(g.c.group_id == record.group_id))
            conn.execute(insert(g).values(group_id=record.group_id, slot=record.slot, state=record.state,
                                          protocol_type=record.protocol_type, protocol=record.protocol,
                                          generation=record.generation, leader=record.leader,
                                          members=json.dumps(record.members), updated_ms=record.updated_ms))

    def delete_group(self, group_id: str, fence: CoordinatorFence) -> None:
        with self._fenced_by(fence) as conn:
            for t in (groups_table, offsets_table, txn_offsets_table):
                conn.execute(delete(t).where(t.c.group_id == group_id))

    def groups(self, slots: Iterable[int] | None = None) -> dict[str, GroupRecord | None]:
        g, o = groups_table, offsets_table
        qg, qo = select(g), select(o.c.group_id).distinct()
        if slots is not None:
            slots = list(slots)
            qg, qo = qg.where(g.c.slot.in_(slots)), qo.where(o.c.slot.in_(slots))
        with self.engine.connect() as conn:
            out: dict[str, GroupRecord | None] = {r.group_id: None for r in conn.execute(qo).all()}
            out.update({r.group_id: _record(r) for r in conn.execute(qg).all()})
        return out

    def group(self, group_id: str) -> GroupRecord | None:
        g = groups_table
        with self.engine.connect() as conn:
            r = conn.execute(select(g).where(g.c.group_id == group_id)).first()
        return None if r is None else _record(r)

    def add_txn_offsets(self, group_id: str, producer_id: int, producer_epoch: int,
                        offsets: Mapping[TopicPartition, CommittedOffset], fence: CoordinatorFence) -> None:
        t = txn_offsets_table
        if not offsets:
            return
        with self._fenced_by(fence) as conn:
            conn.execute(delete(t).where(t.c.producer_id == producer_id, t.c.group_id == group_id,
                                         _tp_filter(t, offsets)))
            conn.execute(insert(t), [{"producer_id": producer_id, "group_id": group_id, "topic": tp.topic,
                                      "partition": tp.partition, "producer_epoch": producer_epoch,
                                      "committed_offset": o.offset, "leader_epoch": o.leader_epoch,
                                      "metadata": o.metadata, "commit_ms": o.commit_ms, "slot": fence.slot}
                                     for tp, o in offsets.items()])

    def complete_txn(self, producer_id: int, commit: bool, group_ids: Iterable[str] | None = None) -> int:
        t = txn_offsets_table
        where = [t.c.producer_id == producer_id]
        if group_ids is not None:
            where.append(t.c.group_id.in_(list(group_ids)))
        with self.engine.begin() as conn:
            rows = conn.execute(select(t).where(*where)).all()
            if commit:
                by_group: dict[tuple[str, int], dict[TopicPartition, CommittedOffset]] = {}
                for r in rows:
                    by_group.setdefault((r.group_id, int(r.slot)), {})[TopicPartition(r.topic, int(r.partition))] = \
                        _committed(r)
                for (group_id, slot), offsets in by_group.items():
                    self._upsert(conn, group_id, offsets, slot)
            conn.execute(delete(t).where(*where))
        return len(rows)

    def pending_txn_partitions(self, group_id: str) -> set[TopicPartition]:
        t = txn_offsets_table
        with self.engine.connect() as conn:
            rows = conn.execute(select(t.c.topic, t.c.partition).where(t.c.group_id == group_id)).all()
        return {TopicPartition(r.topic, int(r.partition)) for r in rows}
