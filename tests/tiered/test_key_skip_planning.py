"""Planning a round over many remote segments: bloom filters read in batched queries,
key index look-ups vectorised, the bloom probe skipped only when it cannot rule anything out;
every decision the same as deciding segment by segment."""

from __future__ import annotations

import hashlib
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from bench.bench_tiered import plan_bench
from cleaner.key_skip import BLOOM_MIN_ESCAPE, DirtyKeys, SkipPolicy, bloom_escape_probability
from cleaner.stats import CleanerStats
from log.index.bloom import KeyBloomFilter
from log.index.key_index import KeyIndex
from log.types import TopicPartition
from metadata import load_metadata_manager
from metadata.types import RemoteLogSegmentId, RemoteLogSegmentMetadata
from tests.tiered.conftest import TP
from tests.tiered.test_key_index_round import LOOSE_BLOOM, _base, _updates


@pytest.mark.parametrize("entries,dirty", [(1000, 50), (50, 1000), (300, 300), (0, 10), (10, 0)])
def test_count_matching_counts_every_entry_a_dirty_key_supersedes(entries: int, dirty: int) -> None:
    rng = np.random.default_rng(entries * 7 + dirty)
    pool = rng.integers(0, 2**63, size=max(entries, dirty) * 2 + 1, dtype=np.uint64)
    idx = KeyIndex.from_hashes(rng.choice(pool, size=entries, replace=True))  # duplicates kept
    d = np.unique(rng.choice(pool, size=dirty, replace=True))
    assert idx.count_matching(d) == sum(int(h) in set(d.tolist()) for h in idx.entries.tolist())


def test_get_bloom_filters_batches_and_matches_single_reads(tmp_path: Path) -> None:
    rlmm = load_metadata_manager(f"sqlite:///{tmp_path / 'm.db'}")
    tp, other = TopicPartition("p", 0), TopicPartition("p", 1)
    try:
        ids = []
        for p in (tp, other):
            rlmm.become_leader(p, 0, 0)
        for i in range(1_100):  # more than two batches of ids
            p = tp if i % 10 else other
            md = RemoteLogSegmentMetadata(RemoteLogSegmentId.generate(p), i * 10, i * 10 + 9, 0, 0, 0, 100, {0: 0})
            rlmm.add_remote_log_segment_metadata(md, leader_epoch=0)
            if i % 3:
                rlmm.put_bloom_filter(md.remote_log_segment_id, f"bloom-{i}".encode())
            ids.append(md.remote_log_segment_id)
        got = rlmm.get_bloom_filters(tp, [s.id for s in ids])
        want = {s.id: rlmm.get_bloom_filter(s) for s in ids if s.topic_partition == tp}
        assert got == {k: v for k, v in want.items() if v is not None}
        assert rlmm.get_bloom_filters(tp, []) == {}
    finally:
        rlmm.close()


def test_escape_probability_follows_the_filter_fill_and_the_dirty_count() -> None:
    rng = np.random.default_rng(3)
    full = KeyBloomFilter.build_from_digests(rng.integers(0, 256, (1000, 16), dtype=np.uint8), 1000, 0.01)
    assert bloom_escape_probability(full, 10) > 0.8  # few dirty keys: the filter usually rules out
    assert bloom_escape_probability(full, 10_000) < BLOOM_MIN_ESCAPE  # many: it never does
    sparse = KeyBloomFilter.build_from_digests(rng.integers(0, 256, (10, 16), dtype=np.uint8), 1000, 0.01)
    assert bloom_escape_probability(sparse, 10_000) > 0.5  # an almost empty filter still helps


class _SpyMetadata:
    def __init__(self, inner: Any) -> None:
        self._inner = inner
        self.single = 0
        self.batched = 0

    def get_bloom_filter(self, sid: Any) -> Any:
        self.single += 1
        return self._inner.get_bloom_filter(sid)

    def get_bloom_filters(self, tp: Any, ids: Any) -> Any:
        self.batched += 1
        return self._inner.get_bloom_filters(tp, ids)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)


