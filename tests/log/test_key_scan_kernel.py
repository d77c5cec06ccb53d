"""The key-index scan kernel (``md5_keys``: _codec_md5.pxi and its pure-Python twin) and
``scan_keys`` on it: the same digests as the Python record walker with hashlib's MD5, on random
logs (codecs, tombstones, keyless records, transactional and control batches, offset ranges),
and the same CorruptRecordError where the walker refuses a record."""

from __future__ import annotations

import hashlib
import random
import types
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from log.errors import CorruptRecordError
from log.index.key_index import KeyIndex, KeyScan, build_segment_indexes, scan_keys
from log.record import (
    CompressionType,
    ControlRecordType,
    RecordBatchBuilder,
    build_control_batch,
    compress,
    crc32c,
    iter_file_batches,
)
from log.record import kernels as fastpath
from log.record.batch import HEADER, RECORDS_OFFSET
from log.record.decode import iter_key_offsets

COMPILED = fastpath.compiled_kernels()
PURE = fastpath.pure_kernels()
KERNELS = pytest.mark.parametrize("k", [COMPILED, PURE], ids=["compiled", "pure"])
CODECS = list(CompressionType)


def test_the_compiled_kernel_has_libcrypto():
    # setup.py links OpenSSL's libcrypto where its headers exist (this machine: libssl-dev)
    assert COMPILED is not None and COMPILED.MD5_KEYS


# ---- the kernel on one records section ---------------------------------------------------------

def _section(n: int, seed: int) -> bytes:
    rnd = random.Random(seed)
    b = RecordBatchBuilder(100)
    off = 99
    for _ in range(n):
        off += rnd.randrange(1, 3)
        key = None if rnd.random() < 0.2 else rnd.randbytes(rnd.randrange(0, 20))
        value = None if rnd.random() < 0.3 else rnd.randbytes(rnd.randrange(0, 200))
        b.append(off, 1_700_000_000_000 + rnd.randrange(-10**6, 10**6), key, value)
    return b.build()[RECORDS_OFFSET:]


def _reference(data: bytes, count: int, base: int, start: int, stop: int) -> tuple[bytes, bytes] | None:
    out, dead = [], []
    try:
        for off, key, has_value in iter_key_offsets(data, count, base):
            if key is not None and start <= off < stop:
                d = hashlib.md5(key).digest()
                out.append(d)
                if not has_value:
                    dead.append(d)
    except CorruptRecordError:
        return None
    return b"".join(out), b"".join(dead)


@KERNELS
@settings(max_examples=400, deadline=None)
@given(n=st.integers(1, 40), seed=st.integers(0, 10**6), edits=st.lists(
    st.tuples(st.integers(0, 10**6), st.integers(0, 255)), max_size=3), cut=st.integers(0, 40),
    extra=st.integers(-3, 2), start=st.integers(-5, 200), span=st.integers(0, 200),
    base=st.sampled_from([100, 0, 2**62, 2**63 - 10]))
def test_md5_keys_refuses_what_the_walker_refuses_and_hashes_what_it_reads(k, n, seed, edits, cut, extra, start,
                                                                             span, base):
    buf = bytearray(_section(n, seed))
    for pos, byte in edits:
        buf[pos % len(buf)] = byte
    if cut:
        buf = buf[: max(0, len(buf) - cut)]
    data = bytes(buf)
    count = max(-1, n + extra)
    if not k.MD5_KEYS:  # a build without libcrypto says so and computes nothing
        assert k.md5_keys(data, count, base, 0, 2**63) == (k.UNSUPPORTED, b"", b"")
        return
    start, stop = base + start, base + start + span
    ref = _reference(data, count, base, start, stop)
    for section in (data, memoryview(data)):  # the scan passes an uncompressed batch's own bytes
        status, digests, tombstones = k.md5_keys(section, count, base, start, stop)
        if ref is None:
            assert status == k.CORRUPT and digests == tombstones == b""
        else:
            assert status == k.OK
            assert (digests, tombstones) == ref


@KERNELS
def test_md5_keys_on_empty_sections_and_unbounded_ranges(k):
    if not k.MD5_KEYS:
        pytest.skip("built without libcrypto")
    assert k.md5_keys(b"", 0, 0, 0, 2**63) == (k.OK, b"", b"")
    assert k.md5_keys(b"\x00", 0, 0, 0, 2**63)[0] == k.CORRUPT  # bytes after 0 records
    assert k.md5_keys(b"", 1, 0, 0, 2**63)[0] == k.CORRUPT
    data = _section(5, 1)
    assert k.md5_keys(data, 5, 100, -(2**70), 2**70)[1] == _reference(data, 5, 100, -(2**70), 2**70)[0]
    assert k.md5_keys(data, 5, 100, 2**70, 2**71)[1:] == (b"", b"")
    # a huge declared count in a small section is refused, not allocated
    assert k.md5_keys(data, 2**31 - 1, 100, 0, 2**63)[0] == k.CORRUPT


