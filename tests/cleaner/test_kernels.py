"""The cleaner's kernels (cleaner/kernels/_fastpath.pyx and its pure-Python reference): SipHash
vectors, the 16-byte-slot key table against a dict, and record scanning that refuses exactly what
``decode.iter_key_offsets`` refuses."""

from __future__ import annotations

import random

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from cleaner.kernels import fastpath
from log.errors import CorruptRecordError
from log.record import RecordBatch, RecordBatchBuilder
from log.record.batch import RECORDS_OFFSET
from log.record.decode import iter_key_offsets

COMPILED = fastpath.compiled_kernels()
PURE = fastpath.pure_kernels()
KERNELS = pytest.mark.parametrize("k", [COMPILED, PURE], ids=["compiled", "pure"])


def test_compiled_kernels_are_built():
    # `pip install -e .` compiles them wherever gcc and the Python headers exist (this machine)
    assert COMPILED is not None


def test_siphash_128_reference_vectors():
    # Aumasson & Bernstein's vectors_sip128: key 00..0f, message 00..(n-1)
    key = bytes(range(16))
    assert COMPILED.siphash128(b"", key).hex() == "a3817f04ba25a8e66df67214c7550293"
    assert COMPILED.siphash128(bytes(range(15)), key).hex() == "5493e99933b0a8117e08ec0f97cfc3d9"


def test_siphash_depends_on_the_key():
    assert COMPILED.siphash128(b"k", bytes(16)) != COMPILED.siphash128(b"k", bytes(15) + b"\x01")


@KERNELS
def test_key_table_matches_a_dict(k):
    rnd = random.Random(7)
    t = k.KeyTable(100_000)
    t.reset(bytes(16))
    ref: dict[bytes, int] = {}
    for off in range(20_000):
        key = b"key-%d" % rnd.randrange(5000) if rnd.random() < 0.9 else b""
        assert t.put(key, 1000 + off, 10**9) == k.OK
        ref[key] = 1000 + off
    assert t.size == len(ref)
    assert t.base == 1000
    for key, off in ref.items():
        assert t.get(key) == off
    assert t.get(b"absent") == -1
    # the table grew with the keys, never to the capacity
    assert t.slots < t.capacity and t.memory_bytes == 16 * t.slots
    assert len(t.digests()) == len(ref) and all(len(d) == 12 for d in t.digests())


@KERNELS
def test_key_table_refuses_even_an_overwrite_once_full(k):
    t = k.KeyTable(10)
    t.reset(bytes(16))
    assert t.put(b"a", 5, 2) == k.OK
    assert t.put(b"b", 6, 2) == k.OK
    assert t.put(b"a", 7, 2) == k.FULL  # Kafka: size >= maxEntries refuses any put
    assert t.get(b"a") == 5
    # every physical slot taken by other keys: full whatever max_entries says
    t = k.KeyTable(3)
    t.reset(bytes(16))
    for i, key in enumerate((b"x", b"y", b"z")):
        assert t.put(key, i, 10) == k.OK
    assert t.put(b"w", 3, 10) == k.FULL
    assert [t.get(x) for x in (b"x", b"y", b"z", b"w")] == [0, 1, 2, -1]


@KERNELS
def test_key_table_offsets_are_32_bit_deltas_from_the_first_put(k):
    t = k.KeyTable(100)
    t.reset(bytes(16))
    base = 3 * 2**40
    assert t.put(b"a", base, 100) == k.OK
    assert t.put(b"b", base + 2**32 - 1, 100) == k.OK
    assert t.get(b"b") == base + 2**32 - 1
    assert t.put(b"c", base + 2**32, 100) == k.DELTA_OVERFLOW
    assert t.get(b"c") == -1 and t.size == 2


