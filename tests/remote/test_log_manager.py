"""RemoteLogManager: copy-once, leadership, local/remote retention, deferred deletion."""

from __future__ import annotations

from pathlib import Path

import pytest

from log.clock import MockClock
from log.errors import OffsetOutOfRangeError
from log.fetch import READ_COMMITTED, READ_UNCOMMITTED
from log.index.bloom import KeyBloomFilter
from log.local_log import RecordSpec
from log.record import ControlRecordType
from log.types import TopicPartition
from metadata.errors import FencedLeaderEpochError
from metadata.manager import DEFAULT_ORPHAN_GRACE_MS
from metadata.types import RemoteLogSegmentId, RemoteLogSegmentMetadata
from metadata.types import RemoteLogSegmentState as S
from remote.storage_manager import IndexType, LogSegmentData
from tests.remote.tiering import TP, TierEnv, local_records, produce, read_all


@pytest.fixture
def env(tmp_path: Path, clock: MockClock) -> TierEnv:
    e = TierEnv(tmp_path, clock)
    yield e
    e.close()


def _fill(log, n=40, size=60, key="k"):
    for i in range(n):
        log.append_records([RecordSpec(f"{key}{i % 9}".encode(), b"x" * size)])
    log.clock.advance(1)  # so local.retention.ms=0 finds these segments expired


def _all_states(env, tp=TP):
    return {m.id: m.state for m in env.md.list_remote_log_segments(tp, include_superseded=True, states=list(S))}


# ---- copy ---------------------------------------------------------------------------------------

def test_copy_rolled_segments_in_order_exactly_once(env: TierEnv) -> None:
    log = env.create(local_retention_ms=-1)
    _fill(log)
    rolled = log.all_segments()[:-1]
    assert len(rolled) >= 3
    copied = env.rlm.copy_rolled_segments(TP)
    assert [m.start_offset for m in copied] == [s.base_offset for s in rolled]
    assert [m.end_offset for m in copied] == [s.read_next_offset() - 1 for s in rolled]
    assert all(m.state is S.COPY_SEGMENT_FINISHED and m.broker_id == 1 for m in copied)
    assert [m.segment_size_in_bytes for m in copied] == [s.size for s in rolled]
    assert all(dict(m.segment_leader_epochs) == {0: m.start_offset} for m in copied)
    # objects: log, offset index, time index, leader-epoch checkpoint (no aborted txn: no txn index)
    for m in copied:
        assert env.inner.exists(env.rsm.object_key(m))
        assert env.inner.get(env.rsm.object_key(m)) == (log.dir / f"{m.start_offset:020d}.log").read_bytes()
        assert env.inner.get(env.rsm.object_key(m, IndexType.LEADER_EPOCH)) == b"0\n1\n0 0\n"
        assert env.rsm.fetch_index(m, IndexType.TRANSACTION) == b""
    # bloom filters hold the segment's keys
    bf = KeyBloomFilter.from_bytes(env.md.get_bloom_filter(copied[0].remote_log_segment_id))
    assert bf.might_contain(b"k0") and bf.might_contain(b"k1")
    # the active segment is never copied, and nothing is copied twice
    assert env.rlm.copy_rolled_segments(TP) == []
    log.roll()
    again = env.rlm.copy_rolled_segments(TP)
    assert [m.start_offset for m in again] == [rolled[-1].read_next_offset()]
    assert env.rlm.stats().segments_copied == len(copied) + 1


def test_copy_waits_for_the_last_stable_offset(env: TierEnv) -> None:
    log = env.create(local_retention_ms=-1)
    log.append_records([RecordSpec(b"t", b"open")], producer_id=9, producer_epoch=0, base_sequence=0,
                       transactional=True)
    _fill(log, n=30)
    assert log.last_stable_offset == 0
    assert env.rlm.copy_rolled_segments(TP) == []
    log.append_marker(9, 0, ControlRecordType.COMMIT)
    assert [m.start_offset for m in env.rlm.copy_rolled_segments(TP)] == [s.base_offset for s in
                                                                          log.all_segments()[:-1]]


