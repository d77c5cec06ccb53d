"""The remote read cache keeps its (immutable) entries across restarts: re-adopted at
start, checked, LRU by byte budget; a damaged file is dropped, never served."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from remote.read_cache import ENTRY_HEADER, RemoteReadCache, _entry_file_name


def _never() -> bytes:
    raise AssertionError("must be served from the cache")


def test_entries_survive_a_restart_and_are_not_fetched_again(tmp_path: Path) -> None:
    d = tmp_path / "c"
    first = RemoteReadCache(d, 1 << 20)
    first.put("s1.keyindex", b"index-bytes")
    first.get("s2.index", lambda: b"offset-index")
    first.close()
    second = RemoteReadCache(d, 1 << 20)
    assert second.stats().adopted == 2 and second.used_bytes == len(b"index-bytes") + len(b"offset-index")
    assert second.get("s1.keyindex", _never) == b"index-bytes"
    assert second.get("s2.index", _never) == b"offset-index"
    s = second.stats()
    assert (s.hits, s.misses, s.damaged) == (2, 0, 0)


def test_a_crash_without_close_still_keeps_the_entries(tmp_path: Path) -> None:
    d = tmp_path / "c"
    RemoteReadCache(d, 1 << 20).put("s1.keyindex", b"abc")  # never closed
    assert RemoteReadCache(d, 1 << 20).get("s1.keyindex", _never) == b"abc"


def test_lru_order_survives_and_a_smaller_budget_evicts_the_least_recently_used(tmp_path: Path) -> None:
    d = tmp_path / "c"
    first = RemoteReadCache(d, 1000)
    for k in ("a", "b", "c"):
        first.put(k, k.encode() * 100)
    first.get("a", _never)  # a is now the most recently used: b is the oldest
    first.close()
    second = RemoteReadCache(d, 250)  # the budget shrank: only two of three fit
    assert second.stats().evictions == 1 and second.used_bytes == 200
    assert second.get("a", _never) == b"a" * 100 and second.get("c", _never) == b"c" * 100
    assert second.get("b", lambda: b"refetched") == b"refetched"
    assert second.disk_bytes() <= 250


def test_a_damaged_entry_is_dropped_at_its_first_read_and_fetched_again(tmp_path: Path) -> None:
    d = tmp_path / "c"
    first = RemoteReadCache(d, 1 << 20)
    first.put("s1.keyindex", b"x" * 64)
    first.put("s2.keyindex", b"y" * 64)
    first.close()
    path = d / _entry_file_name("s1.keyindex")
    raw = bytearray(path.read_bytes())
    raw[-1] ^= 0x01  # one flipped data bit: the header is intact, the CRC is not
    path.write_bytes(bytes(raw))
    second = RemoteReadCache(d, 1 << 20)
    assert second.stats().adopted == 2  # the header checks pass; the CRC is checked at first read
    assert second.get("s1.keyindex", lambda: b"from the store") == b"from the store"
    assert second.get("s2.keyindex", _never) == b"y" * 64
    s = second.stats()
    assert s.damaged == 1 and s.misses == 1
    assert second.get("s1.keyindex", _never) == b"from the store"  # the refetched bytes replaced it


def test_truncated_foreign_and_temp_files_are_removed_at_start(tmp_path: Path) -> None:
    d = tmp_path / "c"
    first = RemoteReadCache(d, 1 << 20)
    for k in ("ok", "short", "renamed", "garbage"):
        first.put(k, k.encode() * 10)
    first.close()
    short = d / _entry_file_name("short")
    short.write_bytes(short.read_bytes()[:-3])  # a torn file: size differs from its header
    (d / _entry_file_name("renamed")).rename(d / _entry_file_name("someone-else"))  # name != hash of its key
    (d / _entry_file_name("garbage")).write_bytes(b"not a cache entry at all" * 3)
    (d / ".tmp-abc123").write_bytes(b"interrupted write")
    (d / "stray.txt").write_bytes(b"?")
    (d / "subdir").mkdir()
    second = RemoteReadCache(d, 1 << 20)
    s = second.stats()
    assert s.adopted == 1 and s.damaged == 3 and second.used_bytes == len(b"ok" * 10)
    assert sorted(p.name for p in d.iterdir()) == [_entry_file_name("ok")]
    assert second.get("ok", _never) == b"ok" * 10


def test_a_different_chunk_size_never_serves_another_byte_range(tmp_path: Path) -> None:
    d = tmp_path / "c"
    blob = bytes(i % 251 for i in range(5000))
    first = RemoteReadCache(d, 1 << 20, chunk_bytes=1000)
    assert first.read_range("seg", len(blob), 0, 5000, lambda lo, hi: blob[lo:hi]) == blob
    first.close()
    fetched: list[tuple[int, int]] = []

    def fetch(lo: int, hi: int) -> bytes:
        fetched.append((lo, hi))
        return blob[lo:hi]

    second = RemoteReadCache(d, 1 << 20, chunk_bytes=1500)
    assert second.read_range("seg", len(blob), 1200, 2900, fetch) == blob[1200:2900]
    assert fetched == [(0, 1500), (1500, 3000)]
    third = RemoteReadCache(d, 1 << 20, chunk_bytes=1000)  # the original size: its chunks hit
    fetched.clear()
    assert third.read_range("seg", len(blob), 0, 5000, fetch) == blob and fetched == []


def test_invalidate_and_clear_delete_the_files_so_nothing_comes_back(tmp_path: Path) -> None:
    d = tmp_path / "c"
    first = RemoteReadCache(d, 1 << 20)
    first.put("s1.keyindex", b"1")
    first.put("s1.index", b"2")
    first.put("s2.keyindex", b"3")
    first.invalidate_segment("s1")
    first.close()
    second = RemoteReadCache(d, 1 << 20)
    assert second.stats().adopted == 1 and second.get("s2.keyindex", _never) == b"3"
    second.clear()
    assert RemoteReadCache(d, 1 << 20).stats().adopted == 0


def test_entry_file_layout(tmp_path: Path) -> None:
    d = tmp_path / "c"
    RemoteReadCache(d, 1 << 20).put("k", b"data")
    raw = (d / _entry_file_name("k")).read_bytes()
    magic, version, key_len, size, _crc = ENTRY_HEADER.unpack_from(raw)
    assert (magic, version, key_len, size) == (b"TCRC", 1, 1, 4)
    assert raw[ENTRY_HEADER.size:] == b"kdata"
    assert os.stat(d / _entry_file_name("k")).st_size == ENTRY_HEADER.size + 1 + 4


def test_an_entry_written_starts_its_write_back(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A remote consumer reading gigabytes through the cache left them dirty in the page cache, and the next syncfs of
    the data dir's file system (acks=-1) wrote them all first: 498 ms on the Kafka bench. Each entry's write-back now
    starts as it is written (the old code left it to the kernel's dirty expiry)."""
    import remote.read_cache as read_cache_module

    calls: list[tuple[int, int]] = []
    monkeypatch.setattr(read_cache_module, "start_writeback", lambda fd, offset, length: calls.append((offset, length)))
    cache = RemoteReadCache(tmp_path / "c", 1 << 20)
    cache.put("s1.keyindex", b"x" * 1000)
    cache.get("s2.index", lambda: b"y" * 500)
    sizes = sorted(p.stat().st_size for p in (tmp_path / "c").iterdir() if p.is_file())
    assert sorted(length for _offset, length in calls) == sizes and {o for o, _l in calls} == {0}
    cache.close()