@KERNELS
def test_reset_forgets_everything(k):
    t = k.KeyTable(5000)
    t.reset(bytes(16))
    for i in range(3000):
        t.put(b"%d" % i, i, 5000)
    t.reset(b"\x01" * 16)
    assert (t.size, t.slots, t.memory_bytes, t.base) == (0, 0, 0, -1)
    assert t.get(b"1") == -1


@KERNELS
def test_the_table_doubles_before_it_is_half_full(k):
    t = k.KeyTable(1 << 20)
    t.reset(bytes(16))
    for i in range(20_000):
        assert t.put(b"k%d" % i, i, 10**9) == k.OK
        assert t.size * 2 <= t.slots
    assert t.slots == 65536  # 20,000 keys: 32768 slots would be more than half full


def test_table_memory_is_kept_for_the_next_table_within_its_budget():
    k = COMPILED
    t = k.KeyTable(1 << 20)  # a 16 MiB budget
    t.reset(bytes(16))
    for i in range(100_000):  # grows through 64 KiB .. 2 MiB to 262144 slots (4 MiB)
        t.put(b"k%d" % i, i, 10**9)
    t.reset(b"\x01" * 16)  # the 4 MiB table is let go of: kept, with the blocks it grew through
    kept = k.spare_table_bytes()
    assert 4 << 20 <= kept <= 16 << 20
    # a new table growing through the same sizes takes the kept blocks, zeroed (no stale slot)
    t2 = k.KeyTable(1 << 20)
    t2.reset(bytes(16))
    ref = {}
    for i in range(100_000):
        key = b"x%d" % (i % 70_000)
        assert t2.put(key, 10**6 + i, 10**9) == k.OK
        ref[key] = 10**6 + i
    assert k.spare_table_bytes() < kept
    assert all(t2.get(key) == off for key, off in ref.items())
    assert t2.get(b"k5") == -1 and t2.size == len(ref)
    del t2
    # a table whose budget is smaller than a kept block keeps at most its budget
    small = k.KeyTable(70_000)  # 1.1 MiB budget
    small.reset(bytes(16))
    for i in range(30_000):
        small.put(b"s%d" % i, i, 10**9)
    small.reset(bytes(16))
    assert k.spare_table_bytes() <= 70_000 * 16


def test_compiled_digests_are_keyed_per_round():
    t = COMPILED.KeyTable(100)
    t.reset(bytes(16))
    t.put(b"key", 1, 100)
    first = t.digests()
    t.reset(b"\x07" * 16)
    t.put(b"key", 1, 100)
    assert t.digests() != first
    assert t.digests()[0] == COMPILED.siphash128(b"key", b"\x07" * 16)[:12]


def _records_section(n: int, seed: int) -> tuple[bytes, int]:
    rnd = random.Random(seed)
    b = RecordBatchBuilder(100)
    off = 99
    for _ in range(n):
        off += rnd.randrange(1, 3)
        key = None if rnd.random() < 0.2 else bytes(rnd.randrange(256) for _ in range(rnd.randrange(0, 20)))
        value = None if rnd.random() < 0.2 else bytes(rnd.randrange(256) for _ in range(rnd.randrange(0, 300)))
        b.append(off, 1_700_000_000_000 + rnd.randrange(-10**6, 10**6), key, value)
    raw = b.build()
    return raw[RECORDS_OFFSET:], RecordBatch(raw).base_offset


def _reference_keys(data: bytes, count: int):
    try:
        return list(iter_key_offsets(data, count, 100))
    except CorruptRecordError:
        return None


@KERNELS
@settings(max_examples=300, deadline=None)
@given(n=st.integers(1, 12), seed=st.integers(0, 10**6), edits=st.lists(
    st.tuples(st.integers(0, 10**6), st.integers(0, 255)), max_size=3), cut=st.integers(0, 40),
    extra=st.integers(-2, 2))
