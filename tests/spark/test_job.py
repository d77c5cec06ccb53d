"""The Spark offload against the in-process tiered cleaner: same bytes, fencing, retries, many partitions."""

from __future__ import annotations

from pathlib import Path

import pytest

from cleaner.spark.errors import SparkJobError
from metadata import load_metadata_manager
from tests.spark.conftest import (
    TASK_STAGES,
    build,
    clean_in_process,
    make_world,
    mode_config,
    partitions_of,
    remote_image,
    s3_store,
    spark_job,
)
from tests.tiered.conftest import World, assert_no_leak

pytestmark = [pytest.mark.spark, pytest.mark.slow]


def _twins(tmp_path: Path, store_a, store_b, seed: int, partitions: int = 1, rounds: int = 5) -> tuple[World, World]:
    a = make_world(tmp_path / "inproc", store_a, partitions)
    b = make_world(tmp_path / "spark", store_b, partitions)
    for w in (a, b):
        build(w, seed, rounds)
    for tp in partitions_of(a):
        assert remote_image(a, tp) == remote_image(b, tp)  # the same partition state, twice
    return a, b


def _assert_same(a: World, b: World) -> None:
    for tp in partitions_of(a):
        ia, ib = remote_image(a, tp), remote_image(b, tp)
        assert [s[:3] for s in ia] == [s[:3] for s in ib]
        assert ia == ib
        assert a.rlmm.cleaner_offsets(tp) == b.rlmm.cleaner_offsets(tp)
        assert a.checkpoints.get(tp) == b.checkpoints.get(tp)
        assert [s.base_offset for s in a.lm.get_log(tp).all_segments()] == \
            [s.base_offset for s in b.lm.get_log(tp).all_segments()]


def _more(w: World, seed: int) -> None:
    from tests.spark.conftest import Workload

    for tp in partitions_of(w):
        wl = Workload(seed * 7919 + tp.partition, pid_base=100)  # new producers: old ones keep their state
        for _ in range(2):
            wl.round(w, tp)
        w.clock.advance(5_000)  # past delete.retention.ms: tombstones and markers may expire now


def test_spark_job_matches_the_in_process_cleaner_byte_for_byte_on_s3(spark, moto_server_url, tmp_path, mode):
    seed = 1
    a, b = _twins(tmp_path, s3_store(moto_server_url), s3_store(moto_server_url), seed, rounds=4)
    try:
        tp = partitions_of(a)[0]
        for round_no in range(2):
            before = a.read_all()
            clean_in_process(a, tp)
            outcome = spark_job(spark, b, config=mode_config(mode)).run([tp])[tp]
            assert outcome.status == "cleaned", outcome.error
            _assert_same(a, b)
            assert b.read_all() == a.read_all()
            assert len(a.read_all()) <= len(before)
            if round_no == 0:
                assert outcome.segments_cleaned > 0 and outcome.bytes_uploaded > 0
                for w in (a, b):
                    w.rlm.delete_unreferenced(tp)
                    _more(w, seed)
        b.rlm.delete_unreferenced(tp)
        assert_no_leak(b)
    finally:
        a.close()
        b.close()


def test_many_partitions_in_one_job(spark, tmp_path, mode):
    a, b = _twins(tmp_path, (f"file://{tmp_path / 'obj-a'}", {}), (f"file://{tmp_path / 'obj-b'}", {}), seed=5,
                  partitions=4, rounds=3)
    try:
        tps = partitions_of(a)
        for tp in tps:
            clean_in_process(a, tp)
        stages: list[tuple[str, int]] = []
        outcomes = spark_job(spark, b, config=mode_config(mode),
                             on_stage=lambda s, ps: stages.append((s, len(ps)))).run(tps)
        assert {tp: o.status for tp, o in outcomes.items()} == dict.fromkeys(tps, "cleaned")
        # one job: the shared stages ran once, over all partitions
        assert [s for s in stages if s[0] != "before-publish"] == [("planned", 4), ("scanned", 4), ("rewritten", 4)]
        _assert_same(a, b)
        for tp, out in outcomes.items():  # the driver left a report of each partition's round
            (r,) = b.rlmm.list_compaction_reports(tp)
            assert (r.engine, r.outcome, r.leader_epoch) == ("spark", "completed", out.leader_epoch)
            assert (r.checkpoint_before, r.checkpoint_after) == (out.first_dirty_offset, b.checkpoints[tp])
            uploaded = [s for s in r.segments if s.action == "uploaded"]
            assert [s.segment_id for s in uploaded] == out.new_segment_ids
            assert sum(s.uploaded for s in uploaded) == out.bytes_uploaded
            assert {s.segment_id for s in r.segments if s.action == "rewritten"} == set(out.replaced_segment_ids)
            assert sum(1 for s in r.segments if s.action == "skipped-by-bloom") == out.segments_skipped_by_bloom
            assert sum(r.removed.values()) >= out.messages_read - out.messages_written > 0
    finally:
        a.close()
        b.close()


