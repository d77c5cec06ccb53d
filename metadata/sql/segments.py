"""The SQL :class:`~metadata.manager.RemoteLogMetadataManager`: remote segments, their states
and the fenced publish of compacted ones with the cleaner-offset vector, over the partition's
leadership (:mod:`metadata.sql.leadership`).

Every write runs the partition's fence first, in its own transaction, and returns the change it
made to the partition's referenced size, which :meth:`remote_log_size` keeps cached.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any, TypeVar

from sqlalchemy import Connection, Row, and_, bindparam, delete, func, insert, or_, select, update

from log.errors import InvalidRequestError
from log.types import TopicPartition
from metadata.errors import FencedLeaderEpochError, InvalidStateTransitionError, RemoteSegmentNotFoundError
from metadata.lineage import is_segment_within_leader_epochs, resolve_checkpoint, validate_cleaner_offsets
from metadata.manager import DEFAULT_ORPHAN_GRACE_MS
from metadata.sql.leadership import SqlLeadership
from metadata.sql.rows import (
    chunked,
    dump_map,
    load_map,
    referenced,
    rows_by_id,
    segment_row,
    segment_rows,
    to_md,
)
from metadata.sql.schema import cleaner, leaders, segments
from metadata.sql.schema import tp_where as _tp_where
from metadata.sql.segment_indexes import drop_bloom, store_blooms
from metadata.types import RemoteLogSegmentId, RemoteLogSegmentMetadata, RemoteLogSegmentState

T = TypeVar("T")
S = RemoteLogSegmentState

#: remote_log_segment_metadata's query, built once: every read below the local log runs it (and
#: the read path asks it for the log start offset on every fetch), and building the expression
#: cost ten times what SQLite takes to answer it
_SEGMENT_AT_OFFSET = (select(segments).where(
    segments.c.topic == bindparam("topic"), segments.c.partition_id == bindparam("partition_id"),
    segments.c.state == S.COPY_SEGMENT_FINISHED.value, segments.c.superseded_by.is_(None),
    segments.c.end_offset >= bindparam("offset")).order_by(segments.c.start_offset).limit(1))


class SqlSegmentStore(SqlLeadership):
    """Remote segment metadata of every partition (see :class:`RemoteLogMetadataManager`)."""

    def __init__(self, url: str, *, orphan_grace_ms: int = DEFAULT_ORPHAN_GRACE_MS, **options: Any) -> None:
        super().__init__(url, **options)
        self._orphan_grace_ms = orphan_grace_ms
        self._sizes: dict[TopicPartition, int] = {}

    def _write_sized(self, tp: TopicPartition, what: str, fn: Callable[[Connection], tuple[T, int]]) -> T:
        """Run ``fn`` in one write transaction of ``tp``; apply its remote-size delta after commit."""
        with self._tp_lock(tp):
            result, delta = self._write(tp, what, fn)
            if delta and tp in self._sizes:
                self._sizes[tp] += delta
            return result

    @staticmethod
    def _vector(conn: Connection, tp: TopicPartition) -> dict[int, int]:
        rows = conn.execute(select(cleaner.c.epoch, cleaner.c.cleaner_offset).where(_tp_where(cleaner, tp)))
        return dict(rows.all())  # type: ignore[arg-type]

    # ------------------------------------------------------------------ segment writes

    def add_remote_log_segment_metadata(self, md: RemoteLogSegmentMetadata, *, leader_epoch: int) -> None:
        self.add_remote_log_segments([(md, None)], leader_epoch=leader_epoch)

    def add_remote_log_segments(self, new: Sequence[tuple[RemoteLogSegmentMetadata, bytes | None]], *,
                                leader_epoch: int) -> None:
        if not new:
            return
        tp = new[0][0].topic_partition
        for md, _bloom in new:
            sid = md.remote_log_segment_id
            if md.topic_partition != tp:
                raise InvalidRequestError(f"segments of one partition only: {sid} is not of {tp}")
            if md.state is not S.COPY_SEGMENT_STARTED or md.superseded_by is not None:
                raise InvalidStateTransitionError(sid, None, md.state, "a new segment must be COPY_SEGMENT_STARTED "
                                                  "and not superseded")
        what = (f"upload of remote segment {new[0][0].remote_log_segment_id}" if len(new) == 1
                else f"upload of {len(new)} remote segments of {tp}")

        def fn(conn: Connection) -> tuple[None, int]:
            self._fence(conn, tp, leader_epoch, what)  # a write first: SQLite holds its write lock from here
            existing = rows_by_id(conn, [md.id for md, _bloom in new])
            rows = [self._segment_values(md, leader_epoch) for md, _bloom in new
                    if not self._is_retried_add(md, existing.get(md.id))]
            if rows:
                conn.execute(insert(segments), rows)
            store_blooms(conn, tp, [(md.id, bloom) for md, bloom in new if bloom is not None])
            return None, 0

        self._write_sized(tp, "add_remote_log_segment_metadata", fn)

    @staticmethod
    def _is_retried_add(md: RemoteLogSegmentMetadata, row: Row[Any] | None) -> bool:
        """True when ``row`` is this very segment added before (a retry: nothing to insert);
        raises when the id is taken by anything else."""
        if row is None:
            return False
        old = to_md(row)
        if (old.state is S.COPY_SEGMENT_STARTED and old.topic_partition == md.topic_partition
                and (old.start_offset, old.end_offset, old.segment_size_in_bytes)
                == (md.start_offset, md.end_offset, md.segment_size_in_bytes)):
            return True
        raise InvalidStateTransitionError(md.remote_log_segment_id, old.state, md.state,
                                          "segment id already exists; generate a fresh id for every upload attempt")

    def _segment_values(self, md: RemoteLogSegmentMetadata, leader_epoch: int) -> dict[str, Any]:
        """The row of a new segment."""
        tp = md.topic_partition
        return {"segment_id": md.id, "topic": tp.topic, "partition_id": tp.partition,
                "start_offset": md.start_offset, "end_offset": md.end_offset, "max_timestamp_ms": md.max_timestamp_ms,
                "broker_id": md.broker_id, "event_timestamp_ms": md.event_timestamp_ms,
                "size_bytes": md.segment_size_in_bytes, "state": md.state.value,
                "leader_epochs": dump_map(md.segment_leader_epochs), "cleaner_offsets": dump_map(md.cleaner_offsets),
                "superseded_by": None, "writer_epoch": leader_epoch, "created_ms": self._clock.milliseconds(),
                "key_index_bytes": md.key_index_bytes}

    def update_remote_log_segment_state(
        self,
        segment_id: RemoteLogSegmentId,
        state: RemoteLogSegmentState,
        *,
        leader_epoch: int,
        event_timestamp_ms: int,
        broker_id: int,
    ) -> RemoteLogSegmentMetadata:
        tp = segment_id.topic_partition

        def fn(conn: Connection) -> tuple[RemoteLogSegmentMetadata, int]:
            self._fence(conn, tp, leader_epoch, f"{state.name} of remote segment {segment_id}")
            row = segment_row(conn, segment_id)
            old = to_md(row)
            if not S.is_valid_transition(old.state, state):
                raise InvalidStateTransitionError(segment_id, old.state, state)
            if old.state is state:
                return old, 0
            if state is S.COPY_SEGMENT_FINISHED and row.writer_epoch != leader_epoch:
                raise FencedLeaderEpochError(
                    tp, row.writer_epoch, leader_epoch, broker_id, "finish copy",
                    detail=f"remote segment {segment_id} was added under leader epoch {row.writer_epoch}; "
                           f"the leader at epoch {leader_epoch} cannot finish it (it is an orphan to delete)")
            conn.execute(update(segments).where(segments.c.segment_id == segment_id.id).values(
                state=state.value, event_timestamp_ms=event_timestamp_ms, broker_id=broker_id))
            if state is S.DELETE_SEGMENT_FINISHED:
                drop_bloom(conn, segment_id)
            delta = old.segment_size_in_bytes * (int(referenced(state.value, old.superseded_by))
                                                 - int(referenced(old.state.value, old.superseded_by)))
            new = old.with_state(state, event_timestamp_ms=event_timestamp_ms, broker_id=broker_id)
            return new, delta

        return self._write_sized(tp, "update_remote_log_segment_state", fn)

    def publish_compaction(
        self,
        tp: TopicPartition,
        *,
        leader_epoch: int,
        new_segment_ids: Sequence[RemoteLogSegmentId],
        replaced_segment_ids: Sequence[RemoteLogSegmentId],
        cleaner_offsets: Mapping[int, int],
    ) -> None:
        vector = dict(sorted(cleaner_offsets.items()))
        new_ids = {s.id for s in new_segment_ids}
        if len(new_ids) != len(new_segment_ids) or new_ids & {s.id for s in replaced_segment_ids}:
            raise InvalidRequestError("publish_compaction: segment ids must be distinct and a segment cannot "
                                      "replace itself")
        for s in [*new_segment_ids, *replaced_segment_ids]:
            if s.topic_partition != tp:
                raise RemoteSegmentNotFoundError(f"remote segment {s} does not belong to {tp}")

        def fn(conn: Connection) -> tuple[None, int]:
            self._fence(conn, tp, leader_epoch, "publish of compacted segments")
            validate_cleaner_offsets(tp, leader_epoch, vector, self._vector(conn, tp), self._lineage(conn, tp))
            delta = 0
            rows = segment_rows(conn, tp, [*new_segment_ids, *replaced_segment_ids])
            new_rows = [rows[s.id] for s in new_segment_ids]
            finish: list[str] = []
            for s, row in zip(new_segment_ids, new_rows, strict=True):
                if row.state == S.COPY_SEGMENT_STARTED.value:
                    if row.writer_epoch != leader_epoch:
                        raise FencedLeaderEpochError(
                            tp, row.writer_epoch, leader_epoch, None, "publish",
                            detail=f"remote segment {s} was uploaded under leader epoch {row.writer_epoch} and "
                                   f"cannot be published at epoch {leader_epoch}")
                    finish.append(s.id)
                    delta += row.size_bytes
                elif not (referenced(row.state, row.superseded_by) and load_map(row.cleaner_offsets) == vector):
                    raise InvalidStateTransitionError(
                        s, S(row.state), S.COPY_SEGMENT_FINISHED,
                        "a compacted segment must be COPY_SEGMENT_STARTED when published")
            supersede: dict[str, list[str]] = {}  # replacement -> the segments it replaces
            for s in replaced_segment_ids:
                row = rows[s.id]
                if row.state != S.COPY_SEGMENT_FINISHED.value:
                    raise InvalidStateTransitionError(s, S(row.state), S.COPY_SEGMENT_FINISHED,
                                                      "only finished segments can be replaced")
                if row.superseded_by is None:
                    supersede.setdefault(_replacement(row, new_rows), []).append(s.id)
                    delta -= row.size_bytes
                elif row.superseded_by not in new_ids:
                    raise InvalidStateTransitionError(
                        s, S(row.state), S.COPY_SEGMENT_FINISHED,
                        f"already superseded by {row.superseded_by or '(nothing)'}")
            now = self._clock.milliseconds()
            if finish:
                conn.execute(update(segments).where(segments.c.segment_id.in_(finish)).values(
                    state=S.COPY_SEGMENT_FINISHED.value, cleaner_offsets=dump_map(vector), event_timestamp_ms=now))
            for by, old_ids in supersede.items():
                for chunk in chunked(old_ids):
                    conn.execute(update(segments).where(segments.c.segment_id.in_(chunk)).values(superseded_by=by))
            self._store_vector(conn, tp, vector)
            return None, delta

        self._write_sized(tp, "publish_compaction", fn)

    def publish_cleaner_offsets(
        self, tp: TopicPartition, *, leader_epoch: int, cleaner_offsets: Mapping[int, int]
    ) -> None:
        vector = dict(sorted(cleaner_offsets.items()))

        def fn(conn: Connection) -> tuple[None, int]:
            self._fence(conn, tp, leader_epoch, "publish of cleaner offsets")
            validate_cleaner_offsets(tp, leader_epoch, vector, self._vector(conn, tp), self._lineage(conn, tp))
            self._store_vector(conn, tp, vector)
            return None, 0

        self._write_sized(tp, "publish_cleaner_offsets", fn)

    @staticmethod
    def _store_vector(conn: Connection, tp: TopicPartition, vector: Mapping[int, int]) -> None:
        # lower epochs were validated equal, so replacing the whole vector only moves the newest entry
        conn.execute(delete(cleaner).where(_tp_where(cleaner, tp)))
        if vector:
            conn.execute(insert(cleaner), [{"topic": tp.topic, "partition_id": tp.partition, "epoch": e,
                                                "cleaner_offset": o} for e, o in vector.items()])

    # ------------------------------------------------------------------ reads

    def list_remote_log_segments(
        self,
        tp: TopicPartition,
        *,
        include_superseded: bool = False,
        states: Sequence[RemoteLogSegmentState] | None = None,
    ) -> list[RemoteLogSegmentMetadata]:
        wanted = [s.value for s in (states if states is not None else [S.COPY_SEGMENT_FINISHED])]
        stmt = select(segments).where(_tp_where(segments, tp), segments.c.state.in_(wanted))
        if not include_superseded:
            stmt = stmt.where(segments.c.superseded_by.is_(None))
        stmt = stmt.order_by(segments.c.start_offset, segments.c.segment_id)
        return self._read("list_remote_log_segments", lambda c: [to_md(r) for r in c.execute(stmt)])

    def remote_log_segment_metadata(self, tp: TopicPartition, offset: int) -> RemoteLogSegmentMetadata | None:
        params = {"topic": tp.topic, "partition_id": tp.partition, "offset": offset}
        row = self._read("remote_log_segment_metadata", lambda c: c.execute(_SEGMENT_AT_OFFSET, params).first())
        return None if row is None else to_md(row)

    def remote_log_size(self, tp: TopicPartition) -> int:
        with self._tp_lock(tp):  # a write of tp cannot commit between the SUM and caching it
            cached = self._sizes.get(tp)
            if cached is None:
                stmt = select(func.coalesce(func.sum(segments.c.size_bytes), 0)).where(
                    _tp_where(segments, tp), segments.c.state == S.COPY_SEGMENT_FINISHED.value,
                    segments.c.superseded_by.is_(None))
                cached = self._sizes[tp] = int(self._read("remote_log_size", lambda c: c.execute(stmt).scalar_one()))
            return cached

    def invalidate_caches(self, tp: TopicPartition | None = None) -> None:
        if tp is None:
            for t in list(self._sizes):
                self.invalidate_caches(t)
            return
        with self._tp_lock(tp):
            self._sizes.pop(tp, None)

    def cleaner_offsets(self, tp: TopicPartition) -> dict[int, int]:
        return dict(sorted(self._read("cleaner_offsets", lambda c: self._vector(c, tp)).items()))

    def resolve_cleaner_checkpoint(self, tp: TopicPartition) -> int | None:
        return resolve_checkpoint(self.cleaner_offsets(tp))

    def unreferenced_segments(
        self, tp: TopicPartition, *, orphan_grace_ms: int | None = None
    ) -> list[RemoteLogSegmentMetadata]:
        grace = self._orphan_grace_ms if orphan_grace_ms is None else orphan_grace_ms
        cutoff = self._clock.milliseconds() - grace
        leader = self.leader_state(tp)
        cur_epoch = leader.leader_epoch if leader is not None else -1
        stmt = select(segments).where(_tp_where(segments, tp), or_(
            and_(segments.c.state == S.COPY_SEGMENT_FINISHED.value, segments.c.superseded_by.is_not(None)),
            segments.c.state == S.DELETE_SEGMENT_STARTED.value,
            and_(segments.c.state == S.COPY_SEGMENT_STARTED.value,
                 or_(segments.c.writer_epoch < cur_epoch, segments.c.created_ms < cutoff)),
        )).order_by(segments.c.start_offset, segments.c.segment_id)
        return self._read("unreferenced_segments", lambda c: [to_md(r) for r in c.execute(stmt)])

    def is_segment_within_leader_epochs(
        self, md: RemoteLogSegmentMetadata, tp: TopicPartition, log_end_offset: int | None = None
    ) -> bool:
        if md.topic_partition != tp:
            return False
        return is_segment_within_leader_epochs(md.segment_leader_epochs, md.end_offset,
                                               dict(self.leader_epochs(tp)), log_end_offset)

    # ------------------------------------------------------------------ admin

    def partitions(self) -> list[TopicPartition]:
        def fn(conn: Connection) -> list[TopicPartition]:
            a = conn.execute(select(leaders.c.topic, leaders.c.partition_id)).all()
            b = conn.execute(select(segments.c.topic, segments.c.partition_id).distinct()).all()
            return sorted({TopicPartition(t, p) for t, p in [*a, *b]})

        return self._read("partitions", fn)

    def begin_partition_deletion(
        self, tp: TopicPartition, *, leader_epoch: int, broker_id: int, event_timestamp_ms: int
    ) -> list[RemoteLogSegmentMetadata]:
        live = [S.COPY_SEGMENT_STARTED.value, S.COPY_SEGMENT_FINISHED.value]

        def fn(conn: Connection) -> tuple[list[RemoteLogSegmentMetadata], int]:
            self._fence(conn, tp, leader_epoch, "deletion of the partition's remote data")
            rows = conn.execute(select(segments).where(_tp_where(segments, tp))
                                .order_by(segments.c.start_offset, segments.c.segment_id)).all()
            delta = -sum(r.size_bytes for r in rows if referenced(r.state, r.superseded_by))
            conn.execute(update(segments).where(_tp_where(segments, tp), segments.c.state.in_(live)).values(
                state=S.DELETE_SEGMENT_STARTED.value, event_timestamp_ms=event_timestamp_ms, broker_id=broker_id))
            out = [to_md(r).with_state(S.DELETE_SEGMENT_STARTED, event_timestamp_ms=event_timestamp_ms,
                                        broker_id=broker_id)
                   for r in rows if r.state != S.DELETE_SEGMENT_FINISHED.value]
            return out, delta

        return self._write_sized(tp, "begin_partition_deletion", fn)

    def delete_partition(self, tp: TopicPartition, *, leader_epoch: int | None = None) -> None:
        def fn(conn: Connection) -> tuple[None, int]:
            if leader_epoch is not None:
                exists = conn.execute(select(leaders.c.leader_epoch).where(_tp_where(leaders, tp))).first()
                if exists is not None:  # no row: deleted already (a retry) or never registered
                    self._fence(conn, tp, leader_epoch, "deletion of the partition's metadata")
            self._forget_partition(conn, tp)  # every store's rows of the partition
            return None, 0

        self._write_sized(tp, "delete_partition", fn)
        with self._tp_lock(tp):
            self._sizes.pop(tp, None)

    def _forget_partition(self, conn: Connection, tp: TopicPartition) -> None:
        super()._forget_partition(conn, tp)
        for table in (segments, cleaner):
            conn.execute(delete(table).where(_tp_where(table, tp)))


def _replacement(old: Row[Any], new_rows: list[Row[Any]]) -> str:
    """The new segment that covers the replaced one's start ("" when compaction emptied it)."""
    best = ""
    for r in sorted(new_rows, key=lambda r: r.start_offset):
        if r.start_offset <= old.start_offset or not best:
            best = r.segment_id
        if r.start_offset <= old.start_offset <= r.end_offset:
            return str(r.segment_id)
    return best

