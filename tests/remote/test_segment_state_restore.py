"""KIP-405 LogSegmentData: producer snapshot + leader-epoch checkpoint with every remote
segment, and a node that lost its data dir restoring producer state and epochs from them
(a node that loses its data dir must not forget every producer)."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from log.clock import MockClock
from log.errors import InvalidProducerEpochError, OutOfOrderSequenceError
from log.fetch import READ_COMMITTED, READ_UNCOMMITTED
from log.local_log import LocalLog, RecordSpec
from log.producer_snapshot import decode_snapshot, encode_snapshot
from log.producer_state import ProducerStateEntry
from log.record import ControlRecordType
from log.types import EpochEntry
from remote.segment_state import parse_epoch_checkpoint, producer_snapshot_for, render_epoch_checkpoint
from remote.storage_manager import IndexType
from tests.remote.tiering import TP, TierEnv, read_all
from tests.tiered.conftest import TP as TTP
from tests.tiered.conftest import World

PID, PEPOCH = 4242, 3


def _rec(i: int) -> RecordSpec:
    return RecordSpec(f"k{i % 7}".encode(), f"value-{i}".encode() * 8)


def _workload(env: TierEnv, log: LocalLog) -> tuple[list[RecordSpec], int]:
    """Idempotent producer PID over two leader epochs, plus a committed and an aborted
    transaction; returns (the last idempotent batch, its base sequence)."""
    env.rlm.become_leader(TP, 1, env.broker_id)
    seq = 0
    for i in range(20):
        log.append_records([_rec(i)], producer_id=PID, producer_epoch=PEPOCH, base_sequence=seq)
        seq += 1
    env.rlm.become_leader(TP, 2, env.broker_id)
    log.append_records([_rec(100)], producer_id=77, producer_epoch=0, base_sequence=0, transactional=True)
    log.append_marker(77, 0, ControlRecordType.COMMIT)
    log.append_records([_rec(101)], producer_id=78, producer_epoch=5, base_sequence=0, transactional=True)
    log.append_marker(78, 5, ControlRecordType.ABORT)
    for i in range(20, 35):
        log.append_records([_rec(i)], producer_id=PID, producer_epoch=PEPOCH, base_sequence=seq)
        seq += 1
    last = [_rec(900), _rec(901)]
    log.append_records(last, producer_id=PID, producer_epoch=PEPOCH, base_sequence=seq)
    log.roll()
    return last, seq


def _fields(e: ProducerStateEntry) -> tuple:
    return (e.producer_id, e.producer_epoch, e.first_sequence, e.last_sequence, e.first_data_offset,
            e.last_data_offset, e.last_timestamp, e.current_txn_first_offset)


def _lose_data_dir(env: TierEnv) -> None:
    env.close()
    for d in ("data", f"cache-{env.broker_id}"):
        shutil.rmtree(env.root / d, ignore_errors=True)
    env._open()


@pytest.mark.parametrize("how", ["open", "become_leader"])
def test_a_node_that_lost_its_data_dir_restores_producers_and_epochs_from_the_remote_tier(
        tmp_path: Path, clock: MockClock, how: str) -> None:
    env = TierEnv(tmp_path, clock)
    log = env.create()
    last, last_seq = _workload(env, log)
    end = log.log_end_offset
    producers = {pid: _fields(e) for pid, e in log.producer_state.active_producers().items()}
    epochs = list(log.epoch_entries)
    assert {PID, 77, 78} <= set(producers) and [e.epoch for e in epochs] == [1, 2]
    expected = {iso: read_all(env.rlm, TP, iso) for iso in (READ_COMMITTED, READ_UNCOMMITTED)}
    clock.advance(1)  # local.retention.ms=0 expires what is strictly older than now
    res = env.rlm.tier(TP)
    assert res.copied and res.deleted_local
    assert log.log_start_offset == end  # every record lives only in the remote tier now

    _lose_data_dir(env)
    log2 = env.create()  # the new node is given the topic; its local log is empty
    assert log2.log_end_offset == 0 and not log2.producer_state.active_producers()
    if how == "open":
        assert env.rlm.leader_epoch(TP) == 2
    else:
        env.rlm.become_leader(TP, 3, env.broker_id)

    assert (log2.log_start_offset, log2.log_end_offset) == (end, end)
    assert {pid: _fields(e) for pid, e in log2.producer_state.active_producers().items()} == producers
    assert log2.epoch_entries[:2] == epochs
    assert log2.epoch_entries[2:] == ([] if how == "open" else [EpochEntry(3, end)])
    for iso, want in expected.items():
        assert read_all(env.rlm, TP, iso) == want  # the remote data reads as before

    # the retried last batch is a duplicate, as on the original node: nothing appended
    dup = log2.append_records(last, producer_id=PID, producer_epoch=PEPOCH, base_sequence=last_seq)
    assert dup.duplicate and (dup.base_offset, dup.last_offset) == (end - 2, end - 1)
    assert log2.log_end_offset == end
    with pytest.raises(OutOfOrderSequenceError):
        log2.append_records([_rec(1)], producer_id=PID, producer_epoch=PEPOCH, base_sequence=last_seq + 5)
    with pytest.raises(InvalidProducerEpochError):
        log2.append_records([_rec(1)], producer_id=78, producer_epoch=4, base_sequence=0)
    nxt = log2.append_records([_rec(2)], producer_id=PID, producer_epoch=PEPOCH, base_sequence=last_seq + 2)
    assert not nxt.duplicate and nxt.base_offset == end

    # and it survives a plain restart (the restored snapshot is on disk)
    env.restart()
    log3 = env.lm.get_log(TP)
    assert log3.producer_state.active_producers()[PID].last_sequence == last_seq + 2
    env.close()


def test_every_copied_segment_carries_its_producer_snapshot_and_epoch_checkpoint(
        tmp_path: Path, clock: MockClock) -> None:
    env = TierEnv(tmp_path, clock)
    log = env.create(local_retention_ms=-1)
    _workload(env, log)
    with log.lock:
        want = {s.read_next_offset(): producer_snapshot_for(log, s.read_next_offset()) for s in log.all_segments()}
    copied = env.rlm.copy_rolled_segments(TP)
    assert len(copied) > 2
    for md in copied:
        snap = env.rsm.fetch_index(md, IndexType.PRODUCER_SNAPSHOT)
        assert snap == want[md.end_offset + 1]
        entries = parse_epoch_checkpoint(env.rsm.fetch_index(md, IndexType.LEADER_EPOCH))
        assert entries == [e for e in log.epoch_entries if e.start_offset <= md.end_offset]
    # the snapshot of the last segment is the state after it: every producer, newest sequences
    last = decode_snapshot(env.rsm.fetch_index(copied[-1], IndexType.PRODUCER_SNAPSHOT))
    assert {pid: _fields(e) for pid, e in last.items()} == {
        pid: _fields(e) for pid, e in log.producer_state.active_producers().items()}
    env.close()


def test_a_missing_roll_snapshot_is_rebuilt_from_the_log(tmp_path: Path, clock: MockClock) -> None:
    env = TierEnv(tmp_path, clock)
    log = env.create(local_retention_ms=-1)
    _workload(env, log)
    seg = log.all_segments()[1]
    nxt = seg.read_next_offset()
    with log.lock:
        original = producer_snapshot_for(log, nxt)
        (log.dir / f"{nxt:020d}.snapshot").unlink()
        rebuilt = producer_snapshot_for(log, nxt)
    assert rebuilt is not None and decode_snapshot(rebuilt) == decode_snapshot(original)
    env.close()


def test_epoch_checkpoint_round_trip_and_garbage() -> None:
    entries = [EpochEntry(0, 0), EpochEntry(4, 120)]
    assert parse_epoch_checkpoint(render_epoch_checkpoint(entries)) == entries
    from log.errors import CorruptRecordError

    for bad in (b"", b"1\n0\n", b"0\n2\n0 0\n", b"0\nx\n", b"\xff\xfe"):
        with pytest.raises(CorruptRecordError):
            parse_epoch_checkpoint(bad)
    assert encode_snapshot({})  # an empty producer set is still a valid snapshot


def test_a_tiered_rewrite_carries_the_state_and_a_new_node_restores_from_it(tmp_path: Path, clock: MockClock) -> None:
    world = World(tmp_path, clock, (f"file://{tmp_path / 'objects'}", {}), f"sqlite:///{tmp_path / 'md.db'}")
    seq = 0
    for _round in range(4):
        for i in range(40):
            world.log.append_records([RecordSpec(f"k{i % 5}".encode(), b"v" * 40,
                                                 timestamp=clock.milliseconds())],
                                     producer_id=PID, producer_epoch=PEPOCH, base_sequence=seq)
            seq += 1
        world.roll_and_tier()
    before = {m.id: m for m in world.rlmm.list_remote_log_segments(TTP)}
    last_before = max(before.values(), key=lambda m: m.end_offset)
    want = world.rsm.fetch_segment_state(last_before)
    assert want.producer_snapshot is not None
    stats = world.clean()
    assert stats.segments_cleaned
    after = world.rlmm.list_remote_log_segments(TTP)
    rewritten = [m for m in after if m.id not in before]
    assert rewritten
    newest = max(after, key=lambda m: m.end_offset)
    assert newest.id not in before  # the newest remote segment is a rewrite
    got = world.rsm.fetch_segment_state(newest)
    assert got == want
    end = world.log.log_end_offset
    world.close()

    shutil.rmtree(tmp_path / "data-0")
    shutil.rmtree(tmp_path / "cache-0", ignore_errors=True)
    node = World(tmp_path, clock, (f"file://{tmp_path / 'objects'}", {}), f"sqlite:///{tmp_path / 'md.db'}")
    node.rlm.leader_state(TTP)
    assert node.log.log_end_offset == end
    assert node.log.producer_state.active_producers()[PID].last_sequence == seq - 1
    dup = node.log.append_records([RecordSpec(b"k4", b"v" * 40, timestamp=clock.milliseconds())],
                                  producer_id=PID, producer_epoch=PEPOCH, base_sequence=seq - 1)
    assert dup.duplicate and node.log.log_end_offset == end
    node.close()


def test_a_spark_rewrite_task_carries_the_state_of_the_segments_it_replaces(tmp_path: Path) -> None:
    import uuid

    from cleaner.spark.tasks import RewriteTask, SegmentRef, StoreSpec, TxnState, run_rewrite
    from metadata.types import RemoteLogSegmentId, RemoteLogSegmentMetadata
    from tests.spark.conftest import make_world, partitions_of

    w = make_world(tmp_path / "w", (f"file://{tmp_path / 'obj'}", {}), config={"local.retention.ms": -1})
    try:
        tp = partitions_of(w)[0]
        log = w.lm.get_log(tp)
        for seq in range(40):
            log.append_records([RecordSpec(f"k{seq % 3}".encode(), b"v" * 30)], producer_id=PID,
                               producer_epoch=PEPOCH, base_sequence=seq)
            if seq % 20 == 19:
                log.roll()
        w.clock.advance(1)
        w.rlm.tier(tp)
        sources = w.rlmm.list_remote_log_segments(tp)
        assert len(sources) >= 2
        want = w.rsm.fetch_segment_state(sources[-1])
        assert want.producer_snapshot is not None
        task = RewriteTask(0, StoreSpec.of(w.store.url), uuid.uuid4().hex, tuple(SegmentRef.of(m) for m in sources),
                           tuple(() for _ in sources), now_ms=w.clock.milliseconds(), delete_retention_ms=1000,
                           upper_bound_of_round=sources[-1].end_offset + 1, latest_offset=sources[-1].end_offset,
                           active_producers=(), txn_state=TxnState(), fpp=0.01, index_interval_bytes=4096,
                           io_buffer_size=65536)
        res = run_rewrite(task, [], temp_dir=tmp_path)
        new = RemoteLogSegmentMetadata(RemoteLogSegmentId(tp, res.new_segment_id), res.start_offset,
                                       res.end_offset, res.max_timestamp_ms, 0, 0, res.size, {0: res.start_offset})
        assert w.rsm.fetch_segment_state(new) == want
    finally:
        w.close()


def test_a_stale_data_dir_behind_the_remote_tier_is_truncated_and_restored(tmp_path: Path, clock: MockClock) -> None:
    """A data dir put back from an old backup: its log ends below what the remote tier holds;
    appending there would reuse offsets the remote tier already has."""
    env = TierEnv(tmp_path, clock)
    log = env.create(local_retention_ms=-1)
    _workload(env, log)
    env.rlm.tier(TP)
    env.close()
    shutil.copytree(tmp_path / "data", tmp_path / "backup")
    env._open()
    log = env.lm.get_log(TP)
    stale_end = log.log_end_offset
    seq = log.producer_state.active_producers()[PID].last_sequence + 1
    for i in range(30):
        log.append_records([_rec(i)], producer_id=PID, producer_epoch=PEPOCH, base_sequence=seq + i)
    log.roll()
    env.rlm.tier(TP)
    end = log.log_end_offset
    assert end > stale_end
    env.close()
    shutil.rmtree(tmp_path / "data")
    shutil.copytree(tmp_path / "backup", tmp_path / "data")
    shutil.rmtree(tmp_path / f"cache-{env.broker_id}", ignore_errors=True)

    env._open()
    log = env.lm.get_log(TP)
    assert log.log_end_offset == stale_end  # what the backup holds
    env.rlm.leader_state(TP)
    assert (log.log_start_offset, log.log_end_offset) == (end, end)
    assert log.producer_state.active_producers()[PID].last_sequence == seq + 29
    r = log.append_records([_rec(5)], producer_id=PID, producer_epoch=PEPOCH, base_sequence=seq + 30)
    assert r.base_offset == end and not r.duplicate
    offsets = [rec[0] for rec in read_all(env.rlm, TP, READ_UNCOMMITTED)]
    assert offsets == sorted(set(offsets)) and offsets[0] == 0 and offsets[-1] == end  # no offset reused
    env.close()


@pytest.mark.parametrize("damage", ["snapshot", "checkpoint", "two newest"])
def test_a_damaged_remote_snapshot_is_rebuilt_from_older_segments(tmp_path: Path, clock: MockClock,
                                                                   damage: str) -> None:
    """Regression: a node restoring from the remote tier refused (CorruptRecordError, the
    partition unusable) when the newest remote segment's producer snapshot or epoch checkpoint
    was damaged. It now takes the newest intact state and replays the segments after it, as
    Kafka rebuilds producer state from the log, and ends with the same producers and epochs."""
    env = TierEnv(tmp_path, clock)
    log = env.create()
    last, last_seq = _workload(env, log)
    end = log.log_end_offset
    producers = {pid: _fields(e) for pid, e in log.producer_state.active_producers().items()}
    epochs = list(log.epoch_entries)
    clock.advance(1)
    env.rlm.tier(TP)
    remote = sorted(env.md.list_remote_log_segments(TP), key=lambda m: m.end_offset)
    assert len(remote) >= 3
    damaged = remote[-2:] if damage == "two newest" else remote[-1:]
    for md in damaged:
        for index in ((IndexType.LEADER_EPOCH,) if damage == "checkpoint" else (IndexType.PRODUCER_SNAPSHOT,)):
            env.inner.put(env.rsm.object_key(md, index), b"\x00garbage\xff" * 3)

    _lose_data_dir(env)
    log2 = env.create()
    assert env.rlm.leader_epoch(TP) == 2
    assert (log2.log_start_offset, log2.log_end_offset) == (end, end)
    assert {pid: _fields(e) for pid, e in log2.producer_state.active_producers().items()} == producers
    assert log2.epoch_entries == epochs
    dup = log2.append_records(last, producer_id=PID, producer_epoch=PEPOCH, base_sequence=last_seq)
    assert dup.duplicate and (dup.base_offset, dup.last_offset) == (end - 2, end - 1)
    env.close()
