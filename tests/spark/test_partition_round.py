"""The partition round (a whole tiered round as one Spark task) without Spark: its metadata
recorder, the shipped log, and a round on a pickled task against the in-process round."""

from __future__ import annotations

import pickle
from pathlib import Path

import pytest

from cleaner.round_metadata import DeferredRoundMetadata
from cleaner.spark.partition_round import (
    PartitionRoundTask,
    local_txn_segments,
    run_partition_round,
    tagged_segment_id,
)
from cleaner.spark.tasks import StoreSpec
from cleaner.tiered import plan_round
from log.types import TopicPartition
from metadata.types import RemoteLogSegmentId, RemoteLogSegmentMetadata, RemoteLogSegmentState
from tests.spark.conftest import build, clean_in_process, make_world, partitions_of, remote_image

TP = TopicPartition("t", 0)


def _md(start: int, end: int) -> RemoteLogSegmentMetadata:
    return RemoteLogSegmentMetadata(RemoteLogSegmentId.generate(TP), start, end, 1, 0, 1, 10, {0: start},
                                    state=RemoteLogSegmentState.COPY_SEGMENT_STARTED)


def test_the_recorder_answers_shipped_blooms_and_records_writes_in_order() -> None:
    old = _md(0, 9)
    m = DeferredRoundMetadata({old.id: b"bloom"})
    assert m.get_bloom_filter(old.remote_log_segment_id) == b"bloom"
    assert m.get_bloom_filters(TP, [old.id, "x" * 32]) == {old.id: b"bloom"}
    a, b = _md(0, 4), _md(5, 9)
    for md in (a, b):
        m.add_remote_log_segment_metadata(md, leader_epoch=3)
        m.put_bloom_filter(md.remote_log_segment_id, md.id.encode())
    m.set_key_index(old.remote_log_segment_id, 123)
    # a round abandoning its own upload: gone from what the driver replays
    m.update_remote_log_segment_state(b.remote_log_segment_id, RemoteLogSegmentState.DELETE_SEGMENT_STARTED,
                                      leader_epoch=3, event_timestamp_ms=1, broker_id=0)
    with pytest.raises(ValueError, match="never registered"):
        m.publish_compaction(TP, leader_epoch=3, new_segment_ids=[b.remote_log_segment_id], replaced_segment_ids=[],
                             cleaner_offsets={3: 10})
    m.publish_compaction(TP, leader_epoch=3, new_segment_ids=[a.remote_log_segment_id],
                         replaced_segment_ids=[old.remote_log_segment_id], cleaner_offsets={3: 10, 1: 4})
    w = m.writes()
    assert w.new_segments == ((a, a.id.encode()),)
    assert (w.replaced_ids, w.cleaner_offsets, w.key_indexes, w.abandoned_ids) == (
        (old.id,), ((1, 4), (3, 10)), ((old.id, 123),), (b.id,))
    assert w.published
    finished = RemoteLogSegmentMetadata(RemoteLogSegmentId.generate(TP), 0, 1, 1, 0, 1, 1, {0: 0},
                                        state=RemoteLogSegmentState.COPY_SEGMENT_FINISHED)
    with pytest.raises(ValueError, match="COPY_SEGMENT_STARTED"):
        m.add_remote_log_segment_metadata(finished, leader_epoch=3)


def test_tagged_ids_carry_the_tag() -> None:
    new = tagged_segment_id("00112233aabb")
    ids = {new(TP).id for _ in range(100)}
    assert len(ids) == 100 and all(len(i) == 32 and i.startswith("00112233aabb") for i in ids)
    with pytest.raises(ValueError, match="hex"):
        tagged_segment_id("XYZ")


def test_a_round_from_a_pickled_task_writes_what_the_in_process_round_writes(tmp_path: Path) -> None:
    """The executor's round (no Spark: called directly on an unpickled task) uploads the same
    segments as the in-process round; its writes, replayed, give the same remote image."""
    a = make_world(tmp_path / "a", (f"file://{tmp_path / 'sa'}", {}))
    b = make_world(tmp_path / "b", (f"file://{tmp_path / 'sb'}", {}))
    try:
        for w in (a, b):
            build(w, 9, rounds=4)
        tp = partitions_of(a)[0]
        clean_in_process(a, tp)
        log = b.lm.get_log(tp)
        epoch = b.rlm.leader_epoch(tp)
        plan = plan_round(tp, log, b.rlmm, leader_epoch=epoch, local_checkpoint=None, now=b.clock.milliseconds())
        assert plan is not None
        with log.lock:
            producers = tuple((pid, e.last_data_offset, e.producer_epoch)
                              for pid, e in sorted(log.producer_state.active_producers().items()))
        blooms = b.rlmm.get_bloom_filters(tp, [md.id for md in plan.segments])
        task = PartitionRoundTask(
            key=0, store=StoreSpec.of(*b.store_spec), plan=plan,  # type: ignore[attr-defined]
            config=tuple(sorted(log.config.overrides.items())), producers=producers,
            local_txn_segments=local_txn_segments(log, plan.segments[-1].end_offset + 1),
            blooms=tuple(sorted(blooms.items())), now_ms=b.clock.milliseconds(), segment_tag="abcdef012345",
            dedupe_buffer_size=8 << 20)
        (tmp_path / "exec").mkdir()
        res = pickle.loads(pickle.dumps(run_partition_round(pickle.loads(pickle.dumps(task)), tmp_path / "exec")))
        assert res.end == a.checkpoints[tp]
        writes = res.writes
        assert writes.new_segments and all(md.id.startswith("abcdef012345") for md, _ in writes.new_segments)
        # nothing was published by the executor: the driver replays the writes
        assert b.rlmm.cleaner_offsets(tp) == {}
        for md, bloom in writes.new_segments:
            b.rlmm.add_remote_log_segment_metadata(md, leader_epoch=epoch)
            assert bloom is not None
            b.rlmm.put_bloom_filter(md.remote_log_segment_id, bloom)
        b.rlmm.publish_compaction(tp, leader_epoch=epoch,
                                  new_segment_ids=[md.remote_log_segment_id for md, _ in writes.new_segments],
                                  replaced_segment_ids=[RemoteLogSegmentId(tp, s) for s in writes.replaced_ids],
                                  cleaner_offsets=dict(writes.cleaner_offsets or ()))
        assert remote_image(a, tp) == remote_image(b, tp)
        assert a.rlmm.cleaner_offsets(tp) == b.rlmm.cleaner_offsets(tp)
        assert not any((tmp_path / "exec").iterdir())  # the round's scratch space is gone
    finally:
        a.close()
        b.close()


def test_a_round_keeps_its_downloads_in_the_given_dir_else_sparks_local_dir(monkeypatch: pytest.MonkeyPatch,
                                                                              tmp_path: Path) -> None:
    from cleaner.spark.partition_round import scratch_root

    monkeypatch.delenv("SPARK_LOCAL_DIRS", raising=False)
    assert scratch_root() is None  # the system's temporary directory
    monkeypatch.setenv("SPARK_LOCAL_DIRS", f"{tmp_path / 'a'},{tmp_path / 'b'}")
    assert scratch_root() == str(tmp_path / "a")
    assert scratch_root(tmp_path / "c") == str(tmp_path / "c")