def test_copy_is_skipped_without_remote_storage(env: TierEnv) -> None:
    log = env.create(remote_storage_enable=False)
    _fill(log)
    assert env.rlm.copy_rolled_segments(TP) == [] and env.object_keys() == []
    assert env.rlm.apply_local_retention(TP) == []
    assert env.rlm.run_once() == {}


def test_copy_once_across_restarts(env: TierEnv) -> None:
    log = env.create(local_retention_ms=-1)
    _fill(log)
    first = env.rlm.copy_rolled_segments(TP)
    keys = env.object_keys()
    env.restart()
    assert env.rlm.copy_rolled_segments(TP) == []
    assert env.object_keys() == keys
    assert env.rlm.leader_epoch(TP) == 0
    assert [m.id for m in env.rlm.remote_segments(TP)] == [m.id for m in first]


class _Crash(BaseException):
    """A power cut: nothing after it runs in this process."""


def _crash_after_upload(env: TierEnv, monkeypatch: pytest.MonkeyPatch) -> None:
    real = env.rsm.copy_log_segment_data

    def upload_then_die(md: RemoteLogSegmentMetadata, data: LogSegmentData) -> None:
        real(md, data)
        raise _Crash()

    monkeypatch.setattr(env.rsm, "copy_log_segment_data", upload_then_die)


def test_crash_between_started_and_finished_is_recovered_and_copied_again(
        env: TierEnv, monkeypatch: pytest.MonkeyPatch) -> None:
    log = env.create()
    _fill(log)
    expected = local_records(log, READ_UNCOMMITTED)
    _crash_after_upload(env, monkeypatch)
    with pytest.raises(_Crash):
        env.rlm.tier(TP)
    (orphan,) = env.md.list_remote_log_segments(TP, states=[S.COPY_SEGMENT_STARTED])
    assert env.inner.exists(env.rsm.object_key(orphan))
    monkeypatch.undo()
    env.restart()
    # the orphan's segment is not covered: local retention keeps it (its copy never FINISHED)
    assert env.rlm.apply_local_retention(TP) == []
    assert env.rlm.recover_orphans(TP) == [orphan.id]
    assert _all_states(env)[orphan.id] is S.DELETE_SEGMENT_FINISHED
    assert env.object_keys() == []
    copied = env.rlm.copy_rolled_segments(TP)
    assert copied[0].start_offset == orphan.start_offset and copied[0].id != orphan.id
    assert env.rlm.apply_local_retention(TP) == [m.start_offset for m in copied]
    assert read_all(env.rlm, TP, READ_UNCOMMITTED) == expected


def test_orphan_without_recovery_is_deleted_by_run_once_after_the_grace_period(
        env: TierEnv, monkeypatch: pytest.MonkeyPatch) -> None:
    log = env.create()
    _fill(log)
    _crash_after_upload(env, monkeypatch)
    with pytest.raises(_Crash):
        env.rlm.copy_rolled_segments(TP)
    (orphan,) = env.md.list_remote_log_segments(TP, states=[S.COPY_SEGMENT_STARTED])
    monkeypatch.undo()
    env.restart()
    res = env.rlm.run_once()[TP]
    assert res.errors == [] and orphan.id not in res.deleted_remote  # still within its grace period
    assert res.copied and res.copied[0] == orphan.start_offset
    assert env.inner.exists(env.rsm.object_key(orphan))
    env.clock.advance(DEFAULT_ORPHAN_GRACE_MS + 1)
    res = env.rlm.run_once()[TP]
    assert res.deleted_remote == [orphan.id] and res.errors == []
    assert not any(orphan.id in k for k in env.object_keys())


# ---- leadership ---------------------------------------------------------------------------------

def test_become_leader_is_persisted_strictly_increasing_and_sets_the_local_epoch(env: TierEnv) -> None:
    log = env.create(local_retention_ms=-1)
    _fill(log, n=10)
    state = env.rlm.become_leader(TP, 3, env.broker_id)  # a node resumes only epochs registered to its id
    assert (state.leader_epoch, state.broker_id) == (3, env.broker_id)
    assert env.rlm.leader_epoch(TP) == 3 and log.leader_epoch == 3
    assert env.md.leader_epochs(TP) == [(3, 10)]
    with pytest.raises(FencedLeaderEpochError):
        env.rlm.become_leader(TP, 3, 8)
    _fill(log, n=30)
    copied = env.rlm.copy_rolled_segments(TP)
    assert any(3 in m.segment_leader_epochs for m in copied)
    env.restart()
    assert env.rlm.leader_epoch(TP) == 3


