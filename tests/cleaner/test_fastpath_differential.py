"""The record kernels clean to the same bytes as the reference cleaner.

Three engines over the same random workloads (keys, tombstones, keyless records, headers,
idempotent and transactional producers with COMMIT/ABORT, every codec, LogAppendTime topics,
maps that fill so rounds take several passes): the reference path (SkimpyOffsetMap, decode.py,
the builder), and CompactOffsetMap with the compiled kernels and with the pure-Python ones.
After every round every file of the log (.log, .txnindex, ...) and the checkpoint must be equal.
"""

from __future__ import annotations

import random
import tempfile
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from cleaner import fast_cleaner, fast_reader
from cleaner.cleaner import Cleaner
from cleaner.config import CleanerConfig
from cleaner.fast_cleaner import _rebuild_fast
from cleaner.kernels import fastpath
from cleaner.log_to_clean import LogToClean, cleanable_offsets
from cleaner.offset_map import CompactOffsetMap, SkimpyOffsetMap
from cleaner.retention import rebuild_batch as _rebuild
from log.clock import MockClock
from log.config import LogConfig
from log.local_log import LocalLog, RecordSpec
from log.record import CompressionType, RecordBatch, RecordBatchBuilder
from log.record.decode import iter_key_offsets
from tests.cleaner.model import Producers

KEYS = [b"k%d" % i for i in range(10)] + [b""]
CODECS = list(CompressionType)
ENGINES = ("reference", "compiled", "pure")

record = st.tuples(
    st.one_of(st.none(), st.sampled_from(KEYS)),
    st.one_of(st.none(), st.binary(max_size=40)),
    st.integers(-3000, 3000),  # timestamp offset from now (the builder refuses < -1 overall)
    st.sampled_from([(), (), (), (("h", b"v"),), (("h", None), ("é", b""))]),
)
op = st.one_of(
    st.tuples(st.just("rec"), st.lists(record, min_size=1, max_size=6),
              st.sampled_from(["plain", "plain", "idem", "txn10", "txn11"]), st.sampled_from(CODECS),
              st.integers(0, 50)),
    st.tuples(st.just("end"), st.sampled_from((10, 11)), st.booleans()),
    st.tuples(st.just("roll")),
)


def _build(root: Path, ops, segment_bytes: int, log_append: bool) -> LocalLog:
    clock = MockClock()
    cfg = {"segment.bytes": segment_bytes, "delete.retention.ms": 10**6}
    if log_append:
        cfg["message.timestamp.type"] = "LogAppendTime"
    log = LocalLog(root / "t-0", LogConfig.from_dict(cfg), clock=clock)
    prod = Producers(log)
    for o in ops:
        if o[0] == "rec":
            _, recs, kind, codec, dt = o
            clock.advance(dt)
            now = clock.milliseconds()
            specs = [RecordSpec(k, v if k is not None or v is not None else b"", now + ts, h)
                     for k, v, ts, h in recs]
            if kind == "plain":
                prod.append(specs, compression=codec)
            elif kind == "idem":
                prod.append(specs, pid=1, compression=codec)
            else:
                prod.append(specs, pid=int(kind[3:]), transactional=True, compression=codec)
        elif o[0] == "end":
            if o[1] in prod.open_txn:
                prod.end(o[1], o[2])
        else:
            log.roll()
    log.roll()
    return log


def _new_map(engine: str, slots: int):
    if engine == "reference":
        return SkimpyOffsetMap(24 * slots)
    kernels = fastpath.compiled_kernels() if engine == "compiled" else fastpath.pure_kernels()
    assert kernels is not None, "the compiled record kernels are not built"
    return CompactOffsetMap(16 * slots, kernels)


def _files(log: LocalLog) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(log.dir.iterdir()) if p.is_file() and p.stat().st_size}


