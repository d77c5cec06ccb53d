"""The tiered round decides the clean region with the exact key index: bloom first, then
the index; only segments holding a superseded record are downloaded and rewritten."""

from __future__ import annotations

from pathlib import Path

import pytest
from sqlalchemy import create_engine, text

from log.index.key_index import KeyIndex, build_segment_key_index
from metadata.reports import ACTION_CARRIED_FORWARD, ACTION_SKIPPED_BY_KEY_INDEX
from remote.storage_manager import IndexType
from tests.tiered.conftest import BOTH_STORES, TP, World, final_state

#: a bloom filter this loose answers "maybe" for every segment, so the key index decides
LOOSE_BLOOM = {"remote.compaction.bloom.fpp": 0.5}


def _base(w: World, n: int = 150) -> None:
    """``n`` distinct keys in key order over several segments, cleaned once (the clean region)."""
    w.produce([(f"cold-{i:04d}".encode(), b"x" * 40) for i in range(n)])
    w.roll_and_tier()
    w.clean()
    w.rlm.delete_unreferenced(TP)


def _updates(w: World, hot: list[bytes], fresh: int = 25) -> None:
    """New values for ``hot`` keys plus ``fresh`` new keys (enough that a loose bloom matches)."""
    w.produce([(k, b"new") for k in hot] + [(f"fresh-{i:03d}".encode(), b"f") for i in range(fresh)])
    w.roll_and_tier()


def _holding(w: World, tmp_path: Path, keys: list[bytes]) -> set[str]:
    """Ids of the referenced segments that really hold one of ``keys`` (read from the store)."""
    out = set()
    for md in w.rlmm.list_remote_log_segments(TP):
        path = tmp_path / f"probe-{md.id}.log"
        w.rsm.fetch_log_segment_to_file(md, path)
        idx = build_segment_key_index(path)
        if any(idx.contains(k) for k in keys):
            out.add(md.id)
    return out


def _actions(stats) -> dict[str, str]:
    return {a.segment_id: a.action for a in stats.segment_accounts}


@BOTH_STORES
def test_round_downloads_only_dirty_and_superseding_segments_and_indexes_the_output(make_world, tmp_path):
    w = make_world(config=LOOSE_BLOOM)
    _base(w)
    clean = w.rlmm.list_remote_log_segments(TP)
    assert len(clean) >= 4
    hot = [b"cold-0001", b"cold-0002", b"cold-0100"]
    holding = _holding(w, tmp_path, hot)
    assert 1 <= len(holding) < len(clean)
    _updates(w, hot)
    dirty = [m for m in w.rlmm.list_remote_log_segments(TP) if m.id not in {c.id for c in clean}]
    before = final_state(w.read_all())
    stats = w.clean()
    actions = _actions(stats)
    skipped = {c.id for c in clean if actions.get(c.id) == ACTION_SKIPPED_BY_KEY_INDEX}
    assert skipped == {c.id for c in clean} - holding  # exactly the segments with no superseded key
    assert stats.segments_skipped_by_bloom == 0
    # every dirty segment once (kept on disk from the map pass), every holding segment once
    assert stats.segments_downloaded == len(dirty) + len(holding)
    assert final_state(w.read_all()) == before
    referenced = {m.id for m in w.rlmm.list_remote_log_segments(TP)}
    assert skipped <= referenced and not (holding & referenced)
    # every rewritten segment has its key index object, listed in its metadata
    for md in w.rlmm.list_remote_log_segments(TP):
        if md.id in skipped:
            continue
        raw = w.store.get(w.rsm.object_key(md, IndexType.KEY_INDEX))
        assert md.key_index_bytes == len(raw)
        path = tmp_path / f"check-{md.id}.log"
        w.rsm.fetch_log_segment_to_file(md, path)
        assert KeyIndex.from_bytes(raw).to_bytes() == build_segment_key_index(path).to_bytes()


def _world(root: Path, clock, config: dict) -> World:
    return World(root, clock, (f"file://{root / 'objects'}", {}), f"sqlite:///{root / 'metadata.db'}",
                 config=config)


