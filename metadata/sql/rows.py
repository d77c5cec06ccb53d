"""Remote segment rows: their conversion to :class:`RemoteLogSegmentMetadata` and their look-up
by id, shared by the segment store and the segment index store."""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

from sqlalchemy import Connection, Row, select

from log.types import TopicPartition
from metadata.errors import RemoteSegmentNotFoundError
from metadata.sql.schema import segments
from metadata.types import RemoteLogSegmentId, RemoteLogSegmentMetadata, RemoteLogSegmentState

S = RemoteLogSegmentState


def dump_map(m: Mapping[int, int]) -> str:
    return json.dumps({str(k): v for k, v in sorted(m.items())}, separators=(",", ":"))


def load_map(s: str) -> dict[int, int]:
    return {int(k): int(v) for k, v in json.loads(s).items()}


def to_md(r: Row[Any]) -> RemoteLogSegmentMetadata:
    m = r._mapping
    return RemoteLogSegmentMetadata(
        remote_log_segment_id=RemoteLogSegmentId(TopicPartition(m["topic"], m["partition_id"]), m["segment_id"]),
        start_offset=m["start_offset"], end_offset=m["end_offset"], max_timestamp_ms=m["max_timestamp_ms"],
        broker_id=m["broker_id"], event_timestamp_ms=m["event_timestamp_ms"],
        segment_size_in_bytes=m["size_bytes"], segment_leader_epochs=load_map(m["leader_epochs"]),
        state=S(m["state"]), cleaner_offsets=load_map(m["cleaner_offsets"]), superseded_by=m["superseded_by"],
        key_index_bytes=m["key_index_bytes"],
    )


def referenced(state: int, superseded_by: str | None) -> bool:
    """Whether a row in ``state`` is what readers see (finished and not replaced)."""
    return state == S.COPY_SEGMENT_FINISHED.value and superseded_by is None


def chunked(ids: Sequence[str], size: int = 500) -> Iterator[Sequence[str]]:
    """``ids`` in slices small enough for one IN (...) on every backend (SQLite's variable limit)."""
    for i in range(0, len(ids), size):
        yield ids[i:i + size]


def rows_by_id(conn: Connection, ids: Sequence[str]) -> dict[str, Row[Any]]:
    """The segment rows of ``ids`` that exist, by id, in a few queries."""
    return {row.segment_id: row for chunk in chunked(ids)
            for row in conn.execute(select(segments).where(segments.c.segment_id.in_(chunk)))}


def segment_rows(conn: Connection, tp: TopicPartition,
                 segment_ids: Sequence[RemoteLogSegmentId]) -> dict[str, Row[Any]]:
    """The rows of ``segment_ids`` (all of ``tp``) in a few queries, by id.

    Raises:
        RemoteSegmentNotFoundError: one of them has no metadata (or is another partition's).
    """
    rows = rows_by_id(conn, [s.id for s in segment_ids])
    for s in segment_ids:
        row = rows.get(s.id)
        if row is None or row.topic != tp.topic or row.partition_id != tp.partition:
            raise RemoteSegmentNotFoundError(f"no metadata for remote segment {s}")
    return rows


def segment_row(conn: Connection, segment_id: RemoteLogSegmentId) -> Row[Any]:
    """The row of ``segment_id``.

    Raises:
        RemoteSegmentNotFoundError: it has no metadata (or is another partition's).
    """
    row = conn.execute(select(segments).where(segments.c.segment_id == segment_id.id)).first()
    tp = segment_id.topic_partition
    if row is None or row.topic != tp.topic or row.partition_id != tp.partition:
        raise RemoteSegmentNotFoundError(f"no metadata for remote segment {segment_id}")
    return row
