"""Key index objects beside remote segments: built on copy, listed in metadata, cached."""

from __future__ import annotations

from pathlib import Path

import pytest
from sqlalchemy import create_engine, delete, insert, inspect, text

from log.index.key_index import KeyIndex, build_segment_key_index
from metadata.errors import RemoteSegmentNotFoundError
from metadata.sql import SqlRemoteLogMetadataManager
from metadata.sql.schema import SCHEMA_VERSION, schema_version
from metadata.types import RemoteLogSegmentId
from remote.storage_manager import IndexType
from tests.tiered.conftest import BOTH_STORES, TP


@BOTH_STORES
def test_copy_uploads_a_key_index_listed_in_metadata_and_cached(make_world):
    w = make_world(config={"local.retention.ms": 3_600_000})  # keep the local copies to compare with
    w.produce([(f"k{i % 40}".encode(), b"v" * 30) for i in range(150)] + [(None, b"keyless")])
    w.roll_and_tier()
    segs = w.rlmm.list_remote_log_segments(TP)
    assert len(segs) >= 2
    for md in segs:
        key = w.rsm.object_key(md, IndexType.KEY_INDEX)
        assert key == f"t-0/{md.start_offset:020d}-{md.id}.keyindex"
        raw = w.store.get(key)
        assert md.key_index_bytes == len(raw)
        local = w.log.segments.get(md.start_offset)
        assert KeyIndex.from_bytes(raw).to_bytes() == build_segment_key_index(local).to_bytes()
        data, fetched = w.rsm.fetch_key_index(md)
        assert data == raw and not fetched  # written through to the read cache at copy time
    before = w.rlm.cache.stats().misses
    w.rlm.cache.clear()
    data, fetched = w.rsm.fetch_key_index(segs[0])
    assert fetched and data == w.store.get(w.rsm.object_key(segs[0], IndexType.KEY_INDEX))
    assert w.rlm.cache.stats().misses == before + 1
    assert w.rsm.fetch_key_index(segs[0]) == (data, False)


def test_deleting_a_segment_deletes_its_key_index(make_world):
    w = make_world()
    w.produce([(b"a", b"1"), (b"b", b"1")])
    w.roll_and_tier()
    md = w.rlmm.list_remote_log_segments(TP)[0]
    assert w.rsm.object_key(md, IndexType.KEY_INDEX) in w.object_keys()
    w.rsm.delete_log_segment_data(md)
    assert not any(k.startswith(f"t-0/{md.start_offset:020d}-{md.id}") for k in w.object_keys())


def test_set_key_index_records_it_and_refuses_unknown_segments(make_world):
    w = make_world()
    w.produce([(b"a", b"1")])
    w.roll_and_tier()
    md = w.rlmm.list_remote_log_segments(TP)[0]
    w.rlmm.set_key_index(md.remote_log_segment_id, 4242)
    assert w.rlmm.list_remote_log_segments(TP)[0].key_index_bytes == 4242
    with pytest.raises(RemoteSegmentNotFoundError):
        w.rlmm.set_key_index(RemoteLogSegmentId.generate(TP), 10)


def test_a_version_2_store_gets_the_key_index_column(tmp_path: Path, make_world):
    """A store from before key indexes (schema 2, no column) is upgraded on open; its segments
    read as having no key index until one is recorded."""
    url = f"sqlite:///{tmp_path / 'metadata.db'}"
    w = make_world()
    w.produce([(b"a", b"1")])
    w.roll_and_tier()
    sid = w.rlmm.list_remote_log_segments(TP)[0].remote_log_segment_id
    w.close()
    engine = create_engine(url)
    with engine.begin() as conn:
        conn.execute(text("ALTER TABLE tc_remote_segments DROP COLUMN key_index_bytes"))
        conn.execute(delete(schema_version))
        conn.execute(insert(schema_version).values(version=2))
    assert "key_index_bytes" not in {c["name"] for c in inspect(engine).get_columns("tc_remote_segments")}
    with SqlRemoteLogMetadataManager(url) as m:
        (md,) = m.list_remote_log_segments(TP)
        assert md.key_index_bytes is None
        m.set_key_index(sid, 99)
        assert m.list_remote_log_segments(TP)[0].key_index_bytes == 99
    with SqlRemoteLogMetadataManager(url) as m:  # a second open finds the column and keeps the value
        assert m.list_remote_log_segments(TP)[0].key_index_bytes == 99
    with engine.connect() as conn:
        assert [r[0] for r in conn.execute(text("SELECT version FROM tc_schema_version"))] == [SCHEMA_VERSION]
    engine.dispose()


def test_read_cache_put_is_write_through_and_invalidate_key_drops_one_entry(tmp_path: Path):
    from remote.read_cache import RemoteReadCache

    cache = RemoteReadCache(tmp_path / "c", 100)
    cache.put("a.keyindex", b"x" * 40)
    cache.put("a.keyindex", b"y" * 40)  # immutable: the first bytes stay, counted once
    cache.put("b.keyindex", b"z" * 40)
    assert cache.get("a.keyindex", lambda: b"never") == b"x" * 40
    assert cache.used_bytes == 80 == cache.disk_bytes() and cache.stats().misses == 0
    cache.put("c.keyindex", b"w" * 40)  # over the budget: the least recently used entry goes
    assert cache.used_bytes == 80 and cache.get("b.keyindex", lambda: b"refetched") == b"refetched"
    cache.invalidate_key("a.keyindex")
    cache.invalidate_key("missing")
    assert cache.get("a.keyindex", lambda: b"fresh") == b"fresh"
    cache.put("huge", b"h" * 500)  # larger than the whole budget: not kept
    assert "huge" not in cache._entries and cache.used_bytes <= 100 and cache.disk_bytes() == cache.used_bytes