# ---- scan_keys over random logs ----------------------------------------------------------------

def _reference_scan(path: Path, start: int = 0, end: int | None = None) -> KeyScan:
    """scan_keys as it was before the kernel: the record walker and hashlib per key."""
    parts, dead = [], []
    transactional, horizon, records = False, None, 0
    stop = end if end is not None else 2**63
    for _pos, batch in iter_file_batches(path, 0, path.stat().st_size, source=str(path)):
        transactional = transactional or batch.is_transactional or batch.is_control
        if batch.has_delete_horizon:
            h = batch.delete_horizon_ms
            if h is not None and (horizon is None or h < horizon):
                horizon = h
        if batch.is_control:
            continue
        records += batch.records_count
        if batch.last_offset < start or batch.base_offset >= stop:
            continue
        for off, key, has_value in batch.iter_key_offsets():
            if key is not None and start <= off < stop:
                d = hashlib.md5(key).digest()
                parts.append(d)
                if not has_value:
                    dead.append(d)

    def arr(p: list[bytes]) -> np.ndarray:
        return np.frombuffer(b"".join(p), dtype=np.uint8).reshape(-1, 16) if p else np.zeros((0, 16), np.uint8)

    return KeyScan(arr(parts), arr(dead), transactional, horizon, records)


def _raw_batch(base: int, count: int, last_delta: int, section: bytes, codec: CompressionType,
               extra_attributes: int = 0) -> bytes:
    """A v2 batch around ``section`` (compressed with ``codec``), with a correct CRC."""
    body = compress(codec, section)
    attributes = int(codec) | extra_attributes
    head = bytearray(HEADER.pack(base, RECORDS_OFFSET - 12 + len(body), -1, 2, 0, attributes, last_delta,
                                 1_700_000_000_000, 1_700_000_000_000, -1, -1, -1, count))
    raw = head + body
    raw[17:21] = crc32c(bytes(raw[21:])).to_bytes(4, "big")
    return bytes(raw)


@st.composite
def _logs(draw: st.DrawFn) -> tuple[bytes, list[int], int]:
    """Random segment bytes: data batches of every codec (keyless records, tombstones, empty
    keys, offset gaps, delete horizons, transactional ones) and control batches."""
    rnd = random.Random(draw(st.integers(0, 10**9)))
    nbatches = draw(st.integers(1, 8))
    out: list[bytes] = []
    bases: list[int] = []
    off = draw(st.sampled_from([0, 1000, 2**40]))
    for _ in range(nbatches):
        kind = rnd.random()
        if kind < 0.15:
            out.append(build_control_batch(base_offset=off, timestamp=1, producer_id=7, producer_epoch=0,
                                           control_type=rnd.choice([ControlRecordType.COMMIT,
                                                                    ControlRecordType.ABORT])))
            bases.append(off)
            off += 1
            continue
        txn = kind < 0.3
        b = RecordBatchBuilder(off, compression=rnd.choice(CODECS),
                               producer_id=7 if txn else -1, producer_epoch=0 if txn else -1,
                               base_sequence=0 if txn else -1, is_transactional=txn,
                               delete_horizon_ms=rnd.choice([None, None, rnd.randrange(10**12)]))
        bases.append(off)
        for _ in range(rnd.randrange(1, 60)):
            key = None if rnd.random() < 0.15 else (b"" if rnd.random() < 0.05 else b"k%d" % rnd.randrange(30))
            value = None if rnd.random() < 0.2 else rnd.randbytes(rnd.randrange(0, 150))
            b.append(off, 1_700_000_000_000 + rnd.randrange(1000), key, value)
            off += rnd.randrange(1, 4)
        out.append(b.build())
    return b"".join(out), bases, off


def _unsupported() -> types.SimpleNamespace:
    """The compiled kernels as a build without libcrypto exposes them."""
    ns = types.SimpleNamespace(**{n: getattr(COMPILED, n) for n in dir(COMPILED) if not n.startswith("__")})
    ns.MD5_KEYS = False
    ns.md5_keys = lambda *a: (COMPILED.UNSUPPORTED, b"", b"")
    return ns


def _scan_with(kernels: object, path: Path, start: int, end: int | None) -> KeyScan | str:
    prev = fastpath.use_kernels(kernels)  # type: ignore[arg-type]
    try:
        return scan_keys(path, start, end)
    except CorruptRecordError as e:
        return f"{type(e).__name__}: {e}"
    finally:
        fastpath.use_kernels(prev)


