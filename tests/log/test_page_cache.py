"""Drop-behind (log/page_cache.py): a log keeps only its newest ``page_cache_window`` bytes in the page cache, dropping
the rest behind the writer and behind the Kafka fetch path's reads; -1 keeps everything (Kafka's way). Residency is
read from the kernel with mincore(2), so these tests see what the kernel really kept."""

from __future__ import annotations

import ctypes
import mmap
import os
import sys
import threading
import time
from pathlib import Path

import pytest

import log.local_log as local_log_module
import log.page_cache as page_cache_module
from log.config import LogConfig
from log.fetch_raw import read_raw
from log.flush import sync_log
from log.local_log import LocalLog
from log.log_manager import LogManager
from log.page_cache import DEFAULT_WINDOW_BYTES, CacheDropper, behind_window, drop_cached
from log.record import RecordBatchBuilder
from log.scheduler import Scheduler
from log.segment import LogSegment
from log.types import TopicPartition
from service.config import ServiceConfig

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="posix_fadvise and mincore are Linux's")

PAGE = mmap.PAGESIZE
MIB = 1024 * 1024


def _resident(path: Path) -> list[bool]:
    """Whether each page of ``path`` is in the page cache (mincore of a shared mapping, which faults nothing in)."""
    size = path.stat().st_size
    if not size:
        return []
    libc = ctypes.CDLL(None, use_errno=True)
    libc.mincore.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_void_p]
    pages = (size + PAGE - 1) // PAGE
    vec = (ctypes.c_ubyte * pages)()
    with open(path, "r+b") as f, mmap.mmap(f.fileno(), size) as mm:
        anchor = ctypes.c_char.from_buffer(mm)
        try:
            assert libc.mincore(ctypes.c_void_p(ctypes.addressof(anchor)), size, vec) == 0, ctypes.get_errno()
        finally:
            del anchor  # the mapping cannot close while a ctypes object holds it
    return [bool(b & 1) for b in vec]


@pytest.fixture
def drops_honoured(tmp_path: Path) -> None:
    """Skip where the file system ignores POSIX_FADV_DONTNEED (tmpfs keeps its pages: they are the file)."""
    probe = tmp_path / "probe"
    probe.write_bytes(os.urandom(16 * PAGE))
    fd = os.open(probe, os.O_RDONLY)
    try:
        os.fsync(fd)
        drop_cached(fd, 0, 16 * PAGE)
    finally:
        os.close(fd)
    if any(_resident(probe)):
        pytest.skip("this file system keeps pages the kernel is asked to drop (tmpfs?)")
    probe.unlink()


def _append(log: LocalLog, value_bytes: int) -> None:
    b = RecordBatchBuilder(0)
    b.append(0, int(time.time() * 1000), b"key", os.urandom(value_bytes))
    log.append_batches(b.build())
    sync_log(log)  # as acks=-1 does: clean pages are the ones a drop can take


def _config() -> LogConfig:
    return LogConfig.from_dict({"cleanup.policy": "delete", "segment.bytes": 3 * MIB})


def _cached_bytes(log: LocalLog) -> tuple[int, int]:
    """(bytes cached behind the newest window of the log, bytes cached within it), whole pages, oldest first."""
    segs = log.all_segments()
    floors = behind_window([s.size for s in segs], log.page_cache_window)
    behind = within = 0
    for seg, floor in zip(segs, floors, strict=True):
        for i, cached in enumerate(_resident(seg.log_path)):
            if cached:
                if (i + 1) * PAGE <= floor:
                    behind += PAGE
                elif i * PAGE >= floor:
                    within += PAGE
    return behind, within


def test_behind_window_spans_segments_from_the_newest() -> None:
    assert behind_window([10, 10, 10], 15) == [10, 5, 0]
    assert behind_window([10, 10, 10], 0) == [10, 10, 10]
    assert behind_window([10, 10, 4], 30) == [0, 0, 0]
    assert behind_window([10, 10, 25], 15) == [10, 10, 10]
    assert behind_window([10, 10, 10], -1) == [0, 0, 0]  # off: everything stays
    assert behind_window([], 5) == []


