"""The tiered pool: which partitions it picks, in what order, and its background threads."""

from __future__ import annotations

import time

from cleaner.config import CleanerConfig
from cleaner.log_cleaner import LogCleaner
from cleaner.tiered import TieredContext, tiered_log_to_clean
from log.types import TopicPartition
from tests.tiered.conftest import TP, final_state


def _ctx(w, **kw):
    return TieredContext(rlmm=w.rlmm, rsm=w.rsm, leader_epoch=w.rlm.leader_epoch,
                         temp_dir=w.root / "pool-tmp", **kw)


def _dirty(w, rounds=3):
    for r in range(rounds):
        w.produce([(f"k{i}".encode(), f"v{r}".encode()) for i in range(30)])
        w.roll_and_tier()


def test_ratio_counts_remote_and_local_only_bytes_from_metadata(make_world, clock):
    w = make_world()
    _dirty(w)
    ltc = tiered_log_to_clean(_ctx(w), TP, w.log, None, clock.milliseconds())
    remote = w.rlmm.remote_log_size(TP)
    assert ltc is not None and ltc.total_bytes == remote + ltc.local_only_bytes
    assert ltc.cleanable_bytes == remote  # nothing cleaned yet: all of it is dirty
    assert ltc.cleanable_ratio == remote / ltc.total_bytes
    w.produce([(b"x", b"local only")])  # in the active segment, not tiered
    assert tiered_log_to_clean(_ctx(w), TP, w.log, None, clock.milliseconds()).local_only_bytes > 0


def test_must_clean_past_max_compaction_lag(make_world, clock):
    w = make_world(config={"max.compaction.lag.ms": 60_000})
    _dirty(w)
    # The log's first segment has no predecessor: KIP-354 estimates its earliest record as its
    # largest timestamp minus the max segment time, which errs early (the KIP calls it safe).
    assert tiered_log_to_clean(_ctx(w), TP, w.log, None, clock.milliseconds()).need_compaction_now
    w.clean()
    _dirty(w, rounds=1)  # a dirty segment after a cleaned one: estimated by its predecessor's time
    now = clock.milliseconds()
    assert not tiered_log_to_clean(_ctx(w), TP, w.log, w.checkpoints[TP], now).need_compaction_now
    late = tiered_log_to_clean(_ctx(w), TP, w.log, w.checkpoints[TP], now + 120_000)
    assert late.need_compaction_now and late.must_clean_ratio > 0
    assert late.priority() > tiered_log_to_clean(_ctx(w), TP, w.log, w.checkpoints[TP], now).priority()


def test_each_pool_selects_only_its_own_partitions(make_world):
    w = make_world()
    w.lm.create_topic("plain", 1, {"cleanup.policy": "compact", "min.cleanable.dirty.ratio": 0.01,
                                   "segment.bytes": 2048})
    plain = w.lm.get_log(TopicPartition("plain", 0))
    for r in range(3):
        from log.local_log import RecordSpec

        plain.append_records([RecordSpec(f"k{i}".encode(), f"v{r}".encode()) for i in range(30)])
        plain.roll()
    _dirty(w)
    lc = LogCleaner(CleanerConfig(dedupe_buffer_size=1 << 20), w.lm, clock=w.clock, tiered=_ctx(w))
    local = lc.manager.grab_filthiest_compacted_log()
    tiered = lc.manager.grab_filthiest_compacted_log(tiered=True)
    assert local is not None and local.topic_partition == TopicPartition("plain", 0)
    assert tiered is not None and tiered.topic_partition == TP
    # a cleaner without a remote tier never hands tiered partitions to the local pool
    lc2 = LogCleaner(CleanerConfig(dedupe_buffer_size=1 << 20), w.lm, clock=w.clock)
    assert lc2.manager.grab_filthiest_compacted_log(tiered=True) is None
    picked = lc2.manager.grab_filthiest_compacted_log()
    assert picked is None or picked.topic_partition != TP


def test_background_tiered_thread_compacts_the_remote_tier(make_world):
    w = make_world()
    _dirty(w, rounds=4)
    before = final_state(w.read_all())
    cfg = CleanerConfig(dedupe_buffer_size=1 << 20, backoff_ms=50)
    lc = LogCleaner(cfg, w.lm, clock=w.clock, tiered=_ctx(w))
    lc.start()
    try:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and lc.manager.all_cleaner_checkpoints().get(TP) is None:
            time.sleep(0.05)
    finally:
        lc.shutdown()
    assert lc.manager.all_cleaner_checkpoints().get(TP) == w.rlmm.resolve_cleaner_checkpoint(TP)
    assert any(t.tiered for t in lc.threads) and lc.dead_thread_count == 0
    after = w.read_all()
    assert final_state(after) == before and len(after) == len(before)  # one record per key left