def _policy(w: Any, rlmm: Any, keys: DirtyKeys) -> SkipPolicy:
    def no_download(md: Any) -> Path:
        raise AssertionError("indexes are cached: no download")

    return SkipPolicy(rlmm, w.rsm, keys, now=w.clock.milliseconds(), max_compaction_lag_ms=2**63 - 1,
                      min_reclaimable_ratio=0.0, use_key_index=True, stats=CleanerStats(w.clock, TP),
                      download=no_download)


@pytest.mark.parametrize("fpp", [0.01, 0.5])
def test_decide_all_reads_blooms_in_batches_and_decides_as_one_by_one(make_world, fpp: float) -> None:
    w = make_world(config={**LOOSE_BLOOM, "remote.compaction.bloom.fpp": fpp})
    _base(w, n=300)
    clean = w.rlmm.list_remote_log_segments(TP)
    assert len(clean) >= 6
    for dirty in ([b"cold-0001"], [f"cold-{i:04d}".encode() for i in range(0, 300, 7)],
                  [f"other-{i}".encode() for i in range(5000)] + [b"cold-0150"]):
        keys = DirtyKeys()
        keys.add(np.frombuffer(b"".join(hashlib.md5(k).digest() for k in dirty), dtype=np.uint8).reshape(-1, 16))
        spy = _SpyMetadata(w.rlmm)
        batched = _policy(w, spy, keys).decide_all(clean)
        assert spy.single == 0 and spy.batched == 1
        one_by_one = [_policy(w, w.rlmm, keys).decide(md) for md in clean]
        assert [(d.rewrite, d.superseded) for d in batched] == [(d.rewrite, d.superseded) for d in one_by_one]
        holding = {md.id for md in clean
                   if any(KeyIndex.from_bytes(w.rsm.fetch_key_index(md)[0]).contains(k) for k in dirty)}
        assert {md.id for md, d in zip(clean, batched, strict=True) if d.rewrite} == holding


def test_the_round_reads_the_clean_regions_blooms_in_one_batch(make_world) -> None:
    w = make_world(config={"remote.compaction.bloom.fpp": 0.01})
    _base(w, n=200)
    _updates(w, [b"cold-0003"])
    spy = _SpyMetadata(w.rlmm)
    cleaner = w.cleaner()
    cleaner.rlmm = spy
    w.clean(cleaner)
    # one batch for the skip policy, one for the transaction-index walk (which, with no
    # transaction anywhere, reads every later segment's summary); none one by one
    assert spy.batched == 2 and spy.single == 0


def test_plan_bench_decides_every_segment_without_fetching(tmp_path: Path) -> None:
    out = plan_bench(tmp_path, segments=120, keys_per_segment=40, dirty_keys=3000, holding=4)
    for run in ("warm", "after_restart"):
        assert out[run]["segments"] == 120 and out[run]["rewrite"] == 4 and out[run]["key_index_fetches"] == 0
    assert out["after_restart_adopted_entries"] == 120


@pytest.mark.parametrize("dirty,entries", [(5000, 1000), (2000, 3000), (100_000, 500), (1500, 0)])
def test_count_superseded_screens_by_top_bits_and_counts_exactly(dirty: int, entries: int) -> None:
    rng = np.random.default_rng(dirty + entries)
    digests = rng.integers(0, 256, size=(dirty, 16), dtype=np.uint8)
    keys = DirtyKeys()
    keys.add(digests)
    hashes = keys.hashes
    mine = rng.integers(0, 2**64 - 1, size=entries, dtype=np.uint64, endpoint=True)
    # some entries share the dirty hashes' top bits without being dirty, some are dirty (twice)
    near = (hashes[: entries // 10] ^ np.uint64(1)) if entries else hashes[:0]
    hits = np.repeat(hashes[: entries // 20], 2) if entries else hashes[:0]
    idx = KeyIndex.from_hashes(np.concatenate([mine, near, hits]))
    assert keys.count_superseded(idx) == idx.count_matching(hashes) == len(hits) + int(
        np.isin(mine, hashes).sum())