def test_first_use_registers_epoch_zero_for_this_broker(env: TierEnv) -> None:
    env.create()
    assert env.md.leader_state(TP) is None
    assert env.rlm.leader_epoch(TP) == 0
    state = env.md.leader_state(TP)
    assert (state.leader_epoch, state.broker_id) == (0, 1)


# ---- local retention ----------------------------------------------------------------------------

def test_local_retention_deletes_only_copied_segments_and_never_the_active_one(env: TierEnv) -> None:
    log = env.create(local_retention_ms=1000)
    _fill(log)
    bases = [s.base_offset for s in log.all_segments()]
    env.clock.advance(5000)
    assert env.rlm.apply_local_retention(TP) == []  # nothing copied yet
    copied = env.rlm.copy_rolled_segments(TP)
    # a copied segment still within local.retention.ms stays
    assert env.rlm.apply_local_retention(TP, now=env.clock.milliseconds() - 4500) == []
    deleted = env.rlm.apply_local_retention(TP)
    assert deleted == [m.start_offset for m in copied] == bases[:-1]
    assert [s.base_offset for s in log.all_segments()] == bases[-1:]
    assert env.rlm.apply_local_retention(TP) == []


def test_local_retention_by_bytes_keeps_the_newest(env: TierEnv) -> None:
    log = env.create(local_retention_ms=-1, local_retention_bytes=3000)
    _fill(log)
    env.rlm.copy_rolled_segments(TP)
    deleted = env.rlm.apply_local_retention(TP)
    # whole segments only: what remains is over the limit by less than its oldest segment
    assert deleted and log.size_in_bytes() - log.all_segments()[0].size < 3000
    assert deleted == [s for s in deleted if s < log.log_start_offset]


def test_local_retention_stops_at_the_first_segment_not_copied(env: TierEnv) -> None:
    log = env.create(local_retention_ms=0)
    _fill(log)
    segs = log.all_segments()
    # make only the first two segments remote by copying, then remove the later copies' metadata
    copied = env.rlm.copy_rolled_segments(TP)
    for m in copied[2:]:
        env.rlm._delete_remote(m, 0)
    assert env.rlm.apply_local_retention(TP) == [segs[0].base_offset, segs[1].base_offset]


@pytest.mark.parametrize("policy", ["compact", "compact,delete"])
def test_local_retention_of_compacted_topics_and_the_cleaner_checkpoint(env: TierEnv, policy: str) -> None:
    log = env.create(cleanup_policy=policy, local_retention_ms=0)
    _fill(log)
    segs = log.all_segments()
    env.rlm.copy_rolled_segments(TP)
    if policy == "compact,delete":
        # compact,delete: local segments go like an append-only log's, whatever the cleaner did
        assert env.rlm.apply_local_retention(TP) == [s.base_offset for s in segs[:-1]]
        return
    assert env.rlm.apply_local_retention(TP) == []  # never cleaned: no checkpoint
    # checkpoint inside the second segment: only the first lies entirely below it
    env.checkpoints[TP] = segs[1].base_offset + 1
    assert env.rlm.apply_local_retention(TP) == [segs[0].base_offset]
    env.checkpoints[TP] = segs[2].base_offset  # exactly the end of the second segment
    assert env.rlm.apply_local_retention(TP) == [segs[1].base_offset]
    env.checkpoints[TP] = log.log_end_offset
    assert env.rlm.apply_local_retention(TP) == [s.base_offset for s in segs[2:-1]]


# ---- remote retention ---------------------------------------------------------------------------

