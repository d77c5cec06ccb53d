"""The SQL :class:`~metadata.reports.RoundReportStore`: one row per cleaning round and one per
segment of a round, the newest ``keep`` rounds of each partition kept."""

from __future__ import annotations

from typing import Any

from sqlalchemy import Connection, Row, delete, insert, select

from log.errors import InvalidRequestError
from log.types import TopicPartition
from metadata.reports import DEFAULT_REPORTS_KEPT, CompactionReport, SegmentReport
from metadata.sql.engine import SqlStore
from metadata.sql.schema import round_segments, rounds
from metadata.sql.schema import tp_where as _tp_where


class SqlRoundReportStore(SqlStore):
    """Round reports of every partition (see :class:`~metadata.reports.RoundReportStore`). Writes
    are not fenced but take the partition's lock, like its other writes."""

    def record_compaction_report(self, report: CompactionReport, *, keep: int = DEFAULT_REPORTS_KEPT) -> None:
        if keep < 1:
            raise InvalidRequestError(f"keep={keep} must be >= 1")
        tp = report.topic_partition

        def fn(conn: Connection) -> None:
            old = conn.execute(select(rounds.c.seq).where(rounds.c.round_id == report.round_id)).first()
            if old is not None:
                conn.execute(delete(round_segments).where(round_segments.c.round_seq == old[0]))
                conn.execute(delete(rounds).where(rounds.c.seq == old[0]))
            result = conn.execute(insert(rounds).values(
                round_id=report.round_id, topic=tp.topic, partition_id=tp.partition, engine=report.engine,
                leader_epoch=report.leader_epoch, started_ms=report.started_ms, ended_ms=report.ended_ms,
                checkpoint_before=report.checkpoint_before, checkpoint_after=report.checkpoint_after,
                outcome=report.outcome, error=report.error))
            pk = result.inserted_primary_key
            assert pk is not None
            seq = int(pk[0])
            if report.segments:
                conn.execute(insert(round_segments), _report_rows(seq, report))
            cutoff = conn.execute(select(rounds.c.seq).where(_tp_where(rounds, tp)).order_by(rounds.c.seq.desc())
                                  .offset(keep).limit(1)).first()
            if cutoff is not None:
                stale = select(rounds.c.seq).where(_tp_where(rounds, tp), rounds.c.seq <= cutoff[0])
                conn.execute(delete(round_segments).where(round_segments.c.round_seq.in_(stale)))
                conn.execute(delete(rounds).where(_tp_where(rounds, tp), rounds.c.seq <= cutoff[0]))

        self._write(tp, "record_compaction_report", fn)

    def list_compaction_reports(self, tp: TopicPartition, *, limit: int = 20,
                                before: str | None = None) -> list[CompactionReport]:
        if limit < 1:
            raise InvalidRequestError(f"limit={limit} must be >= 1")

        def fn(conn: Connection) -> list[CompactionReport]:
            stmt = select(rounds).where(_tp_where(rounds, tp))
            if before is not None:
                row = conn.execute(select(rounds.c.seq).where(_tp_where(rounds, tp),
                                                              rounds.c.round_id == before)).first()
                if row is None:
                    raise InvalidRequestError(f"before={before!r} is not a round id of {tp}: page with the "
                                              f"round_id of the last report of the previous page")
                stmt = stmt.where(rounds.c.seq < row[0])
            rows = conn.execute(stmt.order_by(rounds.c.seq.desc()).limit(limit)).all()
            if not rows:
                return []
            segs: dict[int, list[Row[Any]]] = {r.seq: [] for r in rows}
            for s in conn.execute(select(round_segments).where(round_segments.c.round_seq.in_(list(segs)))
                                  .order_by(round_segments.c.round_seq, round_segments.c.ordinal)):
                segs[s.round_seq].append(s)
            return [_to_report(r, segs[r.seq]) for r in rows]

        return self._read("list_compaction_reports", fn)


    def _forget_partition(self, conn: Connection, tp: TopicPartition) -> None:
        super()._forget_partition(conn, tp)
        conn.execute(delete(round_segments).where(
            round_segments.c.round_seq.in_(select(rounds.c.seq).where(_tp_where(rounds, tp)))))
        conn.execute(delete(rounds).where(_tp_where(rounds, tp)))


def _report_rows(seq: int, report: CompactionReport) -> list[dict[str, Any]]:
    return [{"round_seq": seq, "ordinal": i, "segment_id": s.segment_id, "action": s.action,
             "base_offset": s.base_offset, "end_offset": s.end_offset, "superseded": s.superseded,
             "tombstone": s.tombstone, "aborted": s.aborted, "marker": s.marker, "bytes_in": s.bytes_in,
             "bytes_out": s.bytes_out, "downloaded": s.downloaded, "uploaded": s.uploaded, "requests": s.requests}
            for i, s in enumerate(report.segments)]


def _to_report(r: Row[Any], segs: list[Row[Any]]) -> CompactionReport:
    m = r._mapping
    return CompactionReport(
        round_id=m["round_id"], topic_partition=TopicPartition(m["topic"], m["partition_id"]), engine=m["engine"],
        leader_epoch=m["leader_epoch"], started_ms=m["started_ms"], ended_ms=m["ended_ms"],
        checkpoint_before=m["checkpoint_before"], checkpoint_after=m["checkpoint_after"], outcome=m["outcome"],
        error=m["error"],
        segments=tuple(SegmentReport(
            segment_id=s.segment_id, action=s.action, base_offset=s.base_offset, end_offset=s.end_offset,
            superseded=s.superseded, tombstone=s.tombstone, aborted=s.aborted, marker=s.marker,
            bytes_in=s.bytes_in, bytes_out=s.bytes_out, downloaded=s.downloaded, uploaded=s.uploaded,
            requests=s.requests) for s in segs))