def _rounds(log: LocalLog, engine: str, slots: int, nows: list[int]):
    cfg = CleanerConfig(dedupe_buffer_size=max(24 * slots, 48), io_buffer_size=2048)
    cleaner = Cleaner(_new_map(engine, slots), cfg)
    checkpoint = None
    for now in nows:
        for _ in range(50):
            o = cleanable_offsets(log, checkpoint, now)
            ltc = LogToClean(log.topic_partition, log, o.first_dirty_offset, o.first_uncleanable_dirty_offset)
            if ltc.first_uncleanable_offset <= ltc.first_dirty_offset:
                break
            end, stats = cleaner.do_clean(ltc, now)
            yield end, _files(log), stats.as_dict()
            if end == checkpoint:
                break
            checkpoint = end


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(ops=st.lists(op, min_size=1, max_size=40), segment_bytes=st.integers(200, 3000),
       slots=st.integers(2, 40), log_append=st.booleans(), tiny_reads=st.booleans(), holes=st.booleans())
def test_compiled_and_pure_kernels_clean_to_the_reference_bytes(ops, segment_bytes, slots, log_append, tiny_reads,
                                                                holes):
    results = {}
    # tiny_reads: the chunk reader starts with a buffer smaller than a chunk, so it moves the
    # unread tail and grows the buffer all the time
    default_buffer = fast_reader.MIN_BUFFER
    # holes: every plain batch is noted and every run of superseded ones is skipped, however small
    default_holes = fast_cleaner.NOTE_MIN_BYTES, fast_cleaner.MIN_HOLE_BYTES
    with tempfile.TemporaryDirectory() as tmp:
        for engine in ENGINES:
            log = _build(Path(tmp) / engine, ops, segment_bytes, log_append)
            now = log.clock.milliseconds()
            fast_reader.MIN_BUFFER = 64 if tiny_reads else default_buffer
            if holes:
                fast_cleaner.NOTE_MIN_BYTES, fast_cleaner.MIN_HOLE_BYTES = 0, 1
            try:
                # first cleaning stamps tombstones/markers with a horizon; the later ones remove them
                results[engine] = list(_rounds(log, engine, slots, [now, now + 10**6 + 1, now + 3 * 10**6]))
            finally:
                fast_reader.MIN_BUFFER = default_buffer
                fast_cleaner.NOTE_MIN_BYTES, fast_cleaner.MIN_HOLE_BYTES = default_holes
            log.close()
    ref = results["reference"]
    for engine in ("compiled", "pure"):
        got = results[engine]
        assert [r[0] for r in got] == [r[0] for r in ref], engine
        for (_e, files, stats), (_re, ref_files, ref_stats) in zip(got, ref, strict=True):
            assert files == ref_files, engine
            for key in ("bytes_read", "bytes_written", "records_read", "records_retained", "map_bytes_read",
                        "map_records_read", "keyless_records_read", "batches_copied", "batches_rebuilt",
                        "batches_emptied", "batches_deleted", "map_full", "buffer_utilization", "checkpoint"):
                assert stats[key] == ref_stats[key], (engine, key)


def _random_batch(rnd: random.Random, codec: CompressionType, log_append: bool, horizon: int | None) -> bytes:
    b = RecordBatchBuilder(1000, compression=codec, producer_id=rnd.choice([-1, 7]), producer_epoch=0,
                           base_sequence=rnd.choice([-1, 5]),
                           timestamp_type=1 if log_append else 0,
                           log_append_time_ms=1_700_000_000_000 if log_append else None,
                           delete_horizon_ms=horizon)
    off = 999
    for _ in range(rnd.randrange(1, 30)):
        off += rnd.randrange(1, 4)
        key = rnd.choice([None, b"", b"a", b"key-%d" % rnd.randrange(100)])
        value = None if rnd.random() < 0.3 else bytes(rnd.randrange(256) for _ in range(rnd.randrange(0, 2000)))
        headers = () if rnd.random() < 0.9 else (("h", b"x"),)
        b.append(off, rnd.choice([0, 5, 1_700_000_000_000 + rnd.randrange(-10**7, 10**7), 2**40]), key, value,
                 headers)
    return b.build(last_offset_delta=off - 1000 + rnd.randrange(0, 3))


