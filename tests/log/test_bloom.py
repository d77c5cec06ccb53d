"""The per-segment key bloom filter format (log/index/bloom.py)."""

from __future__ import annotations

import hashlib

import pytest

from log.errors import CorruptIndexError, InvalidRequestError
from log.index.bloom import (
    HEADER,
    KeyBloomFilter,
    bloom_size_bytes,
    build_segment_bloom,
    estimate_expected_keys,
    key_digest,
)
from log.local_log import RecordSpec
from log.record import CompressionType


def test_members_are_found_by_key_and_by_md5_digest():
    keys = [f"key-{i}".encode() for i in range(1000)]
    bf = KeyBloomFilter.build(keys, expected=1000, fpp=0.01)
    assert all(bf.might_contain(k) for k in keys)
    assert all(bf.might_contain_digest(hashlib.md5(k).digest()) for k in keys)
    assert bf.might_contain_any([b"absent-1", keys[17], b"absent-2"])
    assert bf.might_contain_any_digest([key_digest(b"nope"), key_digest(keys[999])])
    assert 980 <= bf.count <= 1000 and bf.capacity == 1000 and bf.fpp == 0.01  # a false positive on add is not counted


def test_false_positive_rate_is_near_the_configured_one():
    n, probes = 20_000, 50_000
    for fpp in (0.01, 0.05):
        bf = KeyBloomFilter.build((f"member-{i}".encode() for i in range(n)), expected=n, fpp=fpp)
        fp = sum(bf.might_contain(f"other-{i}".encode()) for i in range(probes))
        rate = fp / probes
        # sized for n keys, a full filter answers at about fpp (pybloom rounds slices up: a bit below)
        assert fpp * 0.3 <= rate <= fpp * 1.5, (fpp, rate)


def test_empty_filter_contains_nothing_and_round_trips():
    bf = KeyBloomFilter.build([], expected=0, fpp=0.01)
    assert not bf.might_contain(b"x")
    assert not bf.might_contain_any([])
    again = KeyBloomFilter.from_bytes(bf.to_bytes())
    assert not again.might_contain(b"x") and again.count == 0


def test_underestimated_capacity_grows_instead_of_failing():
    keys = [f"k{i}".encode() for i in range(500)]
    bf = KeyBloomFilter.build(keys, expected=10, fpp=0.01)
    assert all(bf.might_contain(k) for k in keys)
    assert bf.capacity >= 500


def test_serialisation_round_trip_preserves_answers():
    keys = [f"k{i}".encode() for i in range(300)]
    bf = KeyBloomFilter.build(keys, expected=300, fpp=0.02)
    data = bf.to_bytes()
    assert data[:4] == b"TCBF" and data[4] == 2 and data[5] == 2  # version 2, scheme 2
    again = KeyBloomFilter.from_bytes(data)
    assert again.has_transactional_batches and again.min_delete_horizon_ms is None  # unknown: conservative
    probes = [f"k{i}".encode() for i in range(600)]
    assert [again.might_contain(p) for p in probes] == [bf.might_contain(p) for p in probes]
    assert (again.capacity, again.fpp, again.count, again.num_bits) == (bf.capacity, bf.fpp, bf.count, bf.num_bits)
    assert len(data) == bloom_size_bytes(300, 0.02)


@pytest.mark.parametrize("mutate", [
    lambda d: d[:10],                                   # shorter than the headers
    lambda d: b"XXXX" + d[4:],                          # bad magic
    lambda d: d[:4] + bytes([9]) + d[5:],               # unknown version
    lambda d: d[:5] + bytes([7]) + d[6:],               # unknown hash scheme
    lambda d: d[:-1] + bytes([d[-1] ^ 0xFF]),           # flipped bit in the bit array
    lambda d: d[:-3],                                   # truncated bit array
    lambda d: d[: HEADER.size + 2] + bytes([0x55]) + d[HEADER.size + 3:],  # payload header corrupted
])
def test_corrupt_blobs_raise_corrupt_index_error(mutate):
    data = KeyBloomFilter.build([b"a", b"b"], expected=2).to_bytes()
    with pytest.raises(CorruptIndexError):
        KeyBloomFilter.from_bytes(mutate(data), source="seg-1")


def test_payload_with_valid_crc_but_wrong_length_is_rejected():
    from log.record import crc32c

    data = KeyBloomFilter.build([b"a"], expected=100).to_bytes()
    body = data[HEADER.size:-5]
    forged = HEADER.pack(b"TCBF", data[4], 1, 0, crc32c(body)) + body
    with pytest.raises(CorruptIndexError, match="invalid"):
        KeyBloomFilter.from_bytes(forged)
    # a v2 body labelled v1 (summary bytes read as pybloom's header) fails fast too
    body = data[HEADER.size:]
    mislabelled = HEADER.pack(b"TCBF", 1, 1, 0, crc32c(body)) + body
    with pytest.raises(CorruptIndexError, match="inconsistent|invalid"):
        KeyBloomFilter.from_bytes(mislabelled)


def test_invalid_parameters():
    with pytest.raises(InvalidRequestError):
        KeyBloomFilter.build([b"a"], expected=1, fpp=0)
    with pytest.raises(InvalidRequestError):
        KeyBloomFilter.build([b"a"], expected=-1)
    with pytest.raises(InvalidRequestError):
        KeyBloomFilter.build_from_digests([b"short"], expected=1)
    with pytest.raises(InvalidRequestError):
        estimate_expected_keys(100, 0)


