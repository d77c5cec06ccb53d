"""The active segment's offset and time index entries are buffered, not written per batch: a roll, a sync or a close
writes them, and a crash that loses them leaves indexes that recovery rebuilds from the batches, with every lookup
answering as before the crash."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

from log.clock import MockClock
from log.local_log import RecordSpec
from log.log_manager import LogManager
from log.offset_lookup import local_offset_for_timestamp
from log.types import TopicPartition

TP = TopicPartition("t", 0)
CONFIG = {"segment.bytes": 1 << 20, "index.interval.bytes": 64, "cleanup.policy": "delete"}
ROOT = Path(__file__).resolve().parents[2]


def _fill(lm: LogManager, clock: MockClock, n: int) -> None:
    log = lm.get_log(TP)
    for i in range(n):
        clock.advance(10)
        log.append_records([RecordSpec(f"k{i}".encode(), b"v" * 80)])


def test_a_roll_writes_the_buffered_entries_and_lookups_use_them_before(tmp_path: Path) -> None:
    clock = MockClock(1_000_000)
    lm = LogManager(tmp_path, clock=clock)
    lm.create_topic("t", 1, CONFIG)
    _fill(lm, clock, 40)
    log = lm.get_log(TP)
    seg = log.active_segment
    assert seg.offset_index.entries > 10 and seg.time_index.entries > 10
    assert seg.offset_index.path.stat().st_size < seg.offset_index.size_in_bytes  # still buffered
    assert seg.offset_index.lookup(25)[0] <= 25  # lookups answer from memory meanwhile
    log.roll()
    assert seg.offset_index.path.stat().st_size == seg.offset_index.size_in_bytes
    assert seg.time_index.path.stat().st_size == seg.time_index.size_in_bytes
    lm.close()


def test_entries_lost_in_a_crash_are_rebuilt_by_recovery(tmp_path: Path) -> None:
    """A process appends and dies without flushing (os._exit, as kill -9): the index files on disk miss entries;
    the next open recovers the active segment and rebuilds them from its batches."""
    script = textwrap.dedent(f"""
        import os, sys
        sys.path.insert(0, {str(ROOT)!r})
        from pathlib import Path
        from log.clock import MockClock
        from log.log_manager import LogManager
        from tests.log.test_index_buffering import CONFIG, TP, _fill
        clock = MockClock(1_000_000)
        lm = LogManager(Path({str(tmp_path)!r}), clock=clock)
        lm.create_topic("t", 1, CONFIG)
        _fill(lm, clock, 60)
        seg = lm.get_log(TP).active_segment
        print(seg.offset_index.entries, seg.time_index.entries, flush=True)
        os._exit(0)
    """)
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, check=True, cwd=ROOT)
    entries, time_entries = (int(x) for x in out.stdout.split())
    index = tmp_path / "t-0" / f"{0:020d}.index"
    assert index.stat().st_size < entries * 8  # the crash lost buffered entries
    lm = LogManager(tmp_path, clock=MockClock(2_000_000))
    log = lm.get_log(TP)
    seg = log.active_segment
    assert log.log_end_offset == 60
    assert seg.offset_index.entries == entries and seg.time_index.entries == time_entries
    found = local_offset_for_timestamp(log, 1_000_000 + 10 * 31)
    assert found is not None and found.offset == 30
    assert [b.base_offset for b in log.read(45, max_bytes=1 << 20)][0] == 45
    lm.close()
