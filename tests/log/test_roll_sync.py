"""A roll syncs nothing under the log's lock: the rolled segment is synced in the background, and recovery from a crash
before that sync cuts the rolled segment's torn tail (Kafka's flush at roll and its recovery point)."""

from __future__ import annotations

import os
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from log.checkpoint import RECOVERY_POINT_CHECKPOINT, RecoveryPointCheckpointFile
from log.clock import MockClock
from log.config import LogConfig
from log.errors import CorruptRecordError
from log.fetch import records_from_batches
from log.flush import sync_log
from log.local_log import CLEAN_SHUTDOWN_FILE, LocalLog, RecordSpec
from log.producer_snapshot import list_snapshots
from log.record import RecordBatchBuilder
from log.scheduler import Scheduler


@pytest.fixture
def scheduler(clock: MockClock) -> Iterator[Scheduler]:
    s = Scheduler(clock)
    yield s
    s.shutdown()


@pytest.fixture
def stopped_scheduler(clock: MockClock) -> Scheduler:
    """A scheduler that takes no task: the background sync of a roll never runs (a crash comes first)."""
    s = Scheduler(clock)
    s.shutdown()
    return s


def _open(path: Path, clock: MockClock, scheduler: Scheduler | None) -> LocalLog:
    return LocalLog(path, LogConfig.from_dict({"segment.bytes": 100_000}), clock=clock, scheduler=scheduler)


def _append(log: LocalLog, start: int, n: int) -> None:
    for i in range(start, start + n):
        log.append_records([RecordSpec(f"k{i}".encode(), f"v{i}".encode() * 20)])


def _idempotent(log: LocalLog, seq: int, n: int) -> None:
    b = RecordBatchBuilder(0, producer_id=7, producer_epoch=0, base_sequence=seq)
    for i in range(n):
        b.append(i, log.clock.milliseconds(), b"p%d" % (seq + i), b"x" * 50)
    log.append_batches(b.build())


def _offsets(log: LocalLog) -> list[int]:
    batches = log.read(log.log_start_offset, max_bytes=1 << 30)
    return [r.offset for r in records_from_batches(batches, log.log_start_offset, max_records=10**9).records]


def _crash(log: LocalLog) -> None:
    """Drop the log as a process that died would: files closed, no clean-shutdown marker, nothing synced."""
    for seg in log.all_segments():
        seg.close()
    (log.dir / CLEAN_SHUTDOWN_FILE).unlink(missing_ok=True)


def _stored_point(log_dir: Path) -> int | None:
    return RecoveryPointCheckpointFile(log_dir / RECOVERY_POINT_CHECKPOINT).read_offset()


def test_a_roll_syncs_nothing_and_its_background_sync_moves_the_recovery_point(
        tmp_path: Path, clock: MockClock, scheduler: Scheduler, monkeypatch: pytest.MonkeyPatch) -> None:
    log = _open(tmp_path / "t-0", clock, scheduler)
    _append(log, 0, 10)
    log.roll()  # the first roll stores the recovery point before anything is left unsynced
    assert _stored_point(log.dir) == 0
    _append(log, 10, 10)
    me = threading.get_ident()
    synced_here: list[int] = []
    real_fsync = os.fsync

    def fsync(fd: int) -> None:
        if threading.get_ident() == me:
            synced_here.append(fd)
        real_fsync(fd)

    monkeypatch.setattr(os, "fsync", fsync)
    rolled = log.active_segment
    log.roll()
    assert synced_here == []  # the appending thread synced nothing (it held the log's lock)
    monkeypatch.setattr(os, "fsync", real_fsync)
    log.sync_rolled()  # waits for the scheduler's sync, or does it
    assert log.recovery_point == log.active_segment.base_offset == 20
    assert _stored_point(log.dir) == 20
    assert rolled.base_offset == 10 and not log._unsynced_rolls
    log.close()


def test_without_a_scheduler_a_roll_syncs_at_once(tmp_path: Path, clock: MockClock) -> None:
    log = _open(tmp_path / "t-0", clock, None)
    _append(log, 0, 5)
    log.roll()
    assert not log._unsynced_rolls and log.recovery_point == 5
    assert _stored_point(log.dir) is None  # a data dir from before keeps reading as "every rolled segment synced"
    log.close()


