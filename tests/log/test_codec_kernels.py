"""The format layer's codec kernels (log/record/_codec.pyx and its pure-Python twin): the readers'
decoder and the producers' encoder answer what the reference decoder and builder do, or nothing."""

from __future__ import annotations

import random

from hypothesis import given, settings
from hypothesis import strategies as st

from log.errors import CorruptRecordError
from log.record import CompressionType, RecordBatch, RecordBatchBuilder
from log.record import kernels as fastpath
from log.record.batch import RECORDS_OFFSET
from log.record.decode import iter_record_fields

COMPILED = fastpath.compiled_kernels()
PURE = fastpath.pure_kernels()


def test_compiled_kernels_are_built():
    # `pip install -e .` compiles them wherever gcc and the Python headers exist (this machine)
    assert COMPILED is not None


def _mutated(data: bytes, edits: list[tuple[int, int]], cut: int) -> bytes:
    """``data`` with bytes overwritten at ``edits`` (positions wrap around) and ``cut`` bytes cut off its end."""
    buf = bytearray(data)
    for pos, byte in edits:
        if buf:
            buf[pos % len(buf)] = byte
    if cut:
        buf = buf[: max(0, len(buf) - cut)]
    return bytes(buf)


def _reference_fields(data: bytes, count: int, base: int, base_ts: int, base_seq: int, append_time: int | None):
    try:
        return list(iter_record_fields(data, count, base, base_ts, base_seq, append_time))
    except CorruptRecordError:
        return None


@settings(max_examples=400, deadline=None)
@given(n=st.integers(0, 12), seed=st.integers(0, 10**6), edits=st.lists(
    st.tuples(st.integers(0, 10**6), st.integers(0, 255)), max_size=3), cut=st.integers(0, 40),
    extra=st.integers(-2, 2), base_seq=st.sampled_from([-1, 0, 5, 2**31 - 3]),
    append_time=st.sampled_from([None, 1_700_000_000_123]), headers=st.booleans())
def test_decode_records_is_the_reference_decoder_or_nothing(n, seed, edits, cut, extra, base_seq, append_time,
                                                             headers):
    # the readers' compiled decoder: the reference's exact tuples, or None (the caller then runs
    # the reference, which raises its own error) -- never a different answer
    rnd = random.Random(seed)
    b = RecordBatchBuilder(100)
    off = 99
    for _ in range(n):
        off += rnd.randrange(1, 3)
        key = None if rnd.random() < 0.2 else bytes(rnd.randrange(256) for _ in range(rnd.randrange(0, 20)))
        value = None if rnd.random() < 0.2 else bytes(rnd.randrange(256) for _ in range(rnd.randrange(0, 300)))
        hs = (("h", b"v"), ("é", None)) if headers and rnd.random() < 0.3 else ()
        b.append(off, 1_700_000_000_000 + rnd.randrange(-10**6, 10**6), key, value, hs)
    if n == 0:
        data, base, base_ts = b"", 100, 0
    else:
        raw = b.build()
        batch = RecordBatch(raw)
        data, base, base_ts = raw[RECORDS_OFFSET:], batch.base_offset, batch.base_timestamp
    clean = _reference_fields(data, n, base, base_ts, base_seq, append_time)
    fast = COMPILED.decode_records(data, n, base, base_ts, base_seq, append_time)
    if not any(hs for *_x, hs, _s in clean):
        assert fast == clean  # well-formed records without headers: always decoded here
    data = _mutated(data, edits, cut)
    count = max(0, n + extra)
    ref = _reference_fields(data, count, base, base_ts, base_seq, append_time)
    fast = COMPILED.decode_records(data, count, base, base_ts, base_seq, append_time)
    assert fast is None or fast == ref
    assert PURE.decode_records(data, count, base, base_ts, base_seq, append_time) is None


def test_batch_records_use_the_compiled_decoder_and_fall_back_for_headers():
    b = RecordBatchBuilder(0, base_sequence=7, producer_id=3, producer_epoch=0)
    b.append(0, 1000, b"k", b"v")
    b.append(1, 1001, None, None)
    plain = RecordBatch(b.build())
    assert [(r.offset, r.timestamp, r.key, r.value, r.headers, r.sequence) for r in plain.records()] == \
        list(plain.iter_record_fields())
    b = RecordBatchBuilder(0)
    b.append(0, 1000, b"k", b"v", (("h", b"x"),))
    with_headers = RecordBatch(b.build())
    assert [r.headers for r in with_headers.records()] == [(("h", b"x"),)]
    compiled = list(plain.records())
    prev = fastpath.use_kernels(PURE)
    try:
        assert list(RecordBatch(bytes(plain.raw)).records()) == compiled
    finally:
        fastpath.use_kernels(prev)


_BYTES_OR_NONE = st.one_of(st.none(), st.binary(max_size=300))