@settings(max_examples=400, deadline=None)
@given(seed=st.integers(0, 2**32), codec=st.sampled_from(CODECS), log_append=st.booleans(),
       old_horizon=st.sampled_from([None, 1_700_000_500_000]), new_horizon=st.booleans())
def test_rebuilt_batches_are_the_builders_bytes(seed, codec, log_append, old_horizon, new_horizon):
    rnd = random.Random(seed)
    b = RecordBatch(_random_batch(rnd, codec, log_append, old_horizon))
    data = b._records_section()
    n = len(list(iter_key_offsets(data, b.records_count, b.base_offset)))
    keep = bytearray(rnd.random() < 0.6 for _ in range(n))
    if not any(keep):
        keep[rnd.randrange(n)] = 1
    horizon = 1_700_000_900_000 if new_horizon else b.delete_horizon_ms
    expected = _rebuild(b, [bool(x) for x in keep], horizon)
    for kernels in (fastpath.compiled_kernels(), fastpath.pure_kernels()):
        omap = CompactOffsetMap(16 * 16, kernels)
        assert _rebuild_fast(b, data, keep, n, horizon, omap) == expected
    compiled = fastpath.compiled_kernels()
    has_headers = any(r.headers for r in b.records())
    out = compiled.rebuild_records(data, n, b.base_offset, b.base_timestamp, bytes(keep), horizon is not None,
                                   horizon or 0, log_append, b.max_timestamp, b.last_offset_delta)
    # the compiled encoder handles everything but headers (the builder re-encodes those)
    assert (out is None) == has_headers


@pytest.fixture
def record_kernels():
    """These tests pick their kernels themselves: no need for conftest's two runs."""
    return None


@settings(max_examples=400, deadline=None)
@given(seed=st.integers(0, 2**32), codec=st.sampled_from(CODECS), log_append=st.booleans(),
       old_horizon=st.sampled_from([None, 1_700_000_500_000]), retain_deletes=st.booleans(),
       edits=st.lists(st.tuples(st.integers(0, 10**6), st.integers(0, 255)), max_size=2), cut=st.integers(0, 3))
def test_one_scan_retain_and_rebuild_equals_the_two_kernels(seed, codec, log_append, old_horizon, retain_deletes,
                                                            edits, cut):
    # retain_and_rebuild decodes each record once; its answer must be retain_records' and, when
    # the cleaner rebuilds the batch, rebuild_records' bytes for the horizon the cleaner picks
    rnd = random.Random(seed)
    b = RecordBatch(_random_batch(rnd, codec, log_append, old_horizon))
    data = bytearray(b._records_section())
    for pos, byte in edits:
        data[pos % len(data)] = byte
    data = bytes(data[: len(data) - cut])
    k = fastpath.compiled_kernels()
    table = k.KeyTable(1000)
    table.reset(bytes(16))
    n = b.records_count
    k.map_records(table, data, n, b.base_offset, 0, 1000)
    latest = b.base_offset + rnd.randrange(0, 60)
    keep1, keep2 = bytearray(), bytearray()
    ref = k.retain_records(table, data, n, b.base_offset, latest, retain_deletes, keep1)
    new_horizon = 1_700_000_900_000
    got = k.retain_and_rebuild(table, data, n, b.base_offset, latest, retain_deletes, keep2, b.base_timestamp,
                               b.has_delete_horizon, b.delete_horizon_ms or 0, new_horizon, log_append,
                               b.max_timestamp, b.last_offset_delta)
    assert got[:5] == ref
    if ref[0] != k.OK:
        return
    assert keep2 == keep1
    _st, retained, tomb, _inv, _sup = ref
    need_horizon = tomb and not b.has_delete_horizon
    if retained == 0 or (retained == n and not need_horizon):
        assert got[5] is None
        return
    horizon = new_horizon if need_horizon else b.delete_horizon_ms
    expected = k.rebuild_records(data, n, b.base_offset, b.base_timestamp, bytes(keep1), horizon is not None,
                                 horizon or 0, log_append, b.max_timestamp, b.last_offset_delta)
    assert got[5] == expected