def test_appends_drop_what_falls_behind_the_window(tmp_path: Path, drops_honoured: None,
                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(local_log_module, "DROP_STEP", 256 * 1024)
    log = LocalLog(tmp_path / "t-0", _config(), page_cache_window=MIB)
    for _ in range(80):  # 10 MiB over four segments
        _append(log, 128 * 1024)
    assert len(log.all_segments()) >= 4
    behind, within = _cached_bytes(log)
    assert behind < 256 * 1024  # at most what went behind the window since the last drop (the next one takes it)
    assert within == MIB  # the newest bytes stay cached
    log.close()


def test_without_a_window_everything_stays_cached(tmp_path: Path, drops_honoured: None,
                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(local_log_module, "DROP_STEP", 256 * 1024)
    log = LocalLog(tmp_path / "t-0", _config())  # the library default: -1, Kafka's way
    for _ in range(40):
        _append(log, 128 * 1024)
    assert log.page_cache_window == -1
    assert all(all(_resident(s.log_path)) for s in log.all_segments())
    log.close()


def test_a_fetch_behind_the_window_drops_what_it_read(tmp_path: Path, drops_honoured: None) -> None:
    log = LocalLog(tmp_path / "t-0", _config())
    for _ in range(64):  # 8 MiB, all cached (no window while written)
        _append(log, 128 * 1024)
    end = log.log_end_offset
    log.page_cache_window = 2 * MIB
    offset = 0
    got = 0
    while offset < end:  # a consumer catching up from offset 0, 1 MiB a fetch
        page = read_raw(log, offset, MIB)
        got += len(page.data)
        offset = page.next_offset
    assert got == log.size_in_bytes()
    behind, within = _cached_bytes(log)
    assert behind <= PAGE * len(log.all_segments())  # a read's last, partly read page waits for the next read
    assert within >= 2 * MIB - PAGE  # the newest bytes, read too, stay
    log.close()


def test_the_node_sets_the_window_of_every_log(tmp_path: Path) -> None:
    assert ServiceConfig().page_cache_window_bytes == DEFAULT_WINDOW_BYTES == 64 * MIB
    manager = LogManager(tmp_path / "data", page_cache_window=5 * MIB)
    try:
        manager.create_topic("t", 1, {"segment.bytes": 3 * MIB})
        manager.add_partitions("t", 2)
        assert {manager.get_log(TopicPartition("t", p)).page_cache_window for p in range(2)} == {5 * MIB}
    finally:
        manager.close()


def test_a_truncated_segment_drops_again_from_its_new_end(tmp_path: Path) -> None:
    seg = LogSegment(tmp_path, 0, create=True)
    for i in range(4):
        b = RecordBatchBuilder(i)
        b.append(i, int(time.time() * 1000), b"key", os.urandom(1000))
        batch = b.build()
        seg.append(batch, largest_offset=i, largest_timestamp=int(time.time() * 1000), offset_of_largest_timestamp=i)
    seg.cache_dropped_to = seg.size
    seg.truncate_to(2)  # recovery of a torn tail, say
    assert seg.cache_dropped_to == seg.size == 2 * len(batch)
    seg.close()


@pytest.fixture
def drop_threads(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The name of the thread that made each page-cache drop, inline or the dropper's (every drop goes through
    page_cache.drop_cached)."""
    calls: list[str] = []
    real = page_cache_module.drop_cached

    def recording(fd: int, start: int, end: int) -> bool:
        calls.append(threading.current_thread().name)
        return real(fd, start, end)

    monkeypatch.setattr(page_cache_module, "drop_cached", recording)
    return calls


def test_a_node_log_drops_on_the_dropper_thread_not_while_appending(tmp_path: Path, drops_honoured: None,
                                                                    drop_threads: list[str],
                                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    """A log with the node's scheduler hands its drops to the scheduler's CacheDropper: a produce's append no longer
    makes the fadvise call (about 0.5 ms once every 4 MiB at half load on the Kafka bench). The old code made it on
    the appending thread."""
    monkeypatch.setattr(local_log_module, "DROP_STEP", 256 * 1024)
    scheduler = Scheduler(name="t-sched")
    log = LocalLog(tmp_path / "t-0", _config(), scheduler=scheduler, page_cache_window=MIB)
    try:
        for _ in range(40):  # 5 MiB over two segments
            _append(log, 128 * 1024)
        deadline = time.monotonic() + 10
        while _cached_bytes(log)[0] >= 256 * 1024 and time.monotonic() < deadline:
            time.sleep(0.01)
        assert drop_threads and set(drop_threads) == {"t-sched-cache-dropper"}  # none on the appending thread
        behind, within = _cached_bytes(log)
        assert behind < 256 * 1024 and within == MIB  # the same residency as when the appender dropped
    finally:
        log.close()
        scheduler.shutdown()


def test_the_dropper_skips_a_file_gone_and_stops_at_shutdown(tmp_path: Path) -> None:
    dropper = CacheDropper("t-dropper")
    try:
        dropper.drop(tmp_path / "gone.log", 0, MIB)  # deleted or renamed meanwhile: nothing to drop, no error
        dropper.drop(tmp_path / "empty.log", 5, 5)  # an empty range is not queued
        deadline = time.monotonic() + 10
        while dropper.dropped < 1 and time.monotonic() < deadline:
            time.sleep(0.01)
        assert dropper.dropped == 1
    finally:
        dropper.shutdown()
    dropper.drop(tmp_path / "late.log", 0, MIB)  # after shutdown: not made
    assert dropper.drain() == 0


def test_a_node_logs_fetch_behind_the_window_drops_on_the_dropper_thread(tmp_path: Path, drops_honoured: None,
                                                                         drop_threads: list[str]) -> None:
    """A catch-up fetch of a log with the node's scheduler hands its drops to the CacheDropper, as the appends do:
    the reading thread makes no fadvise call (the old code made one per page read behind the window)."""
    scheduler = Scheduler(name="t-sched")
    log = LocalLog(tmp_path / "t-0", _config(), scheduler=scheduler)
    try:
        for _ in range(64):  # 8 MiB, all cached (no window while written)
            _append(log, 128 * 1024)
        log.page_cache_window = 2 * MIB
        offset, end = 0, log.log_end_offset
        while offset < end:
            offset = read_raw(log, offset, MIB).next_offset
        deadline = time.monotonic() + 10
        while _cached_bytes(log)[0] > PAGE * len(log.all_segments()) and time.monotonic() < deadline:
            time.sleep(0.01)
        assert drop_threads and set(drop_threads) == {"t-sched-cache-dropper"}  # none on the reading thread
        behind, within = _cached_bytes(log)
        assert behind <= PAGE * len(log.all_segments()) and within >= 2 * MIB - PAGE  # as when the reader dropped
        assert scheduler.dropper.dropped > 0
    finally:
        log.close()
        scheduler.shutdown()