def test_scanning_refuses_exactly_what_the_reference_decoder_refuses(k, n, seed, edits, cut, extra):
    data, base = _records_section(n, seed)
    buf = bytearray(data)
    for pos, byte in edits:
        buf[pos % len(buf)] = byte
    if cut:
        buf = buf[: max(0, len(buf) - cut)]
    data = bytes(buf)
    count = max(0, n + extra)
    ref = _reference_keys(data, count)
    t = k.KeyTable(1000)
    t.reset(bytes(16))
    st_, index, last_put = k.map_records(t, data, count, base, 0, 1000)
    if st_ == k.DELTA_OVERFLOW:
        # edited offsets went below the round's first mapped offset: the round would end there
        assert ref is None or ref[index][0] < t.base
        return
    assert (st_ == k.CORRUPT) == (ref is None)
    keep = bytearray()
    st2, retained, _tomb, invalid, superseded = k.retain_records(t, data, count, base, 10**9, True, keep)
    assert (st2 == k.CORRUPT) == (ref is None)
    if ref is not None:
        keyed = [(o, key) for o, key, _hv in ref if key is not None and o >= 0]  # start = 0
        assert index == count
        assert last_put == (keyed[-1][0] if keyed else -1)
        latest = {key: o for o, key in keyed}
        for key, o in latest.items():
            assert t.get(key) == o
        # shouldRetainRecord with keyless records kept and deletes retained
        expected = [1 if key is None or o >= latest.get(key, -1) else 0 for o, key, _hv in ref]
        assert list(keep) == expected and retained == sum(expected)
        assert superseded == sum(1 for o, key, _hv in ref if key is not None and o < latest.get(key, -1))
        assert invalid == sum(1 for _o, key, _hv in ref if key is None)


@KERNELS
def test_map_records_stops_where_the_map_fills(k):
    data, base = _records_section(30, 3)
    ref = list(iter_key_offsets(data, 30, base))
    t = k.KeyTable(1000)
    t.reset(bytes(16))
    st_, index, last_put = k.map_records(t, data, 30, base, 0, 4)
    distinct: list[bytes] = []
    for i, (_o, key, _hv) in enumerate(ref):
        if key is None:
            continue
        if len(distinct) >= 4:
            expected_index = i
            break
        if key not in distinct:
            distinct.append(key)
    assert st_ == k.FULL and index == expected_index and t.size == 4
    assert last_put == max(o for o, key, _hv in ref[:index] if key is not None)


@KERNELS
def test_map_records_ignores_records_before_start(k):
    data, base = _records_section(20, 5)
    ref = list(iter_key_offsets(data, 20, base))
    start = ref[10][0]
    t = k.KeyTable(1000)
    t.reset(bytes(16))
    k.map_records(t, data, 20, base, start, 1000)
    assert t.size == len({key for o, key, _hv in ref if key is not None and o >= start})


@KERNELS
def test_retain_records_tells_superseded_from_expired_tombstones(k):
    # one scan gives the round report both reasons: a@100 superseded (also when it is a
    # tombstone), a@101 and b@102 tombstones past the horizon, c@103 kept
    b = RecordBatchBuilder(100)
    for off, key, value in ((100, b"a", None), (101, b"a", None), (102, b"b", None), (103, b"c", b"v")):
        b.append(off, 1000, key, value)
    raw = b.build()
    t = k.KeyTable(1000)
    t.reset(bytes(16))
    assert k.map_records(t, raw[RECORDS_OFFSET:], 4, 100, 0, 1000)[0] == k.OK
    keep = bytearray()
    st_, retained, tomb, invalid, superseded = k.retain_records(t, raw[RECORDS_OFFSET:], 4, 100, 103, False, keep)
    assert (st_, retained, tomb, invalid, superseded, list(keep)) == (k.OK, 1, False, 0, 1, [0, 0, 0, 1])
    st_, retained, tomb, invalid, superseded = k.retain_records(t, raw[RECORDS_OFFSET:], 4, 100, 103, True, keep)
    assert (retained, tomb, superseded, list(keep)) == (3, True, 1, [0, 1, 1, 1])