def test_a_task_failing_once_is_retried_and_the_result_is_identical(spark, tmp_path, mode):
    a, b = _twins(tmp_path, (f"file://{tmp_path / 'obj-a'}", {}), (f"file://{tmp_path / 'obj-b'}", {}), seed=3,
                  rounds=3)
    try:
        tp = partitions_of(a)[0]
        clean_in_process(a, tp)
        cfg = mode_config(mode, fail_first_attempt=TASK_STAGES[mode])
        outcome = spark_job(spark, b, config=cfg).run([tp])[tp]
        assert outcome.status == "cleaned", outcome.error
        _assert_same(a, b)
        b.rlm.delete_unreferenced(tp)
        # split: the retried rewrite overwrote the same keys; whole: the retry uploaded under new
        # ids of the job's tag, and the job swept the failed attempt's objects
        assert_no_leak(b)
    finally:
        a.close()
        b.close()


@pytest.mark.parametrize("stage", ["scanned", "before-publish"])
def test_leadership_moved_during_the_job_fences_it(spark, tmp_path, stage, mode):
    b = make_world(tmp_path / "spark", (f"file://{tmp_path / 'obj'}", {}))
    try:
        build(b, seed=4, rounds=3)
        tp = partitions_of(b)[0]
        epoch = b.rlm.leader_epoch(tp)
        keys_before = b.object_keys()
        segments_before = b.rlmm.list_remote_log_segments(tp)
        read_before = b.read_all()
        other = load_metadata_manager(f"sqlite:///{tmp_path / 'spark' / 'metadata.db'}")  # another broker

        def move(name, _tps):
            if name == stage:
                other.become_leader(tp, epoch + 1, 1, start_offset=b.lm.get_log(tp).log_end_offset)

        outcome = spark_job(spark, b, config=mode_config(mode), on_stage=move).run([tp])[tp]
        assert outcome.status == "fenced"
        assert b.object_keys() == keys_before  # every upload of the job was removed, the lease too
        assert b.rlmm.list_remote_log_segments(tp) == segments_before
        assert b.rlmm.cleaner_offsets(tp) == {}
        assert tp not in b.checkpoints
        assert b.read_all() == read_before
        (r,) = b.rlmm.list_compaction_reports(tp)  # a fenced round leaves its report
        assert (r.engine, r.outcome, r.checkpoint_after) == ("spark", "fenced", None)
        other.close()
    finally:
        b.close()


def test_a_failing_job_publishes_nothing_and_leaks_nothing(spark, tmp_path, mode):
    b = make_world(tmp_path / "spark", (f"file://{tmp_path / 'obj'}", {}))
    try:
        build(b, seed=6, rounds=3)
        tp = partitions_of(b)[0]
        keys_before = b.object_keys()

        def boom(name, _tps):
            if name == "rewritten":
                raise RuntimeError("driver lost")

        with pytest.raises(SparkJobError):
            spark_job(spark, b, config=mode_config(mode), on_stage=boom).run([tp])
        assert b.object_keys() == keys_before
        assert b.rlmm.cleaner_offsets(tp) == {}
        (r,) = b.rlmm.list_compaction_reports(tp)  # a failed round leaves its report
        assert (r.engine, r.outcome, r.checkpoint_after) == ("spark", "failed", None)
        assert "driver lost" in (r.error or "")
    finally:
        b.close()


@pytest.mark.parametrize("fail", [False, True, "speculation"])
def test_a_whole_partition_is_swept_at_the_end_only_when_an_attempt_failed(spark, tmp_path, monkeypatch, fail):
    """A failed attempt of a partition round may have uploaded objects only the job's tag names:
    the driver sweeps after releasing its lease. Without failures it does not list the partition
    again. The decision is the partition's own: its result says which task attempt made it (a
    retry), without asking Spark's status tracker (about 20 ms of driver round trips per job)."""
    import cleaner.spark.job as job_module

    calls: list[str] = []
    real = job_module.sweep_orphan_objects

    def counting(*args, **kw):
        calls.append("sweep")
        return real(*args, **kw)

    monkeypatch.setattr(job_module, "sweep_orphan_objects", counting)

    def not_asked(self):
        raise AssertionError("each result names its task attempt: Spark's status tracker is not needed")

    monkeypatch.setattr(type(spark.sparkContext), "statusTracker", not_asked)
    if fail == "speculation":  # a speculative copy may have uploaded while the winner was attempt 0
        monkeypatch.setattr(job_module, "_speculation", lambda sc: True)
    b = make_world(tmp_path / "spark", (f"file://{tmp_path / 'obj'}", {}))
    try:
        build(b, seed=8, rounds=3)
        tp = partitions_of(b)[0]
        cfg = mode_config("whole", fail_first_attempt=TASK_STAGES["whole"] if fail is True else frozenset())
        assert spark_job(spark, b, config=cfg).run([tp])[tp].status == "cleaned"
        assert len(calls) == (2 if fail else 1)  # the job's start sweeps every partition anyway
        b.rlm.delete_unreferenced(tp)
        assert_no_leak(b)
    finally:
        b.close()