def _same(a: KeyScan | str, b: KeyScan | str) -> None:
    if isinstance(a, str) or isinstance(b, str):
        assert a == b
        return
    assert a.digests.shape == b.digests.shape and a.tombstones.shape == b.tombstones.shape
    assert a.digests.tobytes() == b.digests.tobytes()
    assert a.tombstones.tobytes() == b.tombstones.tobytes()
    assert (a.has_transactional_batches, a.min_delete_horizon_ms, a.data_records) == (
        b.has_transactional_batches, b.min_delete_horizon_ms, b.data_records)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(log=_logs(), lo=st.floats(-0.1, 1.1), span=st.one_of(st.none(), st.floats(0, 1.2)),
       damage=st.one_of(st.none(), st.tuples(st.integers(0, 10**6), st.integers(0, 10**6), st.integers(0, 255),
                                             st.booleans())))
def test_scan_keys_with_the_kernel_is_the_python_path(tmp_path_factory, log, lo, span, damage):
    data, bases, next_offset = log
    if damage is not None:
        # one byte of one data batch's (decompressed) records section changed (often among the
        # first record's length, offset and key varints), the batch re-framed
        which, pos, byte, head = damage
        batches = [b for _p, b in iter_file_batches(_write(tmp_path_factory, data))]
        data_batches = [i for i, b in enumerate(batches) if not b.is_control]
        if data_batches:
            i = data_batches[which % len(data_batches)]
            b = batches[i]
            section = bytearray(b._records_section())
            section[pos % (min(len(section), 8) if head else len(section))] = byte
            raws = [bytes(x.raw) for x in batches]
            raws[i] = _raw_batch(b.base_offset, b.records_count, b.last_offset_delta, bytes(section),
                                 b.compression, b.attributes & 0x78)
            data = b"".join(raws)
    path = tmp_path_factory.mktemp("scan") / "00000000000000000000.log"
    path.write_bytes(data)
    width = next_offset - bases[0]
    start = bases[0] + int(lo * width)
    end = None if span is None else start + int(span * width)
    try:
        ref: KeyScan | str = _reference_scan(path, start, end)
    except CorruptRecordError as e:
        ref = f"{type(e).__name__}: {e}"
    for kernels in (COMPILED, PURE, _unsupported()):
        _same(_scan_with(kernels, path, start, end), ref)
    if end is None and start <= bases[0] and not isinstance(ref, str):
        # the persisted objects built from it are the same bytes
        scan = _scan_with(COMPILED, path, 0, None)
        assert not isinstance(scan, str)
        assert KeyIndex.from_scan(scan).to_bytes() == KeyIndex.from_scan(_reference_scan(path)).to_bytes()


def _write(tmp_path_factory: pytest.TempPathFactory, data: bytes) -> Path:
    path = tmp_path_factory.mktemp("orig") / "00000000000000000000.log"
    path.write_bytes(data)
    return path


@pytest.mark.parametrize("codec", [CompressionType.NONE, CompressionType.LZ4, CompressionType.GZIP])
@pytest.mark.parametrize("damage", ["key_length", "truncated", "trailing", "count"])
def test_scan_keys_raises_the_readers_error_for_a_corrupt_record(tmp_path, codec, damage):
    good = RecordBatchBuilder(0, compression=codec)
    for i in range(5):
        good.append(i, 1, b"a%d" % i, b"v")
    sec = RecordBatchBuilder(5)
    for i in range(5, 9):
        sec.append(i, 1, b"b%d" % i, b"value")
    section = bytearray(sec.build()[RECORDS_OFFSET:])
    count = 4
    if damage == "key_length":
        section[section.index(b"b7") - 1] = 0x07  # zigzag -4: an invalid key size
    elif damage == "truncated":
        section = section[:-3]
    elif damage == "trailing":
        section += b"\x00\x00"
    else:
        count = 5
    path = tmp_path / "00000000000000000000.log"
    path.write_bytes(good.build() + _raw_batch(5, count, 4, bytes(section), codec))
    with pytest.raises(CorruptRecordError) as ref:
        _reference_scan(path)
    for kernels in (COMPILED, PURE, _unsupported()):
        prev = fastpath.use_kernels(kernels)
        try:
            with pytest.raises(CorruptRecordError) as got:
                scan_keys(path)
            assert str(got.value) == str(ref.value)
            with pytest.raises(CorruptRecordError):
                build_segment_indexes(path, 0.01)
        finally:
            fastpath.use_kernels(prev)
    assert "batch at base offset 5" in str(ref.value)
