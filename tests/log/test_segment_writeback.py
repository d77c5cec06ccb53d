"""A segment starts the write-back of its appended bytes every WRITEBACK_BYTES (log/writeback.py), so the fsync at
its roll finds at most that much left to write instead of the whole segment (136 ms for 256 MB of acks=1 appends)."""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path

import pytest

import log.segment as segment_module
from log.config import LogConfig
from log.flush import sync_log, sync_logs_on_fs, syncfs_available
from log.local_log import LocalLog
from log.record import RecordBatchBuilder
from log.segment import WRITEBACK_BYTES, LogSegment
from log.writeback import start_writeback


def _batch(offset: int, value_bytes: int) -> bytes:
    b = RecordBatchBuilder(offset)
    b.append(offset, 1_700_000_000_000, b"k", os.urandom(value_bytes))
    return b.build()


def test_appends_start_the_writeback_of_every_writeback_bytes_in_order(tmp_path: Path,
                                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[tuple[int, int]] = []
    monkeypatch.setattr(segment_module, "start_writeback", lambda fd, offset, length: calls.append((offset, length)))
    seg = LogSegment(tmp_path, 0, create=True)
    big = WRITEBACK_BYTES // 3 + 1
    for i in range(7):  # 7/3 of WRITEBACK_BYTES and more: two write-backs, of consecutive ranges
        seg.append(_batch(i, big), largest_offset=i, largest_timestamp=1_700_000_000_000, offset_of_largest_timestamp=i)
    assert len(calls) == 2
    assert calls[0][0] == 0 and calls[0][1] >= WRITEBACK_BYTES
    assert calls[1][0] == calls[0][1] and calls[1][1] >= WRITEBACK_BYTES
    # the cleaner's one write of many chunks starts it too, from where the last one ended
    data = _batch(7, WRITEBACK_BYTES)
    seg.append_chunks(data, [(len(data), 7, 1_700_000_000_000, 7)])
    assert calls[2] == (calls[1][0] + calls[1][1], seg.size - (calls[1][0] + calls[1][1]))
    # small appends below the threshold start nothing
    seg.append(_batch(8, 10), largest_offset=8, largest_timestamp=1_700_000_000_000, offset_of_largest_timestamp=8)
    assert len(calls) == 3
    seg.close()


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="sync_file_range(2) is Linux's")
def test_start_writeback_asks_the_kernel_and_never_raises(tmp_path: Path) -> None:
    path = tmp_path / "f"
    with open(path, "wb") as f:
        f.write(b"x" * 1_000_000)
        f.flush()
        assert start_writeback(f.fileno(), 0, 1_000_000)
        assert not start_writeback(f.fileno(), 0, 0)  # nothing to write
    assert not start_writeback(987_654, 0, 10)  # a closed descriptor: refused, quietly


def test_after_a_truncation_the_writeback_starts_from_the_new_end(tmp_path: Path,
                                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[tuple[int, int]] = []
    monkeypatch.setattr(segment_module, "start_writeback", lambda fd, offset, length: calls.append((offset, length)))
    seg = LogSegment(tmp_path, 0, create=True)
    for i in range(3):
        seg.append(_batch(i, WRITEBACK_BYTES // 2), largest_offset=i, largest_timestamp=1_700_000_000_000,
                   offset_of_largest_timestamp=i)
    assert len(calls) == 1 and calls[0][0] == 0
    seg.truncate_to(1)  # below where the write-back got to
    kept = seg.size
    seg.append(_batch(1, WRITEBACK_BYTES), largest_offset=1, largest_timestamp=1_700_000_000_000,
               offset_of_largest_timestamp=1)
    assert calls[1] == (kept, seg.size - kept)
    seg.close()


def test_bytes_a_sync_made_durable_get_no_writeback_start(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """acks=-1 produce syncs after every job: the appends in between never add up to WRITEBACK_BYTES unsynced, so no
    sync_file_range runs on their append path (0.6 ms every 4 MiB at half load on the Kafka bench, for pages the next
    fsync writes anyway). The old code started one every WRITEBACK_BYTES regardless of syncs."""


    def batch(value_bytes: int) -> bytes:  # timestamped now: an old timestamp rolls the segment (segment.ms)
        b = RecordBatchBuilder(0)
        b.append(0, int(time.time() * 1000), b"k", os.urandom(value_bytes))
        return b.build()

    calls: list[tuple[int, int]] = []
    monkeypatch.setattr(segment_module, "start_writeback", lambda fd, offset, length: calls.append((offset, length)))
    log = LocalLog(tmp_path / "t-0", LogConfig.from_dict({"cleanup.policy": "delete", "segment.bytes": 1 << 30}))
    eighth = WRITEBACK_BYTES // 8
    for i in range(24):  # 3 x WRITEBACK_BYTES, a sync after each eighth of it
        log.append_batches(batch(eighth))
        if syncfs_available() and i % 2:
            sync_logs_on_fs([log])
        else:
            sync_log(log)
    assert calls == [] and len(log.all_segments()) == 1
    # unsynced appends start it again, from where the last sync ended
    synced = log.active_segment.size
    for _ in range(9):
        log.append_batches(batch(eighth))
    assert len(calls) == 1 and calls[0][0] == synced and calls[0][1] >= WRITEBACK_BYTES
    log.close()


def test_a_sync_noted_past_a_truncated_end_is_clamped(tmp_path: Path) -> None:
    seg = LogSegment(tmp_path, 0, create=True)
    seg.append(_batch(0, 1000), largest_offset=0, largest_timestamp=1_700_000_000_000, offset_of_largest_timestamp=0)
    seg.note_synced(10 * seg.size)  # a sync that read the size before a truncation
    assert seg._writeback_from == seg.size
    seg.close()