def test_remote_retention_by_time_deletes_remote_and_local_copies(env: TierEnv) -> None:
    log = env.create(retention_ms=10_000, local_retention_ms=-1)
    _fill(log, n=20)
    env.clock.advance(20_000)
    _fill(log, n=20, key="new")
    log.roll()
    expected = local_records(log, READ_UNCOMMITTED)
    env.rlm.copy_rolled_segments(TP)
    old = [m for m in env.rlm.remote_segments(TP) if env.clock.milliseconds() - m.max_timestamp_ms > 10_000]
    assert old
    deleted = env.rlm.apply_remote_retention(TP)
    assert deleted == [m.id for m in old]
    assert all(_all_states(env)[m.id] is S.DELETE_SEGMENT_FINISHED for m in old)
    assert not any(m.id in k for m in old for k in env.object_keys())
    start = env.rlm.log_start_offset(TP)
    assert start == old[-1].end_offset + 1 == log.log_start_offset
    assert read_all(env.rlm, TP, READ_UNCOMMITTED, start=start) == [r for r in expected if r[0] >= start]
    with pytest.raises(OffsetOutOfRangeError, match=rf"valid offsets are \[{start}, 40\]"):
        env.rlm.read(TP, start - 1)


def test_remote_retention_truncates_the_leader_epoch_history_from_the_new_start(env: TierEnv) -> None:
    """Kafka's updateLogStartOffsetFromRemoteTier: once remote retention moves a tiered partition's log start, the
    epochs wholly below it go and the one holding it starts there (truncateFromStart), on disk; OffsetForLeaderEpoch
    of a deleted epoch then answers the log start, not an offset nobody can read any more."""
    from log.offset_lookup import end_offset_for_epoch

    log = env.create(retention_ms=10_000, local_retention_ms=-1)
    for epoch in (0, 1):  # epochs 0 and 1: old records only
        log.assign_epoch(epoch)
        _fill(log, n=10)
    env.clock.advance(20_000)
    log.assign_epoch(3)
    _fill(log, n=20, key="new")
    log.roll()
    env.rlm.copy_rolled_segments(TP)

    def history() -> list[tuple[int, int]]:
        return [(e.epoch, e.start_offset) for e in env.lm.get_log(TP).epoch_entries]

    assert history() == [(0, 0), (1, 10), (3, 20)]
    assert env.rlm.apply_remote_retention(TP)
    start = env.rlm.log_start_offset(TP)
    assert 0 < start <= 20
    holding = 1 if start >= 10 else 0
    assert history() == ([(holding, start), (3, 20)] if start < 20 else [(3, 20)])
    assert end_offset_for_epoch(log.epoch_entries, 0, log.log_end_offset) == ((0, start) if start >= 10 else (0, 10))
    env.restart()  # on disk
    assert history() == ([(holding, start), (3, 20)] if start < 20 else [(3, 20)])


def test_remote_retention_by_bytes_and_not_for_compact_only(env: TierEnv) -> None:
    log = env.create(retention_bytes=3000, local_retention_ms=0)
    _fill(log)
    env.rlm.tier(TP)
    before = env.rlm.remote_log_size(TP)
    deleted = env.rlm.apply_remote_retention(TP)
    assert deleted and env.rlm.remote_log_size(TP) <= 3000 < before
    assert env.rlm.remote_log_size(TP) == sum(m.segment_size_in_bytes for m in env.rlm.remote_segments(TP))

    other = TopicPartition("compacted", 0)
    log2 = env.create(other, cleanup_policy="compact", retention_bytes=10, retention_ms=0)
    _fill(log2)
    env.rlm.copy_rolled_segments(other)
    assert env.rlm.apply_remote_retention(other) == []


# ---- deferred deletion --------------------------------------------------------------------------

