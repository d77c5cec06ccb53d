"""A node restart empties its temp dirs but keeps the remote read cache: the key indexes
written through at copy time are re-adopted, so the next round need not fetch them."""

from __future__ import annotations

from pathlib import Path

from log.clock import MockClock
from log.index.key_index import SUFFIX as KEY_INDEX_SUFFIX
from log.local_log import RecordSpec
from log.types import TopicPartition
from service.config import load_config
from service.node import REMOTE_CACHE_DIR, TIERED_TEMP_DIR, Node

TP = TopicPartition("t", 0)


def _node(tmp_path: Path, clock: MockClock) -> Node:
    return Node(load_config({"data_dir": tmp_path / "data"}, env={}), clock=clock)


def test_restart_empties_the_tiered_temp_dir_and_re_adopts_the_cached_key_indexes(tmp_path: Path) -> None:
    clock = MockClock(1_000_000)
    node = _node(tmp_path, clock)
    try:
        node.create_topic("t", 1, {"cleanup.policy": "compact", "remote.storage.enable": True,
                                   "segment.bytes": 400, "local.retention.ms": 0})
        for i in range(40):
            clock.advance(10)
            node.produce("t", 0, [RecordSpec(f"k{i}".encode(), b"v" * 20, timestamp=clock.milliseconds())])
        node.roll("t", 0)
        clock.advance(10)
        assert node.tier("t", 0)["copied"]
        segments = node.metadata.list_remote_log_segments(TP)
        assert segments and all(md.key_index_bytes for md in segments)
    finally:
        node.shutdown()
    leftover = tmp_path / "data" / TIERED_TEMP_DIR / "t-0" / "00000000000000000000.log"
    leftover.parent.mkdir(parents=True)
    leftover.write_bytes(b"a kill -9 left this")
    node = _node(tmp_path, clock)
    try:
        assert not leftover.exists()  # temp dirs are emptied at start...
        cache = node.remote.cache
        assert cache.directory.is_relative_to(tmp_path / "data" / REMOTE_CACHE_DIR)  # ...the cache is not
        assert cache.stats().adopted >= len(segments)
        before = node.object_store.bytes_downloaded
        for md in segments:
            assert cache.contains(f"{md.id}{KEY_INDEX_SUFFIX}")
            data, fetched = node.storage_manager.fetch_key_index(md)
            assert not fetched and len(data) == md.key_index_bytes
        assert node.object_store.bytes_downloaded == before
    finally:
        node.shutdown()
