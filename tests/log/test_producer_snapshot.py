"""Producer state snapshots: Kafka's format, and state that survives the deletion of old segments."""

from __future__ import annotations

import pytest

from log.errors import CorruptRecordError, OutOfOrderSequenceError
from log.local_log import RecordSpec
from log.producer_snapshot import decode_snapshot, encode_snapshot, list_snapshots, snapshot_path
from log.producer_state import ProducerStateEntry


def test_empty_snapshot_is_kafkas_bytes():
    assert encode_snapshot({}).hex() == "000148674bc700000000"


def test_round_trip_and_corruption():
    entries = {7: ProducerStateEntry(7, 3, 10, 14, 100, 104, 1_700_000_000_000, 5, None),
               9: ProducerStateEntry(9, 0, -1, -1, -1, -1, 42, 2, 200)}
    data = encode_snapshot(entries)
    assert len(data) == 10 + 2 * 46
    assert decode_snapshot(data) == entries
    bad = bytearray(data)
    bad[20] ^= 1
    with pytest.raises(CorruptRecordError, match="checksum"):
        decode_snapshot(bytes(bad), source="x.snapshot")


def _seg0_only_producer(make_log):
    """Producer 3's only batches are in the first segment, which is then deleted (as tiered
    local retention does once the segment is in remote storage)."""
    log = make_log(segment_bytes=300)
    log.append_records([RecordSpec(b"a", b"1"), RecordSpec(b"b", b"2")], producer_id=3, producer_epoch=0,
                       base_sequence=0)
    log.roll()
    for i in range(10):
        log.append_records([RecordSpec(f"k{i}".encode(), b"x" * 40)])
    assert snapshot_path(log.dir, log.all_segments()[1].base_offset).exists()
    log.delete_segments([log.all_segments()[0]])
    log.close()
    return make_log(segment_bytes=300)


def test_a_producer_whose_segments_are_gone_is_remembered_after_reopen(make_log):
    log = _seg0_only_producer(make_log)
    assert log.log_start_offset > 0
    assert log.producer_state.producers[3].last_sequence == 1
    dup = log.append_records([RecordSpec(b"a", b"1"), RecordSpec(b"b", b"2")], producer_id=3, producer_epoch=0,
                             base_sequence=0)
    assert dup.duplicate  # a retried batch is recognised, not written twice
    with pytest.raises(OutOfOrderSequenceError):
        log.append_records([RecordSpec(b"c", b"3")], producer_id=3, producer_epoch=0, base_sequence=5)
    assert all(off >= log.log_start_offset for off, _p in list_snapshots(log.dir))


def test_corrupt_snapshot_falls_back_to_replaying_the_log(make_log):
    log = make_log(segment_bytes=300)
    log.append_records([RecordSpec(b"a", b"1")], producer_id=4, producer_epoch=1, base_sequence=0)
    log.roll()
    log.close()
    for _off, path in list_snapshots(log.dir):
        path.write_bytes(b"\x00\x01garbage")
    log2 = make_log(segment_bytes=300)
    assert log2.producer_state.producers[4].producer_epoch == 1  # rebuilt from the segments
    assert [p for _o, p in list_snapshots(log2.dir)] == []  # the corrupt file is gone
