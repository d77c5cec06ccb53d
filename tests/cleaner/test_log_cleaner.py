"""Selection, cleaning states, uncleanable partitions, threads, throttling, the one-shot API."""

from __future__ import annotations

import threading
from pathlib import Path

import pytest

from cleaner.config import CleanerConfig
from cleaner.errors import CleanerStateError, LogCleaningAbortedError, LogCleaningError
from cleaner.log_cleaner import CleanerThread, LogCleaner, clean_partition
from cleaner.manager import CleaningStateKind
from cleaner.throttler import Throttler
from log.checkpoint import OffsetCheckpointFile
from log.clock import MockClock
from log.errors import InvalidConfigError, InvalidRequestError
from log.local_log import RecordSpec
from log.log_manager import LogManager
from log.types import TopicPartition

HOUR = 3_600_000


def _fill(log, n: int, keys: int, size: int = 20) -> None:
    for i in range(n):
        log.append_records([RecordSpec(b"k%d" % (i % keys), b"v" * size)])


@pytest.fixture
def lm(tmp_path: Path, clock: MockClock) -> LogManager:
    return LogManager(tmp_path, clock=clock)


def _cfg(**kw) -> CleanerConfig:
    return CleanerConfig(**{"dedupe_buffer_size": 24 * 4096, "backoff_ms": 10, **kw})


def test_clean_partition_one_shot_updates_the_checkpoint(lm: LogManager, clock: MockClock) -> None:
    lm.create_topic("t", 1, {"min.cleanable.dirty.ratio": 0.99})
    tp = TopicPartition("t", 0)
    log = lm.get_log(tp)
    _fill(log, 30, 3)
    log.roll()
    stats = clean_partition(lm, tp, _cfg(), clock)  # ignores the dirty-ratio threshold
    d = stats.as_dict()
    for key in ("bytes_read", "bytes_written", "records_read", "records_retained", "checkpoint", "elapsed_ms"):
        assert key in d
    assert (d["records_read"], d["records_retained"], d["checkpoint"]) == (30, 3, 30)
    assert OffsetCheckpointFile(lm.cleaner_checkpoint_path).read() == {tp: 30}
    # nothing new: a second pass changes nothing and keeps the checkpoint
    assert clean_partition(lm, tp, _cfg(), clock).end_offset == 30


def test_clean_partition_refuses_a_delete_only_topic(lm: LogManager, clock: MockClock) -> None:
    lm.create_topic("d", 1, {"cleanup.policy": "delete"})
    with pytest.raises(InvalidRequestError, match="compact"):
        clean_partition(lm, TopicPartition("d", 0), _cfg(), clock)


def test_selection_prefers_logs_past_max_compaction_lag(lm: LogManager, clock: MockClock) -> None:
    lm.create_topic("dirty", 1, {"min.cleanable.dirty.ratio": 0.1})
    lm.create_topic("late", 1, {"min.cleanable.dirty.ratio": 0.9, "max.compaction.lag.ms": HOUR})
    dirty, late = lm.get_log(TopicPartition("dirty", 0)), lm.get_log(TopicPartition("late", 0))
    _fill(late, 5, 5)
    _fill(dirty, 50, 5)
    dirty.roll()
    # the late log's active segment is force-rolled once its first batch is older than the max lag (KIP-354)
    assert not late.maybe_roll()
    clock.advance(HOUR + 1)
    assert late.maybe_roll()
    lc = LogCleaner(_cfg(), lm, clock=clock)
    first = lc.manager.grab_filthiest_compacted_log()
    assert first is not None and first.topic_partition.topic == "late"
    assert first.need_compaction_now and first.must_clean_ratio == 1.0
    assert lc.manager.pre_clean_stats.max_compaction_delay_ms == 1
    second = lc.manager.grab_filthiest_compacted_log()  # "late" is in progress now
    assert second is not None and second.topic_partition.topic == "dirty"
    assert lc.manager.grab_filthiest_compacted_log() is None


