"""The exact key index format (log/index/key_index.py)."""

from __future__ import annotations

import hashlib
import struct

import numpy as np
import pytest

from log.errors import CorruptIndexError
from log.index.bloom import KeyBloomFilter, build_segment_bloom
from log.index.key_index import (
    HEADER,
    KeyIndex,
    build_segment_indexes,
    build_segment_key_index,
    dirty_hash_set,
    key_index_size_bytes,
    scan_keys,
    stable_hash,
)
from log.local_log import RecordSpec
from log.record import CompressionType, ControlRecordType, RecordBatchBuilder, build_control_batch, crc32c


def test_stable_hash_is_pinned():
    # hash id 1 must never change for persisted files: first 8 bytes of MD5, big-endian
    assert stable_hash(b"key-1") == int.from_bytes(hashlib.md5(b"key-1").digest()[:8], "big")
    assert stable_hash(b"") == 0xD41D8CD98F00B204
    digests = np.frombuffer(hashlib.md5(b"a").digest() + hashlib.md5(b"b").digest(), dtype=np.uint8).reshape(2, 16)
    assert sorted(dirty_hash_set(digests).tolist()) == sorted([stable_hash(b"a"), stable_hash(b"b")])


def test_round_trip_keeps_duplicates_sorted_and_the_summary():
    keys = [b"a", b"b", b"a", b"c", b"a"]
    idx = KeyIndex.from_keys(keys, has_transactional_batches=False, min_delete_horizon_ms=1234)
    data = idx.to_bytes()
    assert len(data) == key_index_size_bytes(5) == HEADER.size + 40
    again = KeyIndex.from_bytes(data, source="seg.keyindex")
    assert again.entries.tolist() == sorted(stable_hash(k) for k in keys)
    assert not again.has_transactional_batches and again.min_delete_horizon_ms == 1234
    assert again.count_matching(dirty_hash_set(_digests([b"a"]))) == 3
    assert again.count_matching(dirty_hash_set(_digests([b"a", b"c", b"zz"]))) == 4
    assert again.count_matching(dirty_hash_set(_digests([b"zz", b"yy"]))) == 0
    assert again.contains(b"b") and not again.contains(b"nope")
    empty = KeyIndex.from_bytes(KeyIndex.from_keys([]).to_bytes())
    assert len(empty) == 0 and empty.has_transactional_batches and empty.min_delete_horizon_ms is None
    assert empty.count_matching(dirty_hash_set(_digests([b"a"]))) == 0


def test_count_matching_agrees_with_a_counter_both_ways():
    rng = np.random.default_rng(7)
    entries = np.sort(rng.integers(0, 500, size=2_000).astype(np.uint64))
    idx = KeyIndex(entries)
    for n in (1, 10, 300, 5_000):  # fewer and more dirty hashes than entries
        dirty = np.unique(rng.integers(0, 600, size=n).astype(np.uint64))
        expected = sum(int(e) in set(dirty.tolist()) for e in entries)
        assert idx.count_matching(dirty) == expected


def _digests(keys: list[bytes]) -> np.ndarray:
    return np.frombuffer(b"".join(hashlib.md5(k).digest() for k in keys), dtype=np.uint8).reshape(-1, 16)


