"""The SQL :class:`~metadata.segment_indexes.SegmentIndexStore`: each remote segment's key bloom
filter (a row of ``tc_bloom_filters``) and the size of its exact key index (a column of the
segment's row)."""

from __future__ import annotations

from collections.abc import Sequence

from sqlalchemy import Connection, delete, insert, select, update

from log.errors import InvalidRequestError
from log.types import TopicPartition
from metadata.errors import RemoteSegmentNotFoundError
from metadata.sql.engine import SqlStore
from metadata.sql.rows import chunked, segment_row
from metadata.sql.schema import blooms, segments
from metadata.sql.schema import tp_where as _tp_where
from metadata.types import RemoteLogSegmentId, RemoteLogSegmentState

S = RemoteLogSegmentState
#: segment ids per query of get_bloom_filters (well under SQLite's 999 bound parameters)
BLOOM_BATCH = 500


def store_blooms(conn: Connection, tp: TopicPartition, filters: Sequence[tuple[str, bytes]]) -> None:
    """Store (or replace) the bloom filters ``(segment id, bytes)`` of segments of ``tp`` in
    ``conn``'s transaction (the segment store registers a segment and its filter together)."""
    for chunk in chunked([sid for sid, _data in filters]):
        conn.execute(delete(blooms).where(blooms.c.segment_id.in_(chunk)))
    if filters:
        conn.execute(insert(blooms), [{"segment_id": sid, "topic": tp.topic, "partition_id": tp.partition,
                                       "data": bytes(data)} for sid, data in filters])


def drop_bloom(conn: Connection, segment_id: RemoteLogSegmentId) -> None:
    """Forget a deleted segment's bloom filter in ``conn``'s transaction."""
    conn.execute(delete(blooms).where(blooms.c.segment_id == segment_id.id))


class SqlSegmentIndexStore(SqlStore):
    """Bloom filters and key index sizes of remote segments (see :class:`SegmentIndexStore`)."""

    def put_bloom_filter(self, segment_id: RemoteLogSegmentId, data: bytes) -> None:
        tp = segment_id.topic_partition

        def fn(conn: Connection) -> None:
            # a write first, so SQLite takes its write lock before the reads below
            drop_bloom(conn, segment_id)
            row = segment_row(conn, segment_id)
            if row.state == S.DELETE_SEGMENT_FINISHED.value:
                raise RemoteSegmentNotFoundError(f"remote segment {segment_id} was deleted")
            conn.execute(insert(blooms).values(segment_id=segment_id.id, topic=tp.topic, partition_id=tp.partition,
                                               data=bytes(data)))

        self._write(tp, "put_bloom_filter", fn)

    def set_key_index(self, segment_id: RemoteLogSegmentId, size_bytes: int) -> None:
        if size_bytes < 0:
            raise InvalidRequestError(f"key index size {size_bytes} must be >= 0")
        tp = segment_id.topic_partition

        def fn(conn: Connection) -> None:
            row = segment_row(conn, segment_id)
            if row.state == S.DELETE_SEGMENT_FINISHED.value:
                raise RemoteSegmentNotFoundError(f"remote segment {segment_id} was deleted")
            conn.execute(update(segments).where(segments.c.segment_id == segment_id.id)
                         .values(key_index_bytes=size_bytes))

        self._write(tp, "set_key_index", fn)

    def get_bloom_filter(self, segment_id: RemoteLogSegmentId) -> bytes | None:
        tp = segment_id.topic_partition
        stmt = select(blooms.c.data).where(blooms.c.segment_id == segment_id.id, _tp_where(blooms, tp))
        row = self._read("get_bloom_filter", lambda c: c.execute(stmt).first())
        return None if row is None else bytes(row[0])

    def get_bloom_filters(self, tp: TopicPartition, segment_ids: Sequence[str]) -> dict[str, bytes]:
        ids = list(dict.fromkeys(segment_ids))

        def fn(conn: Connection) -> dict[str, bytes]:
            out: dict[str, bytes] = {}
            for i in range(0, len(ids), BLOOM_BATCH):  # bounded IN lists (SQLite's parameter limit)
                stmt = select(blooms.c.segment_id, blooms.c.data).where(
                    _tp_where(blooms, tp), blooms.c.segment_id.in_(ids[i:i + BLOOM_BATCH]))
                out.update((sid, bytes(data)) for sid, data in conn.execute(stmt))
            return out

        return self._read("get_bloom_filters", fn) if ids else {}

    def _forget_partition(self, conn: Connection, tp: TopicPartition) -> None:
        super()._forget_partition(conn, tp)
        conn.execute(delete(blooms).where(_tp_where(blooms, tp)))