def test_dirty_ratio_threshold_is_strict(lm: LogManager, clock: MockClock) -> None:
    lm.create_topic("t", 1, {"min.cleanable.dirty.ratio": 0.5})
    log = lm.get_log(TopicPartition("t", 0))
    _fill(log, 10, 10)
    log.roll()
    lc = LogCleaner(_cfg(), lm, clock=clock)
    ltc = lc.manager.grab_filthiest_compacted_log()
    assert ltc is not None and ltc.cleanable_ratio == 1.0
    lc.run_round(lc.threads[0].cleaner if lc.threads else _cleaner(lc), ltc)
    assert lc.manager.all_cleaner_checkpoints()[TopicPartition("t", 0)] == 10
    _fill(log, 10, 10)  # dirty 10 records over clean 10: ratio exactly 0.5 -> not cleanable
    log.roll()
    assert lc.manager.grab_filthiest_compacted_log() is None
    assert lc.max_dirty_percent == 50


def _cleaner(lc: LogCleaner):
    from cleaner.cleaner import Cleaner

    return Cleaner(lc._new_map(), lc.config, clock=lc.clock, check_done=lc.manager.check_cleaning_aborted)


def test_failing_partition_is_marked_uncleanable_and_not_retried(lm: LogManager, clock: MockClock,
                                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    lm.create_topic("bad", 1)
    lm.create_topic("good", 1)
    for t in ("bad", "good"):
        log = lm.get_log(TopicPartition(t, 0))
        _fill(log, 10, 2)
        log.roll()
    lc = LogCleaner(_cfg(), lm, clock=clock)
    thread = CleanerThread(lc, 0, lc._new_map())
    calls: list[str] = []
    real = thread.cleaner.clean

    def clean(ltc):
        calls.append(ltc.topic_partition.topic)
        if ltc.topic_partition.topic == "bad":
            raise OSError("disk says no")
        return real(ltc)

    monkeypatch.setattr(thread.cleaner, "clean", clean)
    for _ in range(4):
        thread.do_work()
    assert calls == ["bad", "good"]
    assert lc.uncleanable_partitions_count == 1 and lc.uncleanable_bytes > 0
    assert lc.manager.state(TopicPartition("bad", 0)) is None  # state released, checkpoint untouched
    assert TopicPartition("bad", 0) not in lc.manager.all_cleaner_checkpoints()
    assert "OSError" in lc.last_runs[0]["error"]
    with pytest.raises(LogCleaningError):  # the one-shot API reports the failure with its cause
        monkeypatch.setattr("cleaner.log_cleaner.Cleaner.do_clean",
                            lambda *_a: (_ for _ in ()).throw(OSError("still broken")))
        lc.clean_now(TopicPartition("bad", 0))


def test_dead_threads_are_counted(lm: LogManager, clock: MockClock, monkeypatch: pytest.MonkeyPatch) -> None:
    lm.create_topic("t", 1)
    lc = LogCleaner(_cfg(threads=2), lm, clock=clock)

    def boom(*_a, **_k):
        raise RuntimeError("selection bug")

    monkeypatch.setattr(lc.manager, "grab_filthiest_compacted_log", boom)
    lc.start()
    for t in lc.threads:
        t.join(5)
    assert lc.dead_thread_count == 2
    lc.shutdown()


def test_threads_clean_in_the_background_and_shut_down(lm: LogManager, clock: MockClock) -> None:
    lm.create_topic("t", 1)
    tp = TopicPartition("t", 0)
    log = lm.get_log(tp)
    _fill(log, 40, 4)
    log.roll()
    lc = LogCleaner(_cfg(threads=2), lm, clock=clock)
    lc.start()
    done = threading.Event()
    for _ in range(500):
        if lc.manager.all_cleaner_checkpoints().get(tp) == 40:
            done.set()
            break
        threading.Event().wait(0.01)
    lc.shutdown()
    assert done.is_set()
    assert lc.dead_thread_count == 0
    assert lc.max_buffer_utilization_percent >= 0 and lc.cleaner_recopy_percent <= 100
    assert lc.last_runs and lc.last_runs[-1]["checkpoint"] == 40
    assert lc.status()["threads"] == 2


def test_abort_pause_resume_state_machine(lm: LogManager, clock: MockClock) -> None:
    lm.create_topic("t", 1)
    tp = TopicPartition("t", 0)
    log = lm.get_log(tp)
    _fill(log, 10, 2)
    log.roll()
    lc = LogCleaner(_cfg(), lm, clock=clock)
    m = lc.manager
    m.abort_and_pause_cleaning(tp)
    m.abort_and_pause_cleaning(tp)
    assert m.state(tp).paused_count == 2
    assert m.grab_filthiest_compacted_log() is None  # paused partitions are skipped
    m.resume_cleaning(tp)
    assert m.state(tp).paused_count == 1
    m.resume_cleaning(tp)
    assert m.state(tp) is None
    with pytest.raises(CleanerStateError):
        m.resume_cleaning(tp)
    # abort a running round: the round notices at its next check and the state becomes PAUSED(1)
    ltc = m.grab_filthiest_compacted_log()
    assert m.state(tp).kind is CleaningStateKind.IN_PROGRESS
    t = threading.Thread(target=m.abort_and_pause_cleaning, args=(tp,))
    t.start()
    for _ in range(200):
        if m.state(tp).kind is CleaningStateKind.ABORTED:
            break
        threading.Event().wait(0.005)
    assert m.state(tp).kind is CleaningStateKind.ABORTED
    with pytest.raises(LogCleaningAbortedError):
        m.check_cleaning_aborted(tp)
    assert lc.run_round(_cleaner(lc), ltc) is None
    t.join(5)
    assert m.state(tp).paused_count == 1
    assert tp not in m.all_cleaner_checkpoints()
    m.resume_cleaning(tp)


def test_compact_delete_runs_retention(lm: LogManager, clock: MockClock) -> None:
    lm.create_topic("cd", 1, {"cleanup.policy": "compact,delete", "retention.ms": HOUR, "segment.bytes": 200})
    log = lm.get_log(TopicPartition("cd", 0))
    _fill(log, 6, 6)
    clock.advance(2 * HOUR)
    _fill(log, 2, 6)
    lc = LogCleaner(_cfg(), lm, clock=clock)
    start = log.log_start_offset
    lc.run_retention()
    assert log.log_start_offset > start


def test_throttler_sleeps_to_the_desired_rate() -> None:
    clock = MockClock()
    t = Throttler(1000.0, check_interval_ms=300, clock=clock)  # 1000 B/s = 1 B/ms
    assert t.maybe_throttle(500) == 0  # period not over yet
    clock.advance(301)
    start = clock.monotonic_ms()
    slept = t.maybe_throttle(500)  # 1000 B in 301 ms: sleep round(1000 / 1 - 301) = 699 ms
    assert slept == 699 and clock.monotonic_ms() - start == 699
    clock.advance(400)
    assert t.maybe_throttle(100) == 0  # 100 B in 400 ms is under the rate
    assert Throttler(clock=clock).maybe_throttle(10**9) == 0  # unlimited


def test_cleaner_config_validation() -> None:
    with pytest.raises(InvalidConfigError, match="log.cleaner.threads"):
        CleanerConfig(threads=0)
    with pytest.raises(InvalidConfigError, match="log.cleaner.dedupe.buffer.size"):
        CleanerConfig(dedupe_buffer_size=10)
    with pytest.raises(InvalidConfigError, match="load.factor"):
        CleanerConfig(load_factor=1.5)
    c = CleanerConfig.from_properties({"log.cleaner.threads": "2", "log.cleaner.dedupe.buffer.size": 4800})
    assert (c.threads, c.slots_per_thread, c.max_entries_per_thread) == (2, 100, 90)
    with pytest.raises(InvalidConfigError, match="unknown"):
        CleanerConfig.from_properties({"log.cleaner.nope": 1})
