"""Every tiered round leaves a report in the metadata store: the action on each segment
(rewritten, skipped by bloom, uploaded), records removed by reason, bytes and requests; a
fenced round leaves one too, with its outcome."""

from __future__ import annotations

import shutil

import pytest

from cleaner.config import CleanerConfig
from cleaner.log_cleaner import LogCleaner
from cleaner.tiered import TieredContext
from log.record import ControlRecordType
from metadata.errors import FencedLeaderEpochError
from metadata.reports import ACTION_REWRITTEN, ACTION_SKIPPED_BY_BLOOM, ACTION_UPLOADED, CompactionReport
from tests.tiered.conftest import TP, World


def _log_cleaner(w: World) -> LogCleaner:
    return LogCleaner(CleanerConfig(dedupe_buffer_size=1 << 20, io_buffer_size=64 * 1024), w.lm, clock=w.clock,
                      tiered=TieredContext(rlmm=w.rlmm, rsm=w.rsm, leader_epoch=w.rlm.leader_epoch,
                                           temp_dir=w.root / "tiered-tmp", broker_id=w.broker_id))


def _latest(w: World) -> CompactionReport:
    return w.rlmm.list_compaction_reports(TP, limit=1)[0]


def test_a_round_reports_skips_rewrites_uploads_and_reasons(make_world) -> None:
    w = make_world()
    lc = _log_cleaner(w)
    w.produce([(f"cold-{i:04d}".encode(), b"x" * 20) for i in range(300)])
    w.roll_and_tier()
    first_stats = lc.clean_now(TP)
    w.rlm.delete_unreferenced(TP)
    clean_segments = w.rlmm.list_remote_log_segments(TP)
    w.produce([(b"hot-1", b"a"), (b"hot-2", b"b"), (b"hot-1", b"c")])
    w.roll_and_tier()
    stats = lc.clean_now(TP)

    reports = w.rlmm.list_compaction_reports(TP)
    assert len(reports) == 2
    r = reports[0]
    assert (r.engine, r.outcome, r.error) == ("tiered", "completed", None)
    assert r.leader_epoch == w.rlm.leader_epoch(TP)
    assert r.checkpoint_before == first_stats.end_offset == reports[1].checkpoint_after
    assert r.checkpoint_after == stats.end_offset > r.checkpoint_before
    assert r.started_ms <= r.ended_ms
    by_action: dict[str, list] = {}
    for s in r.segments:
        by_action.setdefault(s.action, []).append(s)
    skipped = by_action.get(ACTION_SKIPPED_BY_BLOOM, [])
    assert len(skipped) == stats.segments_skipped_by_bloom >= len(clean_segments) - 1
    assert {s.segment_id for s in skipped} <= {m.id for m in clean_segments}
    assert all(s.bytes_in == s.bytes_out == s.downloaded == s.requests == 0 for s in skipped)
    rewritten = by_action[ACTION_REWRITTEN]
    assert len(rewritten) == stats.segments_cleaned
    assert all(s.bytes_in > 0 and s.downloaded > 0 and s.requests >= 1 for s in rewritten)
    # hot-1's first value is superseded; nothing else goes
    assert r.removed == {"superseded": 1, "tombstone": 0, "aborted": 0, "marker": 0} == stats.records_removed
    uploaded = by_action[ACTION_UPLOADED]
    new_ids = {m.id for m in w.rlmm.list_remote_log_segments(TP)}
    assert {s.segment_id for s in uploaded} <= new_ids
    assert sum(s.uploaded for s in uploaded) == stats.bytes_uploaded
    assert all(s.requests >= 4 for s in uploaded)
    assert r.totals()["downloaded"] == stats.bytes_downloaded
    assert sum(s.bytes_in for s in rewritten) == stats.bytes_read
    # the metrics' counters saw both rounds
    assert lc.reporter is not None
    assert lc.reporter.records_removed()[("tiered", "superseded")] == 1
    assert lc.reporter.rounds()[("tiered", "completed")] == 2


def test_tombstones_aborted_records_and_markers_are_reported_by_reason(make_world) -> None:
    w = make_world()
    lc = _log_cleaner(w)
    w.produce([(b"a", b"1"), (b"b", b"1")])
    w.produce([(b"k", b"aborted")], producer_id=2, producer_epoch=0, base_sequence=0, transactional=True)
    w.log.append_marker(2, 0, ControlRecordType.ABORT)
    w.produce([(b"k", b"later")], producer_id=2, producer_epoch=0, base_sequence=1)
    w.roll_and_tier()
    w.produce([(b"a", None)])
    w.roll_and_tier()
    lc.clean_now(TP)
    assert _latest(w).removed == {"superseded": 1, "tombstone": 0, "aborted": 1, "marker": 0}
    w.clock.advance(2000)  # past delete.retention.ms (1000): the tombstone and the marker may go
    w.produce([(b"c", b"1")])
    w.roll_and_tier()
    lc.clean_now(TP)
    w.clock.advance(2000)
    w.produce([(b"d", b"1")])
    w.roll_and_tier()
    lc.clean_now(TP)
    total = {k: sum(r.removed[k] for r in w.rlmm.list_compaction_reports(TP)) for k in ("tombstone", "marker")}
    assert total == {"tombstone": 1, "marker": 1}
    assert all(k != b"a" for _, k, _ in w.read_all())


def test_a_fenced_round_leaves_a_report_with_its_outcome(make_world, monkeypatch: pytest.MonkeyPatch) -> None:
    a = make_world(broker_id=0)
    lc = _log_cleaner(a)
    for r in range(3):
        a.produce([(f"k{i}".encode(), f"v{r}".encode()) for i in range(40)])
        a.roll_and_tier()
    a.log.flush()
    shutil.copytree(a.root / "data-0", a.root / "data-1")
    b = make_world(broker_id=1, create=False)
    real = lc.new_tiered_cleaner

    def new_tiered_cleaner(*args, **kw):
        c = real(*args, **kw)
        c.crash_hook = lambda step: b.rlm.become_leader(TP, 1, 1) if step == "before_publish" else None
        return c

    monkeypatch.setattr(lc, "new_tiered_cleaner", new_tiered_cleaner)
    with pytest.raises(FencedLeaderEpochError):
        lc.clean_now(TP)
    r = _latest(a)
    assert (r.engine, r.outcome, r.checkpoint_after, r.leader_epoch) == ("tiered", "fenced", None, 0)
    assert "FencedLeaderEpochError" in (r.error or "")
    assert any(s.action == ACTION_UPLOADED for s in r.segments)  # it got as far as uploading
    assert lc.reporter is not None and lc.reporter.rounds()[("tiered", "fenced")] == 1