def _supersede(env: TierEnv, rlm, olds: list[RemoteLogSegmentMetadata], epoch: int) -> RemoteLogSegmentMetadata:
    """What the tiered cleaner does: upload a rewritten segment under a new id and publish it
    replacing ``olds`` (here the "rewrite" is the first old segment's bytes, offsets widened)."""
    log = env.lm.get_log(TP)
    first = olds[0]
    seg_dir = env.root / "rewrite"
    seg_dir.mkdir(exist_ok=True)
    path = seg_dir / "seg.log"
    path.write_bytes(env.rsm.fetch_log_segment(first, 0))
    idx = seg_dir / "seg.index"
    idx.write_bytes(env.rsm.fetch_index(first, IndexType.OFFSET))
    tidx = seg_dir / "seg.timeindex"
    tidx.write_bytes(env.rsm.fetch_index(first, IndexType.TIMESTAMP))
    new = RemoteLogSegmentMetadata(RemoteLogSegmentId.generate(TP), first.start_offset, olds[-1].end_offset,
                                   first.max_timestamp_ms, 1, env.clock.milliseconds(), path.stat().st_size,
                                   {0: first.start_offset})
    env.md.add_remote_log_segment_metadata(new, leader_epoch=epoch)
    env.rsm.copy_log_segment_data(new, LogSegmentData(path, idx, tidx, None, b"0\n0\n"))
    env.md.publish_compaction(TP, leader_epoch=epoch, new_segment_ids=[new.remote_log_segment_id],
                              replaced_segment_ids=[m.remote_log_segment_id for m in olds],
                              cleaner_offsets={epoch: olds[-1].end_offset + 1})
    assert log is not None
    return new


def test_deferred_delete_removes_superseded_segments_after_validation(env: TierEnv) -> None:
    log = env.create(local_retention_ms=0)
    _fill(log)
    env.rlm.tier(TP)
    remote = env.rlm.remote_segments(TP)
    new = _supersede(env, env.rlm, remote[:2], 0)
    # readers switch at once; the old objects stay until the retention thread deletes them
    assert [m.id for m in env.rlm.remote_segments(TP)][:1] == [new.id]
    assert all(env.inner.exists(env.rsm.object_key(m)) for m in remote[:2])
    assert env.rlm.delete_unreferenced(TP) == [m.id for m in remote[:2]]
    assert not any(m.id in k for m in remote[:2] for k in env.object_keys())
    assert env.inner.exists(env.rsm.object_key(new))
    assert env.rlm.delete_unreferenced(TP) == []
    assert env.md.get_bloom_filter(remote[0].remote_log_segment_id) is None


def test_zombie_leader_cannot_delete_and_the_new_leader_can(env: TierEnv) -> None:
    log = env.create(local_retention_ms=0)
    _fill(log)
    env.rlm.tier(TP)
    remote = env.rlm.remote_segments(TP)
    assert env.rlm.leader_epoch(TP) == 0
    _supersede(env, env.rlm, remote[:1], 0)
    new_leader = env.make_rlm(2, name="broker")
    new_leader.become_leader(TP, 1, 2)
    with pytest.raises(FencedLeaderEpochError, match="fenced"):
        env.rlm.delete_unreferenced(TP)  # the zombie still acts at epoch 0
    assert env.inner.exists(env.rsm.object_key(remote[0]))
    assert _all_states(env)[remote[0].id] is S.COPY_SEGMENT_FINISHED
    assert env.rlm.stats().fenced_operations == 1
    # its copies are fenced too, and its abandoned upload is left for the new leader
    _fill(log, n=20)
    with pytest.raises(FencedLeaderEpochError):
        env.rlm.copy_rolled_segments(TP)
    assert new_leader.delete_unreferenced(TP) == [remote[0].id]
    assert not env.inner.exists(env.rsm.object_key(remote[0]))
    assert new_leader.copy_rolled_segments(TP)
    new_leader.close()


def test_run_once_keeps_going_when_one_partition_fails(env: TierEnv) -> None:
    bad, good = TopicPartition("bad", 0), TopicPartition("good", 0)
    for tp in (bad, good):
        _fill(env.create(tp))
    env.store.inject("put", "error", key_contains="bad-0/")
    res = env.rlm.run_once()
    assert res[bad].errors and res[bad].copied == [] and res[bad].deleted_local == []
    assert res[good].errors == [] and res[good].copied and res[good].deleted_local == res[good].copied
    env.store.clear()
    res = env.rlm.run_once()
    assert res[bad].errors == [] and res[bad].copied


