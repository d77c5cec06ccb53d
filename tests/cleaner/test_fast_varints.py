"""Records whose varints are not minimal (the reader accepts them, the builder never writes
them) clean to the same bytes with the compiled kernels, which copy records as they are only
when every field is minimal, as with the pure-Python ones, which leave every rebuild to the
builder."""

from __future__ import annotations

import tempfile
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from cleaner.kernels import fastpath
from log.record.builder import _write_header_and_crc
from log.segment import LogSegment
from tests.cleaner.kernel_runs import map_then_clean


def _varint(v: int, pad: int) -> bytes:
    """Zigzag varint of ``v`` with ``pad`` extra continuation bytes (a non-minimal encoding)."""
    z = (v << 1) ^ (v >> 63)
    out = bytearray()
    while z >= 0x80:
        out.append((z & 0x7F) | 0x80)
        z >>= 7
    if not pad:
        return bytes(out + bytes([z]))
    out.append(z | 0x80)
    out += b"\x80" * (pad - 1) + b"\x00"
    return bytes(out)


field = st.sampled_from([0, 0, 0, 0, 1, 2])  # padding of one field
record = st.tuples(st.sampled_from([None, b"a", b"b", b"c"]), st.sampled_from([None, b"v", b"x" * 70, b"y" * 9000]),
                   st.tuples(field, field, field, field, field, field))


def _segment_bytes(batches: list[list[tuple[bytes | None, bytes | None, tuple[int, ...]]]]) -> list[tuple[bytes, int]]:
    out = []
    base = 100
    for recs in batches:
        body = bytearray()
        for od, (key, value, pads) in enumerate(recs):
            if key is None and value is None:
                value = b""
            r = bytearray(b"\x00") + _varint(0, pads[1]) + _varint(od, pads[2])
            r += _varint(-1, pads[3]) if key is None else _varint(len(key), pads[3]) + key
            r += _varint(-1, pads[4]) if value is None else _varint(len(value), pads[4]) + value
            r += _varint(0, pads[5])
            body += _varint(len(r), pads[0]) + r
        raw = _write_header_and_crc(bytearray(61) + body, base_offset=base, partition_leader_epoch=0, attributes=0,
                                    last_offset_delta=len(recs) - 1, base_timestamp=1000, max_timestamp=1000,
                                    producer_id=-1, producer_epoch=-1, base_sequence=-1, records_count=len(recs))
        out.append((raw, base + len(recs) - 1))
        base += len(recs)
    return out


def _clean(kernels, directory: Path, raws: list[tuple[bytes, int]]):  # type: ignore[no-untyped-def]
    """Map then clean a segment of ``raws`` with ``kernels``: output files, stats, error."""
    seg = LogSegment(directory / "src", 0, create=True, index_interval_bytes=64)
    for raw, last in raws:
        seg.append(raw, largest_offset=last, largest_timestamp=1000, offset_of_largest_timestamp=last)
    seg.close_writer()
    files, counts, error, _map = map_then_clean(kernels, seg, directory / "out")
    return files, counts, error


@pytest.fixture
def record_kernels():
    """These tests compare the two kernels themselves: no need for conftest's two runs."""
    return None


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(batches=st.lists(st.lists(record, min_size=1, max_size=6), min_size=1, max_size=12))
def test_non_minimal_varints_clean_alike(batches):
    raws = _segment_bytes(batches)
    results = []
    for kernels in (fastpath.compiled_kernels(), fastpath.pure_kernels()):
        with tempfile.TemporaryDirectory() as tmp:
            (Path(tmp) / "src").mkdir()
            results.append(_clean(kernels, Path(tmp), raws))
    assert results[0] == results[1]
    assert results[0][2] is None