def test_a_crash_before_the_rolls_sync_cuts_the_torn_rolled_segment_and_removes_what_follows(
        tmp_path: Path, clock: MockClock, stopped_scheduler: Scheduler) -> None:
    path = tmp_path / "t-0"
    log = _open(path, clock, stopped_scheduler)
    _idempotent(log, 0, 5)
    log.roll()  # the recovery point stored now is 0: nothing has been synced
    _idempotent(log, 5, 5)
    _idempotent(log, 10, 5)
    torn = log.active_segment
    log.roll()  # 5..14 rolled, never synced
    _idempotent(log, 15, 5)
    log.assign_epoch(0, 0)
    log.assign_epoch(3, 15)
    assert [s.base_offset for s in log.all_segments()] == [0, 5, 15]
    assert _stored_point(path) == 0
    _crash(log)
    with open(torn.log_path, "r+b") as f:  # the power went before the last batch of 10..14 was written back
        f.truncate(torn.log_path.stat().st_size - 30)
    log2 = _open(path, clock, None)
    assert [s.base_offset for s in log2.all_segments()] == [0, 5]
    assert not (path / "00000000000000000015.log").exists()
    assert log2.log_end_offset == 10 and _offsets(log2) == list(range(10))
    assert [(e.epoch, e.start_offset) for e in log2.epochs.entries] == [(0, 0)]  # epoch 3 began in what was cut
    assert all(off <= 10 for off, _ in list_snapshots(path))
    # the producer state is the one after offset 9: its next sequence is 10, and 15 is out of order
    assert log2.producer_state.producers[7].last_sequence == 9
    _idempotent(log2, 10, 5)
    assert log2.log_end_offset == 15
    log2.close()


def test_a_rolled_segment_below_the_recovery_point_that_lost_data_is_still_refused(
        tmp_path: Path, clock: MockClock, scheduler: Scheduler) -> None:
    path = tmp_path / "t-0"
    log = _open(path, clock, scheduler)
    _append(log, 0, 10)
    first = log.active_segment
    log.roll()
    _append(log, 10, 5)
    log.sync_rolled()
    assert _stored_point(path) == 10
    _crash(log)
    with open(first.log_path, "r+b") as f:  # it was on disk: losing its tail now is damage, not a crash's tear
        f.truncate(first.log_path.stat().st_size - 30)
    with pytest.raises(CorruptRecordError, match="rolled segment"):
        _open(path, clock, None)


def test_sync_log_syncs_the_rolls_first(tmp_path: Path, clock: MockClock, stopped_scheduler: Scheduler) -> None:
    log = _open(tmp_path / "t-0", clock, stopped_scheduler)
    _append(log, 0, 5)
    log.roll()
    _append(log, 5, 5)
    assert log._unsynced_rolls
    assert sync_log(log) == 10
    assert not log._unsynced_rolls and _stored_point(log.dir) == 5
    log.close()


def test_sync_rolled_waits_for_a_sync_in_flight_to_store_the_recovery_point(
        tmp_path: Path, clock: MockClock, stopped_scheduler: Scheduler, monkeypatch: pytest.MonkeyPatch) -> None:
    """Regression: the no-lock fast path returned once another thread's sync had emptied the list, before that sync
    stored the recovery point (a caller then saw the file half written)."""
    log = _open(tmp_path / "t-0", clock, stopped_scheduler)
    _append(log, 0, 5)
    log.roll()
    _append(log, 5, 5)
    storing, release = threading.Event(), threading.Event()
    real_store = log._store_recovery_point

    def slow_store() -> None:
        storing.set()
        assert release.wait(10)
        real_store()

    monkeypatch.setattr(log, "_store_recovery_point", slow_store)
    background = threading.Thread(target=log.sync_rolled)
    background.start()
    assert storing.wait(10) and not log._unsynced_rolls  # the list is empty, the point not yet stored
    monkeypatch.setattr(log, "_store_recovery_point", real_store)
    caller = threading.Thread(target=log.sync_rolled)
    caller.start()
    try:
        caller.join(0.2)
        assert caller.is_alive()  # it waits for the sync in flight
    finally:
        release.set()
    caller.join(10)
    background.join(10)
    assert not caller.is_alive() and _stored_point(log.dir) == 5
    log.close()


def test_a_clean_close_syncs_what_rolls_left(tmp_path: Path, clock: MockClock, stopped_scheduler: Scheduler) -> None:
    path = tmp_path / "t-0"
    log = _open(path, clock, stopped_scheduler)
    _append(log, 0, 5)
    log.roll()
    _append(log, 5, 5)
    log.roll()
    log.close()
    assert _stored_point(path) == 10
    log2 = _open(path, clock, None)
    assert _offsets(log2) == list(range(10))
    log2.close()


def test_a_torn_snapshot_of_an_unsynced_roll_falls_back_to_replaying(
        tmp_path: Path, clock: MockClock, stopped_scheduler: Scheduler) -> None:
    path = tmp_path / "t-0"
    log = _open(path, clock, stopped_scheduler)
    _idempotent(log, 0, 5)
    log.roll()
    _idempotent(log, 5, 5)
    _crash(log)
    (path / "00000000000000000005.snapshot").write_bytes(b"")  # written at the roll, never synced
    log2 = _open(path, clock, None)
    assert log2.producer_state.producers[7].last_sequence == 9
    log2.close()