@pytest.mark.parametrize("damage", ["magic", "version", "hash", "crc", "truncated", "count", "unsorted", "short"])
def test_corruption_raises_corrupt_index_error_naming_the_source(damage):
    data = bytearray(KeyIndex.from_keys([f"k{i}".encode() for i in range(50)]).to_bytes())
    if damage == "magic":
        data[0:4] = b"XXXX"
    elif damage == "version":
        data[4] = 9
    elif damage == "hash":
        data[5] = 2
    elif damage == "crc":
        data[-1] ^= 0xFF
    elif damage == "truncated":
        data = data[:-3]
    elif damage == "count":
        struct.pack_into(">Q", data, 16, 51)
    elif damage == "unsorted":
        body = bytearray(data[HEADER.size:])
        body[0:8], body[8:16] = body[8:16], body[0:8]
        if body == data[HEADER.size:]:
            body[0:8] = b"\xff" * 8
        data[HEADER.size:] = body
        struct.pack_into(">I", data, 24, crc32c(bytes(body)))  # a valid checksum over bad content
    elif damage == "short":
        data = data[:10]
    with pytest.raises(CorruptIndexError) as e:
        KeyIndex.from_bytes(bytes(data), source="t-0/00000000000000000000-abc.keyindex")
    assert e.value.source == "t-0/00000000000000000000-abc.keyindex"
    assert "t-0/00000000000000000000-abc.keyindex" in str(e.value)


def test_segment_index_holds_every_keyed_data_record_once(make_log):
    log = make_log(segment_bytes=1 << 20)
    keys = []
    for i in range(30):
        codec = list(CompressionType)[i % 5]
        batch = [RecordSpec(f"key-{i % 7}-{j}".encode(), b"v" * 10) for j in range(4)]  # repeated keys
        batch.append(RecordSpec(None, b"keyless"))
        log.append_records(batch, compression=codec)
        keys += [r.key for r in batch if r.key is not None]
    log.append_records([RecordSpec(b"txn-key", b"v")], producer_id=7, producer_epoch=0, base_sequence=0,
                       transactional=True)
    log.append_marker(7, 0, ControlRecordType.COMMIT)
    keys.append(b"txn-key")
    seg = log.active_segment
    idx = build_segment_key_index(seg)
    assert idx.entries.tolist() == sorted(stable_hash(k) for k in keys)  # duplicates kept, keyless/control not
    assert idx.has_transactional_batches
    assert idx.count_matching(dirty_hash_set(_digests([b"key-0-0"]))) == keys.count(b"key-0-0")
    bloom, idx2 = build_segment_indexes(seg.log_path, 0.01)
    assert idx2.to_bytes() == idx.to_bytes()
    assert bloom.to_bytes() == build_segment_bloom(seg.log_path, 0.01).to_bytes()  # one pass, same filter
    assert KeyBloomFilter.from_bytes(bloom.to_bytes()).has_transactional_batches


def test_scan_keys_restricts_to_an_offset_range_and_reads_the_horizon(tmp_path):
    plain = RecordBatchBuilder(0)
    plain.append(0, 10, b"a", b"1")
    plain.append(1, 10, b"b", b"1")
    stamped = RecordBatchBuilder(2, delete_horizon_ms=5_000)
    stamped.append(2, 10, b"c", None)
    marker = build_control_batch(base_offset=3, timestamp=1, producer_id=1, producer_epoch=0,
                                 control_type=ControlRecordType.COMMIT)
    path = tmp_path / "00000000000000000000.log"
    path.write_bytes(plain.build() + stamped.build() + marker)
    scan = scan_keys(path, 1, 3)
    assert [bytes(d) for d in scan.digests] == [hashlib.md5(b"b").digest(), hashlib.md5(b"c").digest()]
    assert scan.has_transactional_batches and scan.min_delete_horizon_ms == 5_000 and scan.data_records == 3
    assert [bytes(d) for d in scan.tombstones] == [hashlib.md5(b"c").digest()]  # c has no value
    idx = KeyIndex.from_bytes(build_segment_key_index(path).to_bytes())
    assert idx.min_delete_horizon_ms == 5_000 and len(idx) == 3


def test_index_size_is_within_the_targets():
    # 8 bytes per keyed record: <= 8.5% of 100-byte records, <= 1% of 1-KB records
    for value, limit in ((100, 0.085), (1000, 0.01)):
        b = RecordBatchBuilder(0)
        for j in range(100):
            b.append(j, 0, f"key-{j:010d}".encode(), b"x" * value)
        batch = b.build()
        assert key_index_size_bytes(100) - HEADER.size <= limit * len(batch)
