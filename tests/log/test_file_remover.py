"""Deleted segments' files are removed paced, on a thread of their own: a large file truncated in steps before its
unlink (one unlink of a large file held a concurrent fdatasync for tens of ms), never one someone may still read."""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from log.clock import MockClock
from log.config import LogConfig
from log.file_remover import TRUNCATE_MIN_DELAY_MS, FileRemover
from log.local_log import LocalLog, RecordSpec
from log.scheduler import Scheduler


@pytest.fixture
def remover() -> Iterator[FileRemover]:
    r = FileRemover("test-remover", chunk_bytes=4096, pause_s=0.0)
    yield r
    r.shutdown()


def _file(path: Path, size: int) -> Path:
    path.write_bytes(os.urandom(size))
    return path


def test_a_large_file_is_truncated_in_steps_then_unlinked(tmp_path: Path, remover: FileRemover) -> None:
    f = _file(tmp_path / "00000000000000000000.log.deleted", 5 * 4096 + 100)
    remover.remove_now(f, truncate=True)
    assert not f.exists()
    assert remover.steps == 5 and remover.removed == 1


def test_a_file_linked_elsewhere_is_unlinked_whole_and_the_link_keeps_every_byte(tmp_path: Path,
                                                                                 remover: FileRemover) -> None:
    """The uploader hard-links a segment's files into its staging dir while it copies them to the object store: a
    truncation would cut the copy's bytes too."""
    f = _file(tmp_path / "seg.log.deleted", 8 * 4096)
    data = f.read_bytes()
    staged = tmp_path / "staging.log"
    os.link(f, staged)
    remover.remove_now(f, truncate=True)
    assert not f.exists() and remover.steps == 0
    assert staged.read_bytes() == data


def test_without_truncate_an_open_reader_still_reads_every_byte(tmp_path: Path, remover: FileRemover) -> None:
    f = _file(tmp_path / "seg.log.deleted", 8 * 4096)
    data = f.read_bytes()
    with open(f, "rb") as reader:
        remover.remove_now(f, truncate=False)
        assert not f.exists() and remover.steps == 0
        assert reader.read() == data


def test_a_missing_file_is_fine(tmp_path: Path, remover: FileRemover) -> None:
    remover.remove_now(tmp_path / "gone.log.deleted", truncate=True)
    assert remover.removed == 1


def test_the_thread_removes_queued_files_and_shutdown_cuts_a_paced_truncation_short(tmp_path: Path) -> None:
    r = FileRemover("test-remover", chunk_bytes=4096, pause_s=0.0)
    try:
        files = [_file(tmp_path / f"{i}.log.deleted", 3 * 4096) for i in range(3)]
        r.remove(files, truncate=True)
        deadline = time.monotonic() + 10
        while any(f.exists() for f in files) and time.monotonic() < deadline:
            time.sleep(0.01)
        assert not any(f.exists() for f in files) and r.steps == 6
    finally:
        r.shutdown()
    slow = FileRemover("test-remover", chunk_bytes=4096, pause_s=0.5)
    big = _file(tmp_path / "big.log.deleted", 50 * 4096)
    slow.remove([big], truncate=True)
    deadline = time.monotonic() + 10
    while slow.steps == 0 and time.monotonic() < deadline:
        time.sleep(0.01)
    started = time.monotonic()
    slow.shutdown(timeout=5)
    assert time.monotonic() - started < 2  # not the 25 s the truncation's pauses would take
    assert not big.exists() and 0 < slow.steps < 49  # the rest went in one unlink, not step by step


def _log_with_rolled_segments(tmp_path: Path, clock: MockClock, scheduler: Scheduler, delay_ms: int) -> LocalLog:
    log = LocalLog(tmp_path / "t-0", LogConfig.from_dict({"segment.bytes": 1 << 20, "file.delete.delay.ms": delay_ms,
                                                          "retention.ms": -1}),
                   clock=clock, scheduler=scheduler)
    for s in range(3):
        log.append_records([RecordSpec(f"k{s}-{i}".encode(), os.urandom(200)) for i in range(100)])
        log.roll()
    return log


@pytest.mark.parametrize("delay_ms", [0, TRUNCATE_MIN_DELAY_MS])
def test_a_deleted_segment_goes_to_the_remover_after_its_delay(tmp_path: Path, clock: MockClock,
                                                              delay_ms: int) -> None:
    """Retention hands the segment's files to the remover once file.delete.delay.ms is over: truncated in steps when
    the delay gave readers a grace of a second or more, unlinked whole (as Kafka's unlink leaves them readable) when
    it was shorter; the scheduler's own thread only hands them over, so a roll's sync never waits behind them."""
    scheduler = Scheduler(clock)
    scheduler.remover.chunk_bytes, scheduler.remover.pause_s = 4096, 0.0
    try:
        log = _log_with_rolled_segments(tmp_path, clock, scheduler, delay_ms)
        old = log.all_segments()[:2]
        assert log.delete_segments(old)
        deleted = sorted(p.name for p in log.dir.glob("*.deleted"))
        assert deleted
        clock.sleep(delay_ms)
        scheduler.run_due()
        # the scheduler's own thread may have taken the due task first (it polls the mock clock every 0.5 s), and
        # then the remover's thread removes the files, not run_due's drain: wait for whichever does
        deadline = time.monotonic() + 10
        while (list(log.dir.glob("*.deleted")) or scheduler.remover.removed < len(deleted)) and \
                time.monotonic() < deadline:
            time.sleep(0.01)
        assert not list(log.dir.glob("*.deleted"))
        assert scheduler.remover.removed >= len(deleted)
        assert (scheduler.remover.steps > 0) == (delay_ms >= TRUNCATE_MIN_DELAY_MS)
    finally:
        scheduler.shutdown()


def test_the_scheduler_thread_is_not_held_by_a_slow_removal(tmp_path: Path) -> None:
    """A removal paced over seconds runs on the remover's thread: a task scheduled behind it (a roll's sync) runs at
    once."""
    scheduler = Scheduler()
    scheduler.remover.chunk_bytes, scheduler.remover.pause_s = 4096, 0.2
    try:
        big = _file(tmp_path / "big.log.deleted", 50 * 4096)
        scheduler.remove_later(TRUNCATE_MIN_DELAY_MS, lambda: None, lambda: [big])
        ran = threading.Event()
        deadline = time.monotonic() + 10
        while scheduler.remover.steps == 0 and time.monotonic() < deadline:
            time.sleep(0.01)
        assert scheduler.remover.steps > 0
        scheduler.schedule(0, ran.set)
        assert ran.wait(2)
        assert big.exists()  # still being truncated, 0.2 s a step
    finally:
        scheduler.shutdown()