def test_segments_view_and_sizes(env: TierEnv) -> None:
    log = env.create(local_retention_ms=-1)
    produce(log, batches=40, clock=env.clock)
    log.roll()
    _fill(log, n=3)
    expected = local_records(log, READ_COMMITTED)
    env.rlm.copy_rolled_segments(TP)
    first = log.all_segments()[0]
    log.delete_segments([first])
    view = env.rlm.segments_view(TP)
    tiers = [v.tier for v in view]
    assert tiers[0] == "remote" and tiers[-1] == "local" and set(tiers[1:-1]) == {"both"}
    assert all(v.segment_id and v.state == "COPY_SEGMENT_FINISHED" for v in view[:-1])
    assert [v.base_offset for v in view] == sorted(v.base_offset for v in view)
    assert env.rlm.log_start_offset(TP) == 0 < log.log_start_offset
    assert env.rlm.remote_log_size(TP) == sum(v.size_bytes for v in view[:-1])
    assert read_all(env.rlm, TP, READ_COMMITTED) == expected


def test_local_records_helper_matches_rlm_read_before_tiering(env: TierEnv) -> None:
    log = env.create(local_retention_ms=-1)
    produce(log, batches=30, clock=env.clock)
    for iso in (READ_UNCOMMITTED, READ_COMMITTED):
        assert read_all(env.rlm, TP, iso) == local_records(log, iso)


# ---- DeleteRecords on a tiered partition ---------------------------------------------------------

def test_delete_records_moves_the_start_over_both_tiers_and_the_next_leader_starts_there(
        env: TierEnv, tmp_path: Path) -> None:
    from log.log_manager import LogManager
    from metadata.errors import NotLeaderForPartitionError
    from remote.log_manager import RemoteLogManager

    log = env.create(local_retention_ms=-1)
    _fill(log)
    log.roll()
    env.rlm.copy_rolled_segments(TP)
    expected = local_records(log, READ_UNCOMMITTED)
    remote = env.rlm.remote_segments(TP)
    assert len(remote) >= 3
    target = remote[1].start_offset + 1
    assert env.rlm.delete_records(TP, target) == target
    assert env.md.log_start_offset(TP) == target == env.rlm.log_start_offset(TP)
    with pytest.raises(OffsetOutOfRangeError, match=rf"valid offsets are \[{target}, 40\]"):
        env.rlm.read(TP, target - 1)
    assert read_all(env.rlm, TP, READ_UNCOMMITTED, start=target) == [r for r in expected if r[0] >= target]
    with pytest.raises(OffsetOutOfRangeError):
        env.rlm.delete_records(TP, 41)
    assert env.rlm.delete_records(TP, 2) == target  # never backwards
    # retention: the remote segment wholly below goes (objects too), the one holding the start stays;
    # so do the local copies below it
    assert env.rlm.apply_remote_retention(TP) == [remote[0].id]
    assert not any(remote[0].id in k for k in env.object_keys())
    assert env.inner.exists(env.rsm.object_key(remote[1]))
    env.rlm.apply_local_retention(TP)
    assert all(s.read_next_offset() > target or s is log.all_segments()[-1] for s in log.all_segments())
    assert env.rlm.log_start_offset(TP) == target

    # another node takes the lead: it starts where DeleteRecords left the partition
    lm2 = LogManager(tmp_path / "data-b", clock=env.clock)
    lm2.create_topic(TP.topic, 1, dict(log.config.overrides))
    rlm2 = RemoteLogManager(lm2, env.md, env.rsm, broker_id=2, clock=env.clock, cache_dir=tmp_path / "cache-b",
                            cache_bytes=1 << 20, cache_chunk_bytes=4096)
    try:
        rlm2.become_leader(TP, 1, 2)
        assert lm2.get_log(TP).deleted_records_offset == target
        assert rlm2.log_start_offset(TP) == target
        with pytest.raises(OffsetOutOfRangeError):
            rlm2.read(TP, target - 1)
        # the old leader, a zombie now, moves nothing
        with pytest.raises(NotLeaderForPartitionError):
            env.rlm.delete_records(TP, target + 5)
        assert env.md.log_start_offset(TP) == target and log.deleted_records_offset == target
        assert rlm2.delete_records(TP, target + 5) == target + 5 == env.md.log_start_offset(TP)
    finally:
        rlm2.close()
        lm2.close()