@settings(max_examples=300, deadline=None)
@given(recs=st.lists(st.tuples(_BYTES_OR_NONE, _BYTES_OR_NONE, st.sampled_from(
    [-1, 0, 5, 1_700_000_000_000, 1_700_000_000_000 - 10**9, 2**63 - 1, 2**62])), min_size=1, max_size=20),
    base_offset=st.sampled_from([0, 7, 2**40]), codec=st.sampled_from(list(CompressionType)),
    odd=st.sampled_from([None, "bytearray", "bool", "below"]))
def test_encode_records_writes_what_the_builder_appends(recs, base_offset, codec, odd):
    keys, values, timestamps = [list(x) for x in zip(*recs, strict=True)]
    if odd == "bytearray":
        keys[0] = bytearray(b"k")
    elif odd == "bool":
        timestamps[0] = True
    elif odd == "below":
        timestamps[-1] = -2

    def one_by_one():
        b = RecordBatchBuilder(base_offset, compression=codec)
        for i, (k, v, t) in enumerate(zip(keys, values, timestamps, strict=True)):
            b.append(base_offset + i, t, k, v)
        return b.build()

    try:
        expected = one_by_one()
    except Exception as e:  # noqa: BLE001 - the same refusal must come out of both ways
        expected = type(e)
    b = RecordBatchBuilder(base_offset, compression=codec)
    fast = b.append_new_records(keys, values, timestamps)
    assert fast == (odd is None and max(timestamps) - timestamps[0] <= 2**63 - 1
                    and timestamps[0] - min(timestamps) <= 2**63)
    if not fast:
        return  # the caller then appends one by one (the reference)
    assert b.build() == expected  # byte for byte, header and CRC included
    prev = fastpath.use_kernels(PURE)
    try:
        assert not RecordBatchBuilder(0).append_new_records(keys, values, timestamps)
    finally:
        fastpath.use_kernels(prev)


def _reference_check(data: bytes, count: int, base_ts: int, need_key: bool, check_time: bool, now: int,
                     max_diff: int) -> int | None:
    """What the produce path's reference walk concludes: the maximum timestamp, or None where it
    raises or finds a broken rule."""
    fields = _reference_fields(data, count, 0, base_ts, -1, None)
    if fields is None:
        return None
    max_ts = -1
    for i, (off, ts, key, *_rest) in enumerate(fields):
        if off != i or (need_key and key is None) or (check_time and abs(ts - now) > max_diff):
            return None
        max_ts = max(max_ts, ts)
    return max_ts


@settings(max_examples=400, deadline=None)
@given(n=st.integers(0, 12), seed=st.integers(0, 10**6), edits=st.lists(
    st.tuples(st.integers(0, 10**6), st.integers(0, 255)), max_size=3), cut=st.integers(0, 40),
    extra=st.integers(-2, 2), need_key=st.booleans(), max_diff=st.sampled_from([None, 0, 500_000, 2**62]),
    headers=st.sampled_from(["none", "ascii", "utf8", "bad-utf8"]), gaps=st.booleans())
def test_check_produced_records_is_the_reference_or_nothing(n, seed, edits, cut, extra, need_key, max_diff, headers,
                                                            gaps):
    # the produce path's compiled checker answers the reference walk's maximum timestamp when
    # every record passes, else None (the caller then runs the reference) -- never a batch the
    # reference would refuse, and every clean batch of well-formed records is vouched for
    rnd = random.Random(seed)
    b = RecordBatchBuilder(0)
    off = -1
    now = 1_700_000_000_000
    for _ in range(n):
        off += rnd.randrange(1, 3) if gaps else 1
        key = None if rnd.random() < 0.1 else bytes(rnd.randrange(256) for _ in range(rnd.randrange(0, 20)))
        value = None if rnd.random() < 0.2 else bytes(rnd.randrange(256) for _ in range(rnd.randrange(0, 300)))
        hs: tuple = ()
        if headers != "none" and rnd.random() < 0.5:
            hs = (("h", b"v"), ("k2", None)) if headers == "ascii" else (("é", b"v"),)
        b.append(off, now + rnd.randrange(-10**6, 10**6), key, value, hs)
    if n == 0:
        data, base_ts = b"", 0
    else:
        raw = b.build()
        data, base_ts = raw[RECORDS_OFFSET:], RecordBatch(raw).base_timestamp
    if headers == "bad-utf8" and n:
        data = data.replace("é".encode(), b"\xff\xfe")  # a header key that is not UTF-8 (same length)
    check_time, diff = max_diff is not None, max_diff if max_diff is not None else 0
    ref = _reference_check(data, n, base_ts, need_key, check_time, now, diff)
    fast = COMPILED.check_produced_records(data, n, base_ts, need_key, check_time, now, diff)
    assert fast == ref or (fast is None and max_diff == 2**62)  # beyond 2**61 it leaves it to the reference
    data = _mutated(data, edits, cut)
    count = max(0, n + extra)
    fast = COMPILED.check_produced_records(data, count, base_ts, need_key, check_time, now, diff)
    assert fast is None or fast == _reference_check(data, count, base_ts, need_key, check_time, now, diff)
    assert PURE.check_produced_records(data, count, base_ts, need_key, check_time, now, diff) is None