def test_size_overhead_is_about_1_2_bytes_per_key_at_one_percent():
    n = 100_000
    size = bloom_size_bytes(n, 0.01)
    assert 1.1 * n < size < 1.3 * n
    # 100-byte records: ~1.2% of the segment (the tiered-compaction KIP draft "~1-2%")
    assert size / (n * 100) < 0.02
    assert estimate_expected_keys(1 << 20, 100) == 10486


def test_build_segment_bloom_holds_every_data_key_of_a_segment(make_log):
    from log.record import ControlRecordType

    log = make_log(segment_bytes=1 << 20)
    keys = []
    for i in range(40):
        codec = list(CompressionType)[i % 5]
        batch = [RecordSpec(f"key-{i}-{j}".encode(), b"v" * 10) for j in range(5)]
        batch.append(RecordSpec(None, b"keyless"))
        log.append_records(batch, compression=codec)
        keys += [r.key for r in batch if r.key is not None]
    log.append_records([RecordSpec(b"txn-key", b"v")], producer_id=7, producer_epoch=0, base_sequence=0,
                       transactional=True)
    log.append_marker(7, 0, ControlRecordType.COMMIT)
    keys.append(b"txn-key")
    seg = log.active_segment
    bf = build_segment_bloom(seg, fpp=0.01)
    assert all(bf.might_contain(k) for k in keys)
    assert bf.capacity == 40 * 6 + 1  # data records, keyless included, control batch excluded
    assert bf.count <= len(keys)
    assert build_segment_bloom(seg.log_path).to_bytes() == bf.to_bytes()
    absent = sum(bf.might_contain(f"absent-{i}".encode()) for i in range(2000))
    assert absent < 2000 * 0.05


def test_segment_summary_records_transactions_and_earliest_horizon(tmp_path):
    from log.index.bloom import build_segment_bloom
    from log.record import ControlRecordType, RecordBatchBuilder, build_control_batch

    plain = RecordBatchBuilder(0)
    plain.append(0, 10, b"a", b"1")
    stamped = RecordBatchBuilder(1, delete_horizon_ms=5_000)
    stamped.append(1, 10, b"b", None)
    later = RecordBatchBuilder(2, delete_horizon_ms=9_000)
    later.append(2, 10, b"c", None)
    path = tmp_path / "00000000000000000000.log"
    path.write_bytes(plain.build() + stamped.build() + later.build())
    bloom = KeyBloomFilter.from_bytes(build_segment_bloom(path).to_bytes())
    assert not bloom.has_transactional_batches and bloom.min_delete_horizon_ms == 5_000
    assert bloom.might_contain(b"b") and bloom.count == 3

    marker = build_control_batch(base_offset=3, timestamp=1, producer_id=1, producer_epoch=0,
                                 control_type=ControlRecordType.COMMIT)
    path.write_bytes(plain.build() + marker)
    bloom = KeyBloomFilter.from_bytes(build_segment_bloom(path).to_bytes())
    assert bloom.has_transactional_batches and bloom.min_delete_horizon_ms is None


def _pybloom_blob(version: int, keys: list[bytes]) -> bytes:
    """A scheme 1 (pybloom-live) blob as earlier builds wrote it."""
    import io

    from pybloom_live import BloomFilter

    from log.index.bloom import HEADER, MAGIC, SCHEME_MD5_HEX, SUMMARY, key_digest
    from log.record import crc32c

    bf = BloomFilter(capacity=max(1, len(keys)), error_rate=0.01)
    for k in keys:
        bf.add(key_digest(k).hex())
    buf = io.BytesIO()
    bf.tofile(buf)
    body = (SUMMARY.pack(0, -1) if version == 2 else b"") + buf.getvalue()
    return HEADER.pack(MAGIC, version, SCHEME_MD5_HEX, 0, crc32c(body)) + body


def test_version_1_blobs_still_read_and_are_never_skippable():
    again = KeyBloomFilter.from_bytes(_pybloom_blob(1, [b"k"]))
    assert again.scheme == 1 and again.might_contain(b"k") and again.has_transactional_batches


def test_scheme_1_filters_answer_like_scheme_2_ones():
    import numpy as np

    from log.index.bloom import key_digest

    keys = [f"k{i}".encode() for i in range(200)]
    old = KeyBloomFilter.from_bytes(_pybloom_blob(2, keys))
    new = KeyBloomFilter.build(keys, expected=200)
    assert old.scheme == 1 and new.scheme == 2 and not old.has_transactional_batches
    for bloom in (old, new):
        assert all(bloom.might_contain(k) for k in keys)
        digests = np.frombuffer(b"".join(key_digest(k) for k in keys[:5]), dtype=np.uint8).reshape(-1, 16)
        assert bloom.might_contain_any_digest(digests) and bloom.might_contain_any_digest(list(map(bytes, digests)))
    assert KeyBloomFilter.from_bytes(old.to_bytes()).scheme == 1  # re-serialised as it was


def test_many_digests_are_tested_at_once():
    import os

    import numpy as np

    members = [os.urandom(16) for _ in range(1000)]
    bloom = KeyBloomFilter.build_from_digests(members, expected=1000, fpp=1e-6)
    probes = np.frombuffer(os.urandom(16 * 200_000), dtype=np.uint8).reshape(-1, 16)
    hits = sum(bloom.might_contain_digest(bytes(p)) for p in probes[:2000])
    assert hits <= 2  # 2000 probes at 1e-6
    mixed = np.vstack([probes, np.frombuffer(members[7], dtype=np.uint8)[None, :]])
    assert bloom.might_contain_any_digest(mixed)  # the one member among 200k probes is found
