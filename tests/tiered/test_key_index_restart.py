"""After a restart the key indexes cached on local disk are used again: the round fetches
no key index object that was cached before the restart, and a damaged cached index is
dropped and fetched, never trusted."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from log.index.key_index import SUFFIX as KEY_INDEX_SUFFIX
from metadata.reports import ACTION_SKIPPED_BY_KEY_INDEX
from remote.read_cache import _entry_file_name
from remote.storage_manager import IndexType
from tests.tiered.conftest import TP, World, final_state
from tests.tiered.test_key_index_round import LOOSE_BLOOM, _base, _holding, _updates


class _CountingGets:
    """Records the keys read from the wrapped store (everything else passes through)."""

    def __init__(self, inner: Any) -> None:
        self._inner = inner
        self.gets: list[str] = []

    def get(self, key: str) -> bytes:
        self.gets.append(key)
        return self._inner.get(key)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)


def _restart(w: World, make_world) -> tuple[World, _CountingGets]:
    w.close()
    again = make_world(create=False)
    counting = _CountingGets(again.rsm.store)
    again.rsm.store = counting
    return again, counting


def test_second_round_after_a_restart_fetches_no_cached_key_index(make_world, tmp_path: Path) -> None:
    w = make_world(config=LOOSE_BLOOM)  # the loose bloom says "maybe" everywhere: every index is consulted
    _base(w)
    clean = w.rlmm.list_remote_log_segments(TP)
    hot = [b"cold-0001", b"cold-0100"]
    holding = _holding(w, tmp_path, hot)
    _updates(w, hot)
    cached = {md.id for md in clean if w.rlm.cache.contains(f"{md.id}{KEY_INDEX_SUFFIX}")}
    assert cached == {md.id for md in clean}  # written through at copy time
    before = final_state(w.read_all())
    w, counting = _restart(w, make_world)
    assert w.rlm.cache.stats().adopted >= len(clean)
    stats = w.clean()
    assert [k for k in counting.gets if k.endswith(KEY_INDEX_SUFFIX)] == []
    actions = {a.segment_id: a.action for a in stats.segment_accounts}
    assert {c.id for c in clean if actions.get(c.id) == ACTION_SKIPPED_BY_KEY_INDEX} == {c.id for c in clean} - holding
    assert final_state(w.read_all()) == before


def test_a_cached_key_index_damaged_while_down_is_fetched_again_not_trusted(make_world, tmp_path: Path) -> None:
    w = make_world(config=LOOSE_BLOOM)
    _base(w)
    clean = w.rlmm.list_remote_log_segments(TP)
    hot = [b"cold-0001"]
    holding = _holding(w, tmp_path, hot)
    victim = next(md for md in clean if md.id not in holding)
    _updates(w, hot)
    cache_dir = w.rlm.cache.directory
    w.close()
    path = cache_dir / _entry_file_name(f"{victim.id}{KEY_INDEX_SUFFIX}")
    raw = bytearray(path.read_bytes())
    raw[-3] ^= 0x40  # a flipped bit in the cached hashes
    path.write_bytes(bytes(raw))
    w = make_world(create=False)
    counting = _CountingGets(w.rsm.store)
    w.rsm.store = counting
    stats = w.clean()
    assert [k for k in counting.gets if k.endswith(KEY_INDEX_SUFFIX)] == [w.rsm.object_key(victim, IndexType.KEY_INDEX)]
    assert w.rlm.cache.stats().damaged == 1
    account = next(a for a in stats.segment_accounts if a.segment_id == victim.id)
    assert account.action == ACTION_SKIPPED_BY_KEY_INDEX  # decided on the store's good copy