@pytest.mark.parametrize("fpp", [0.5, 0.01])
def test_same_logical_log_as_bloom_only_rounds(tmp_path, clock, fpp):
    """The key index changes which segments are recopied, never what a reader sees: the same
    workload through key-index rounds and through bloom-only rounds (the behaviour before)
    reads back record for record the same, round after round, tombstones and keyless included."""
    import random

    worlds = [_world(tmp_path / name, clock, {"remote.compaction.bloom.fpp": fpp}) for name in ("index", "bloom")]
    cleaners = [worlds[0].cleaner(), worlds[1].cleaner(use_key_index=False)]
    rnd = random.Random(5)
    try:
        for r in range(5):
            batch = [(f"key-{rnd.randrange(120):03d}".encode(),
                      None if rnd.random() < 0.1 else f"v{r}-{rnd.random():.5f}".encode()) for _ in range(70)]
            if r == 1:
                batch.append((None, b"keyless"))
            for w, c in zip(worlds, cleaners, strict=True):
                w.produce(batch)
                w.roll_and_tier()
                w.clean(c)
                w.rlm.delete_unreferenced(TP)
            clock.advance(400)  # tombstones pass delete.retention.ms (1 s) over the rounds
            assert worlds[0].read_all() == worlds[1].read_all()
        assert worlds[0].read_all()  # something is left to compare
    finally:
        for w in worlds:
            w.close()


def _forget_key_index(w: World, md) -> None:
    """Make ``md`` look like a segment copied before key indexes existed."""
    w.store.delete(w.rsm.object_key(md, IndexType.KEY_INDEX))
    w.rsm.drop_cached_key_index(md)
    engine = create_engine(f"sqlite:///{w.root / 'metadata.db'}")
    with engine.begin() as conn:
        conn.execute(text("UPDATE tc_remote_segments SET key_index_bytes = NULL WHERE segment_id = :s"),
                     {"s": md.id})
    engine.dispose()


def test_a_segment_without_an_index_gets_one_on_first_download(make_world, tmp_path):
    w = make_world(config=LOOSE_BLOOM)
    _base(w)
    clean = w.rlmm.list_remote_log_segments(TP)
    target = clean[-1]  # holds no key the update supersedes
    _forget_key_index(w, target)
    assert w.rlmm.list_remote_log_segments(TP)[-1].key_index_bytes is None
    _updates(w, [b"cold-0000"])
    stats = w.clean()
    account = next(a for a in stats.segment_accounts if a.segment_id == target.id)
    assert account.action == ACTION_SKIPPED_BY_KEY_INDEX  # decided by the index built from the download
    assert account.downloaded == target.segment_size_in_bytes
    md = next(m for m in w.rlmm.list_remote_log_segments(TP) if m.id == target.id)
    raw = w.store.get(w.rsm.object_key(md, IndexType.KEY_INDEX))
    assert md.key_index_bytes == len(raw) and len(KeyIndex.from_bytes(raw)) > 0
    # the next round needs no download of it
    _updates(w, [b"cold-0001"], fresh=30)
    stats = w.clean()
    again = next(a for a in stats.segment_accounts if a.segment_id == target.id)
    assert again.action == ACTION_SKIPPED_BY_KEY_INDEX and again.downloaded == 0


@pytest.mark.parametrize("holds_superseded", [True, False])
def test_a_corrupt_index_falls_back_to_downloading(make_world, tmp_path, holds_superseded):
    w = make_world(config=LOOSE_BLOOM)
    _base(w)
    clean = w.rlmm.list_remote_log_segments(TP)
    target = clean[0]  # holds cold-0000
    key = w.rsm.object_key(target, IndexType.KEY_INDEX)
    corrupt = bytearray(w.store.get(key))
    corrupt[-1] ^= 0xFF
    w.store.put(key, bytes(corrupt))
    w.rlm.cache.clear()
    hot = [b"cold-0000"] if holds_superseded else [b"cold-0149"]
    _updates(w, hot)
    stats = w.clean()
    account = next(a for a in stats.segment_accounts if a.segment_id == target.id)
    assert account.downloaded >= target.segment_size_in_bytes  # never skipped on a bad index
    if holds_superseded:
        assert account.action == "rewritten" and account.superseded == 1
        assert [v for _o, k, v in w.read_all() if k == b"cold-0000"] == [b"new"]
    else:
        assert account.action == ACTION_SKIPPED_BY_KEY_INDEX
        assert KeyIndex.from_bytes(w.store.get(key)).to_bytes() == w.rsm.fetch_key_index(target)[0]  # repaired


