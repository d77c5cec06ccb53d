"""A crash at each step of a clean, then reopen and clean again: nothing lost, nothing duplicated."""

from __future__ import annotations

from pathlib import Path

import pytest

import cleaner.cleaner as cleaner_mod
from cleaner.config import CleanerConfig
from cleaner.log_cleaner import LogCleaner
from log.checkpoint import OffsetCheckpointFile
from log.clock import MockClock
from log.local_log import RecordSpec, SimulatedCrash
from log.log_manager import LogManager
from log.record import CompressionType
from log.types import TopicPartition
from tests.cleaner.model import Producers, all_batches, committed_records, replay
from tests.support.crash import simulate_process_death

TP = TopicPartition("t", 0)


def _workload(lm: LogManager) -> None:
    log = lm.get_log(TP)
    p = Producers(log)
    for i in range(120):
        k = b"k%d" % (i % 13)
        if i % 17 == 5:
            p.append([RecordSpec(k, None)])
        elif i % 11 == 3:
            p.append([RecordSpec(k, b"txn%d" % i)], pid=7, transactional=True)
            p.end(7, commit=i % 2 == 0)
        elif i % 19 == 0:
            p.append([RecordSpec(None, b"keyless%d" % i)])
        else:
            p.append([RecordSpec(k, b"v%d" % i)], compression=CompressionType.LZ4 if i % 3 == 0 else CompressionType.NONE)
    log.roll()


def _check(log, expected) -> None:
    batches = all_batches(log)
    spans = [(b.base_offset, b.last_offset) for b in batches]
    assert all(a[1] < b[0] for a, b in zip(spans, spans[1:], strict=False)), "overlapping or duplicated batches"
    assert replay(committed_records(batches)) == expected
    names = [p.name for p in log.dir.iterdir()]
    assert not [n for n in names if n.endswith((".cleaned", ".swap", ".deleted"))]


@pytest.mark.parametrize("step", ["renamed_to_swap", "renamed_to_deleted", "renamed_from_swap", "before_swap"])
def test_crash_during_clean_then_recover(tmp_path: Path, step: str, monkeypatch: pytest.MonkeyPatch) -> None:
    clock = MockClock()
    lm = LogManager(tmp_path, clock=clock)
    lm.create_topic("t", 1, {"segment.bytes": 700})
    _workload(lm)
    log = lm.get_log(TP)
    expected = replay(committed_records(all_batches(log)))
    cp_file = OffsetCheckpointFile(lm.cleaner_checkpoint_path)
    cfg = CleanerConfig(dedupe_buffer_size=24 * 1000)

    if step == "before_swap":
        def crash(*_a, **_k):
            raise SimulatedCrash(step)
        monkeypatch.setattr(cleaner_mod, "swap_cleaned_segment", crash)
    else:
        def hook(name: str) -> None:
            if name == step:
                raise SimulatedCrash(step)
        log.crash_hook = hook
    lc = LogCleaner(cfg, lm, clock=clock)
    with pytest.raises(Exception) as ei:
        lc.clean_now(TP)
    assert isinstance(ei.value.__cause__ or ei.value, SimulatedCrash)
    if step == "before_swap":
        assert any(p.name.endswith(".cleaned") for p in log.dir.iterdir())
    # the checkpoint is written only after a successful swap
    assert cp_file.read().get(TP) is None
    monkeypatch.undo()

    # "restart": the process dies, a new LogManager opens the same directory and recovers
    simulate_process_death(lm)
    lm2 = LogManager(tmp_path, clock=clock)
    log2 = lm2.get_log(TP)
    _check(log2, expected)
    stats = LogCleaner(cfg, lm2, clock=clock).clean_now(TP)
    assert cp_file.read()[TP] == stats.end_offset > 0
    _check(log2, expected)
    lm2.close()
    # and once more after a clean reopen
    log3 = LogManager(tmp_path, clock=clock).get_log(TP)
    _check(log3, expected)
