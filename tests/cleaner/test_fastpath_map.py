"""CompactOffsetMap: the OffsetMap contract in 16-byte slots (runs with both record kernels,
see conftest's ``record_kernels``), and the one warning when the compiled kernels are missing."""

from __future__ import annotations

import logging

import pytest

from cleaner.config import CleanerConfig
from cleaner.errors import OffsetMapFullError
from cleaner.kernels import fastpath
from cleaner.log_cleaner import LogCleaner
from cleaner.offset_map import COMPACT_ENTRY_SIZE, CompactOffsetMap, max_map_entries


def test_slots_are_16_bytes_and_memory_follows_keys(record_kernels):
    m = CompactOffsetMap(128 * 2**20)
    assert COMPACT_ENTRY_SIZE == 16 and m.slots == 128 * 2**20 // 16
    assert max_map_entries(m, 0.9) == int(m.slots * 0.9)
    assert m.memory_bytes == 0
    for i in range(3000):
        m.put(b"key-%d" % i, 10 + i)
    # the table grew with 3000 keys to a few thousand slots, not to the 8M the buffer allows
    assert 3000 * 16 < m.memory_bytes <= 8192 * 16
    m.clear()
    assert (m.size, m.memory_bytes, m.latest_offset) == (0, 0, -1)


def test_put_get_latest_and_capacity(record_kernels):
    m = CompactOffsetMap(16 * 3)
    m.put(b"a", 5)
    m.put(b"b", 6)
    m.put(b"a", 9)
    assert (m.get(b"a"), m.get(b"b"), m.get(b"zz"), m.size, m.latest_offset) == (9, 6, -1, 2, 9)
    m.update_latest_offset(20)
    assert m.latest_offset == 20
    m.put(b"c", 21)
    with pytest.raises(OffsetMapFullError):
        m.put(b"d", 22)
    assert m.get_all([b"a", b"c", b"d"]) == [9, 21, -1]
    assert m.utilization == 1.0


def test_put_all_stops_at_max_entries_and_at_a_32_bit_delta(record_kernels):
    m = CompactOffsetMap(16 * 100)
    # Kafka's rule: once the map holds max_entries keys even an overwrite is refused
    assert m.put_all([b"a", b"a", b"b", b"a", b"c"], [1, 2, 3, 4, 5], 2) == 3
    assert (m.size, m.latest_offset, m.get(b"a"), m.get(b"b")) == (2, 3, 2, 3)
    m.clear()
    base = 2**40
    assert m.put_all([b"a", b"b", b"c"], [base, base + 2**32 - 1, base + 2**32], 100) == 2
    assert m.latest_offset == base + 2**32 - 1
    with pytest.raises(OffsetMapFullError):
        m.put(b"c", base + 2**32)


def test_local_and_tiered_rounds_use_the_compact_map(tmp_path, record_kernels):
    from log.log_manager import LogManager

    lc = LogCleaner(CleanerConfig(dedupe_buffer_size=1 << 20), LogManager(tmp_path))
    for m in (lc._new_map(), lc._new_map(tiered=True)):
        assert isinstance(m, CompactOffsetMap) and m.kernels is record_kernels


def test_missing_compiled_kernels_warn_once(monkeypatch, caplog):
    monkeypatch.setattr(fastpath, "_load_compiled", lambda: None)
    prev = fastpath.use_kernels(None)
    try:
        with caplog.at_level(logging.WARNING, logger="cleaner.kernels.fastpath"):
            for _ in range(3):
                assert fastpath.kernels() is fastpath.pure_kernels()
                CompactOffsetMap(1 << 16)
        warnings = [r for r in caplog.records if r.name == "cleaner.kernels.fastpath"]
        assert len(warnings) == 1 and "not installed" in warnings[0].getMessage()
        assert not fastpath.is_compiled()
    finally:
        fastpath.use_kernels(prev)


def test_pure_python_env_switch(monkeypatch, caplog):
    monkeypatch.setenv(fastpath.PURE_PYTHON_ENV, "1")
    prev = fastpath.use_kernels(None)
    try:
        with caplog.at_level(logging.WARNING, logger="cleaner.kernels.fastpath"):
            assert fastpath.kernels() is fastpath.pure_kernels()
            fastpath.kernels()
        assert len([r for r in caplog.records if r.name == "cleaner.kernels.fastpath"]) == 1
    finally:
        fastpath.use_kernels(prev)