GATE = {**LOOSE_BLOOM, "remote.compaction.min.reclaimable.ratio": 0.5}


def test_cost_gate_carries_forward_a_barely_superseded_segment(make_world):
    w = make_world(config=GATE)
    _base(w)
    target = w.rlmm.list_remote_log_segments(TP)[0]
    _updates(w, [b"cold-0000"])  # one superseded record of many in the first segment
    stats = w.clean()
    assert _actions(stats)[target.id] == ACTION_CARRIED_FORWARD
    assert stats.segments_downloaded == 1  # the dirty segment only
    assert target.id in {m.id for m in w.rlmm.list_remote_log_segments(TP)}
    records = w.read_all()
    assert [v for _o, k, v in records if k == b"cold-0000"] == [b"x" * 40, b"new"]  # left, still superseded
    assert final_state(records)[b"cold-0000"] == b"new"


@pytest.mark.parametrize("why", ["max.compaction.lag.ms", "tombstone"])
def test_cost_gate_never_defers_what_a_deadline_or_a_delete_needs_gone(make_world, why):
    config = {**GATE, "max.compaction.lag.ms": 3_600_000} if why == "max.compaction.lag.ms" else GATE
    w = make_world(config=config)
    _base(w)
    target = w.rlmm.list_remote_log_segments(TP)[0]
    if why == "tombstone":  # deleting a key must remove its old value now, or it resurfaces later
        w.produce([(b"cold-0000", None)] + [(f"fresh-{i:03d}".encode(), b"f") for i in range(25)])
        w.roll_and_tier()
    else:
        _updates(w, [b"cold-0000"])
    stats = w.clean()
    assert _actions(stats)[target.id] == "rewritten"
    assert [v for _o, k, v in w.read_all() if k == b"cold-0000"] == ([None] if why == "tombstone" else [b"new"])


def test_cost_gate_is_off_by_default(make_world):
    w = make_world(config=LOOSE_BLOOM)
    _base(w)
    target = w.rlmm.list_remote_log_segments(TP)[0]
    _updates(w, [b"cold-0000"])
    assert _actions(w.clean())[target.id] == "rewritten"


@pytest.mark.parametrize("limit", ["disk", "count"])
def test_dirty_segments_are_fetched_again_when_they_cannot_be_kept(make_world, tmp_path, monkeypatch, limit):
    """The keep budget (a third of the free disk beyond one chunk and one output) and the cap on
    kept sources bound what stays on disk; past them a dirty segment is fetched again for the
    rewrite, as before, and the round is the same."""
    import cleaner.tiered.round as tiered

    w = make_world(config=LOOSE_BLOOM)
    _base(w)
    clean = {m.id for m in w.rlmm.list_remote_log_segments(TP)}
    hot = [b"cold-0001"]
    holding = _holding(w, tmp_path, hot)
    _updates(w, hot, fresh=60)
    dirty = [m for m in w.rlmm.list_remote_log_segments(TP) if m.id not in clean]
    before = final_state(w.read_all())
    if limit == "count":
        monkeypatch.setattr(tiered, "MAX_KEPT_SOURCES", 0)
        cleaner = w.cleaner()
    else:
        cleaner = w.cleaner(free_disk=lambda p: 3 * 2048)  # chunk bound = segment.bytes: no room to keep
    stats = w.clean(cleaner)
    assert stats.segments_downloaded == 2 * len(dirty) + len(holding)
    assert final_state(w.read_all()) == before
