"""SkimpyOffsetMap: Kafka's capacity, probing and latest-offset semantics."""

from __future__ import annotations

import hashlib

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from cleaner.errors import OffsetMapFullError
from cleaner.offset_map import ENTRY_SIZE, OffsetMap, SkimpyOffsetMap


def _kafka_position(key: bytes, attempt: int, slots: int) -> int:
    """Kafka's SkimpyOffsetMap.positionOf, written out plainly."""
    h = hashlib.md5(key).digest()
    i = min(attempt, 12)
    probe = int.from_bytes(h[i:i + 4], "big", signed=True) + max(0, attempt - 12)
    probe = (probe + 2**31) % 2**32 - 2**31
    probe = 0 if probe == -(2**31) else abs(probe)
    return probe % slots


def test_capacity_is_memory_over_24_bytes() -> None:
    m = SkimpyOffsetMap(24 * 100 + 23)
    assert m.slots == 100 and ENTRY_SIZE == 24
    assert m.memory_bytes == 24 * 100


def test_put_get_overwrite_clear_and_latest_offset() -> None:
    m = SkimpyOffsetMap(24 * 16)
    assert m.latest_offset == -1 and m.get(b"a") == -1
    m.put(b"a", 3)
    m.put(b"b", 5)
    m.put(b"a", 9)
    assert (m.get(b"a"), m.get(b"b"), m.size, m.latest_offset) == (9, 5, 2, 9)
    assert m.utilization == 2 / 16
    m.update_latest_offset(20)
    assert m.latest_offset == 20
    m.clear()
    assert (m.size, m.latest_offset, m.get(b"a")) == (0, -1, -1)


def test_full_map_refuses_a_put() -> None:
    m = SkimpyOffsetMap(24 * 3)
    for i in range(3):
        m.put(b"%d" % i, i)
    with pytest.raises(OffsetMapFullError):
        m.put(b"x", 10)


def test_probe_sequence_is_kafkas() -> None:
    m = SkimpyOffsetMap(24 * 97)
    import numpy as np

    from cleaner.offset_map import _hash_matrix

    keys = [b"key-%d" % i for i in range(50)]
    h = _hash_matrix(keys)
    w = m._windows(h)
    for attempt in (0, 1, 5, 12, 13, 40):
        got = m._probe(w, np.full(len(keys), attempt))
        assert got.tolist() == [_kafka_position(k, attempt, 97) for k in keys]


def test_first_key_goes_where_kafka_puts_it() -> None:
    m = SkimpyOffsetMap(24 * 1009)
    m.put(b"hello", 7)
    slot = _kafka_position(b"hello", 0, 1009)
    assert int(m._off[slot]) == 7


class DictMap(OffsetMap):
    """Reference: a dict with the same capacity rule (Kafka's FakeOffsetMap)."""

    def __init__(self, slots: int) -> None:
        self._slots, self._d, self._latest = slots, {}, -1

    slots = property(lambda self: self._slots)
    size = property(lambda self: len(self._d))
    latest_offset = property(lambda self: self._latest)

    def put(self, key, offset):
        self._d[key] = offset
        self._latest = offset

    def get(self, key):
        return self._d.get(key, -1)

    def clear(self):
        self._d.clear()
        self._latest = -1

    def update_latest_offset(self, offset):
        self._latest = offset


@settings(max_examples=200, deadline=None)
@given(st.lists(st.lists(st.integers(0, 40), max_size=60), max_size=6), st.integers(2, 50), st.integers(1, 50))
def test_put_all_equals_sequential_puts(chunks, slots, max_entries) -> None:
    m, ref = SkimpyOffsetMap(24 * slots), DictMap(slots)
    max_entries = min(max_entries, slots)
    off = 0
    for chunk in chunks:
        keys = [b"k%d" % k for k in chunk]
        offs = list(range(off, off + len(keys)))
        off += len(keys)
        assert m.put_all(keys, offs, max_entries) == ref.put_all(keys, offs, max_entries)
        assert m.size == ref.size
        if keys:
            assert m.latest_offset == ref.latest_offset
    probe = [b"k%d" % k for k in range(42)]
    assert m.get_all(probe) == ref.get_all(probe)
