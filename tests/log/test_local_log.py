"""The local partition log: append, roll, read, offsets, transactions, epochs."""

from __future__ import annotations

import pytest

from log.config import LogConfig
from log.errors import (
    InvalidProducerEpochError,
    InvalidRequestError,
    OffsetOutOfRangeError,
    OutOfOrderSequenceError,
)
from log.fetch import READ_COMMITTED, READ_UNCOMMITTED, read_local, records_from_batches
from log.local_log import LocalLog, RecordSpec
from log.offset_lookup import end_offset_for_epoch
from log.record import CompressionType, ControlRecordType, RecordBatchBuilder, iter_file_batches


def _kv(i: int) -> RecordSpec:
    return RecordSpec(f"k{i}".encode(), f"v{i}".encode())


def _read_all(log, isolation=READ_UNCOMMITTED):
    batches = log.read(log.log_start_offset, max_bytes=1 << 30,
                       max_offset=log.last_stable_offset if isolation == READ_COMMITTED else None)
    aborted = log.collect_aborted_transactions(log.log_start_offset, log.log_end_offset)
    return records_from_batches(batches, log.log_start_offset, isolation=isolation, aborted=aborted,
                                max_records=10**9).records


def test_append_assigns_offsets_and_rolls_on_segment_bytes(make_log):
    log = make_log(segment_bytes=500)
    results = [log.append_records([_kv(i), _kv(i + 1000)]) for i in range(30)]
    assert [r.base_offset for r in results] == list(range(0, 60, 2))
    assert log.log_end_offset == 60
    assert len(log.all_segments()) > 3
    assert all(s.size <= 500 for s in log.all_segments())
    names = sorted(p.name for p in log.dir.glob("*.log"))
    assert names[0] == "00000000000000000000.log"
    assert all(len(n) == len("00000000000000000000.log") for n in names)
    assert [r.offset for r in _read_all(log)] == list(range(60))


def test_read_from_middle_and_past_compaction_gap(make_log):
    log = make_log()
    b = RecordBatchBuilder(0)
    for off in (0, 3, 7):  # a batch with gaps, as the cleaner leaves them
        b.append(off, 1000 + off, f"k{off}".encode(), b"v")
    log.append_batches(b.build(last_offset_delta=9), from_client=False)
    assert log.log_end_offset == 10
    recs = records_from_batches(log.read(4), 4).records
    assert [r.offset for r in recs] == [7]
    with pytest.raises(OffsetOutOfRangeError):
        log.read(11)


def test_time_based_roll_and_kip354_forced_roll(make_log, clock):
    log = make_log(cleanup_policy="compact", max_compaction_lag_ms=1000, segment_ms=10**9)
    log.append_records([RecordSpec(b"a", b"1", timestamp=clock.milliseconds())])
    assert not log.maybe_roll()
    clock.advance(1001)
    assert log.maybe_roll()  # the first batch is older than max.compaction.lag.ms
    assert len(log.all_segments()) == 2 and log.active_segment.size == 0
    assert not log.maybe_roll()  # an empty active segment never rolls


def test_segment_jitter_rolls_each_segment_a_little_before_segment_ms(tmp_path, clock):
    """segment.jitter.ms: a segment rolls by time up to that much before segment.ms, by an amount of its own (Kafka's
    rollJitterMs), so partitions created together do not roll at once; 0 rolls at segment.ms exactly."""
    from log.config import LogConfig

    def waited(name: str, jitter: int) -> int:
        log = LocalLog(tmp_path / name, LogConfig.from_dict({"segment.ms": 10_000, "segment.jitter.ms": jitter,
                                                              "cleanup.policy": "delete"}), clock=clock)
        log.append_records([RecordSpec(b"a", b"1", timestamp=clock.milliseconds())])
        start = clock.milliseconds()
        while not log.maybe_roll():
            clock.advance(100)
        log.close()
        return clock.milliseconds() - start

    assert waited("plain-0", 0) == 10_100
    rolls = [waited(f"p{i}-0", 5000) for i in range(6)]
    assert all(5000 < w <= 10_100 for w in rolls) and len(set(rolls)) > 1, rolls


def test_delete_policy_does_not_use_max_compaction_lag(make_log, clock):
    log = make_log(cleanup_policy="delete", max_compaction_lag_ms=1000, segment_ms=10**9)
    log.append_records([RecordSpec(b"a", b"1", timestamp=clock.milliseconds())])
    clock.advance(5000)
    assert not log.maybe_roll()


def test_transactions_bound_the_last_stable_offset(make_log):
    log = make_log()
    log.append_records([_kv(0)])
    log.append_records([_kv(1)], producer_id=7, producer_epoch=0, base_sequence=0, transactional=True)
    log.append_records([_kv(2)])
    assert log.last_stable_offset == 1
    log.append_marker(7, 0, ControlRecordType.ABORT)
    assert log.last_stable_offset == log.log_end_offset == 4
    assert [r.offset for r in _read_all(log, READ_COMMITTED)] == [0, 2]
    assert [r.offset for r in _read_all(log, READ_UNCOMMITTED)] == [0, 1, 2]
    (txn,) = log.collect_aborted_transactions(0, 4)
    assert (txn.producer_id, txn.first_offset, txn.last_offset) == (7, 1, 3)
    assert (log.dir / "00000000000000000000.txnindex").stat().st_size == 34


def test_idempotent_producer_sequences_and_fencing(make_log):
    log = make_log()
    first = log.append_records([_kv(0), _kv(1)], producer_id=3, producer_epoch=1, base_sequence=0)
    dup = log.append_records([_kv(0), _kv(1)], producer_id=3, producer_epoch=1, base_sequence=0)
    assert dup.duplicate and (dup.base_offset, dup.last_offset) == (first.base_offset, first.last_offset)
    assert log.log_end_offset == 2
    with pytest.raises(OutOfOrderSequenceError):
        log.append_records([_kv(5)], producer_id=3, producer_epoch=1, base_sequence=7)
    log.append_records([_kv(2)], producer_id=3, producer_epoch=2, base_sequence=0)
    with pytest.raises(InvalidProducerEpochError):
        log.append_records([_kv(3)], producer_id=3, producer_epoch=1, base_sequence=3)


def test_clients_cannot_write_control_batches_or_oversized_batches(make_log):
    from log.record import build_control_batch

    log = make_log(max_message_bytes=200)
    marker = build_control_batch(base_offset=0, timestamp=1, producer_id=1, producer_epoch=0,
                                 control_type=ControlRecordType.COMMIT)
    with pytest.raises(InvalidRequestError, match="control"):
        log.append_batches(marker)
    with pytest.raises(InvalidRequestError, match=r"max\.message\.bytes"):
        log.append_records([RecordSpec(b"k", b"x" * 500)])


def test_compression_type_config_recompresses(make_log):
    log = make_log(compression_type="gzip")
    log.append_records([_kv(i) for i in range(5)], compression=CompressionType.NONE)
    (batch,) = log.read(0)
    assert batch.compression is CompressionType.GZIP
    assert [r.key for r in batch.records()] == [f"k{i}".encode() for i in range(5)]


@pytest.mark.parametrize(("codec", "fast", "small"), [("gzip", 1, 9), ("zstd", 1, 19), ("lz4", 9, 12)])
def test_recompression_uses_the_topics_compression_level(tmp_path, codec, fast, small):
    """compression.<codec>.level (KIP-390) is the level a topic's compression.type recompresses at: the same
    records come out smaller at a higher level, and read back the same."""
    from log.config import LogConfig

    records = [RecordSpec(f"key-{i % 97}".encode(), b"value %d of a text that repeats " % (i % 13) * 8)
               for i in range(400)]
    sizes = []
    for level in (fast, small):
        log = LocalLog(tmp_path / f"{codec}{level}-0", LogConfig.from_dict(
            {"compression.type": codec, f"compression.{codec}.level": level, "cleanup.policy": "delete"}))
        log.append_records(records, compression=CompressionType.NONE)
        (batch,) = log.read(0)
        assert batch.compression is CompressionType.from_name(codec)
        assert [r.value for r in batch.records()] == [r.value for r in records]
        sizes.append(batch.size_in_bytes)
        log.close()
    assert sizes[1] < sizes[0], sizes


def test_log_append_time(make_log, clock):
    log = make_log(message_timestamp_type="LogAppendTime")
    log.append_records([RecordSpec(b"k", b"v", timestamp=5)])
    (rec,) = _read_all(log)
    assert rec.timestamp == clock.milliseconds()


def test_leader_epochs_are_stamped_and_checkpointed(make_log):
    log = make_log()
    log.assign_epoch(0)
    log.append_records([_kv(0)])
    log.assign_epoch(3)
    log.append_records([_kv(1)])
    assert (log.dir / "leader-epoch-checkpoint").read_text() == "0\n2\n0 0\n3 1\n"
    epochs = [b.partition_leader_epoch for _p, b in iter_file_batches(log.active_segment.log_path)]
    assert epochs == [0, 3]
    assert log.epochs_for_range(0, 2) == {0: 0, 3: 1}
    log.close()
    reopened = type(log)(log.dir, log.config, clock=log.clock)
    assert reopened.leader_epoch == 3


def test_a_new_partition_is_at_leader_epoch_0_from_its_first_append(make_log):
    """As Kafka's: a partition no leadership was registered for is at epoch 0, so its first batch starts epoch 0 in
    the cache and every batch carries 0 (they carried -1, while Metadata answered 0: clients could not validate
    their positions by it, KIP-320)."""
    log = make_log()
    assert log.leader_epoch == -1  # nothing appended, nothing registered
    log.append_records([_kv(0)])
    log.append_records([_kv(1)])
    assert log.leader_epoch == 0 and log.epochs_for_range(0, 2) == {0: 0}
    assert (log.dir / "leader-epoch-checkpoint").read_text() == "0\n1\n0 0\n"
    assert [b.partition_leader_epoch for _p, b in iter_file_batches(log.active_segment.log_path)] == [0, 0]
    assert end_offset_for_epoch(log.epoch_entries, 0, log.log_end_offset) == (0, 2)


def test_retention_deletes_old_segments_for_delete_policy(make_log, clock):
    log = make_log(cleanup_policy="delete", segment_bytes=300, retention_ms=10_000)
    for i in range(20):
        log.append_records([RecordSpec(b"k", f"v{i}".encode(), timestamp=clock.milliseconds())])
    clock.advance(20_000)
    log.append_records([RecordSpec(b"k", b"new", timestamp=clock.milliseconds())])
    deleted = log.delete_old_segments()
    assert deleted and log.log_start_offset > 0
    assert [r.value for r in _read_all(log)][-1] == b"new"
    assert not list(log.dir.glob("*.deleted"))  # no scheduler: deleted at once


def test_reopen_keeps_everything(make_log):
    log = make_log(segment_bytes=400)
    for i in range(40):
        log.append_records([_kv(i)])
    before = [(r.offset, r.key, r.value) for r in _read_all(log)]
    log.close()
    log2 = make_log(segment_bytes=400)
    assert [(r.offset, r.key, r.value) for r in _read_all(log2)] == before
    assert log2.log_end_offset == 40


def test_a_data_dir_has_one_owner(tmp_path):
    from log.errors import DataDirInUseError
    from log.log_manager import LogManager

    first = LogManager(tmp_path / "data")
    with pytest.raises(DataDirInUseError, match="in use by another tiercompact process"):
        LogManager(tmp_path / "data")
    first.close()
    LogManager(tmp_path / "data").close()  # free again once the owner closed


def test_retention_rolls_and_deletes_an_expired_active_segment(make_log, clock):
    """Regression: a record older than retention.ms lived until the active segment rolled
    (segment.ms, 7 days by default). Kafka's deletableSegments includes the active segment."""
    log = make_log(cleanup_policy="delete", segment_bytes=1 << 20, retention_ms=10_000)
    for i in range(5):
        log.append_records([RecordSpec(b"k", f"v{i}".encode(), timestamp=clock.milliseconds())])
    assert len(log.segments) == 1
    clock.advance(20_000)
    deleted = log.delete_old_segments()
    assert deleted == [0]
    assert log.log_start_offset == log.log_end_offset == 5
    assert _read_all(log) == []
    # the log stays writable at the next offset
    assert log.append_records([RecordSpec(b"k", b"new", timestamp=clock.milliseconds())]).base_offset == 5


def test_retention_keeps_an_active_segment_with_a_young_record(make_log, clock):
    log = make_log(cleanup_policy="delete", segment_bytes=1 << 20, retention_ms=10_000)
    log.append_records([RecordSpec(b"k", b"old", timestamp=clock.milliseconds())])
    clock.advance(20_000)
    log.append_records([RecordSpec(b"k", b"young", timestamp=clock.milliseconds())])
    assert log.delete_old_segments() == []
    assert [r.value for r in _read_all(log)] == [b"old", b"young"]


def test_retention_never_touches_an_empty_active_segment(make_log, clock):
    log = make_log(cleanup_policy="delete", segment_bytes=1 << 20, retention_ms=10_000)
    clock.advance(20_000)
    assert log.delete_old_segments() == []
    assert len(log.segments) == 1


def test_offset_index_has_no_entry_for_the_first_batch_as_in_kafka(make_log):
    """Regression: the first batch of a segment always got an entry at position 0, so a
    re-cleaned Kafka segment's .index was 8 bytes where Kafka's is empty. Kafka's
    LogSegment.append indexes only after index.interval.bytes (and recover() the same)."""
    log = make_log(index_interval_bytes=4096)
    for i in range(3):
        log.append_records([_kv(i)])
    seg = log.segments.first()
    assert seg.offset_index.entries == 0 and seg.offset_index.size_in_bytes == 0
    assert seg.offset_index.lookup(2) == (0, 0)


def test_offset_index_entries_follow_the_interval_and_survive_a_rebuild(tmp_path):
    log = LocalLog(tmp_path / "t-0", LogConfig.from_dict({"index.interval.bytes": 100}))
    for i in range(20):
        log.append_records([_kv(i)])
    seg = log.segments.first()
    positions = [seg.offset_index.lookup(o)[1] for o in range(20)]
    assert positions[0] == 0 and min(p for p in positions if p) > 100  # first entry only past 100 bytes
    appended = list(seg.offset_index._entries)
    seg.rebuild_indexes()  # recovery derives exactly the same entries
    assert list(seg.offset_index._entries) == appended
    assert [r.offset for r in _read_all(log)] == list(range(20))


def test_index_files_exist_even_when_empty_and_a_missing_one_is_rebuilt(tmp_path):
    """Kafka creates .index/.timeindex with the segment; an empty index is valid (no entry under
    index.interval.bytes), a missing one is rebuilt on open."""
    log = LocalLog(tmp_path / "t-0", LogConfig.from_dict({"index.interval.bytes": 100}))
    seg = log.segments.first()
    assert seg.offset_index.path.exists() and seg.time_index.path.exists()
    for i in range(20):
        log.append_records([_kv(i)])
    log.roll()
    log.close()
    first = tmp_path / "t-0" / "00000000000000000000.index"
    entries = first.read_bytes()
    assert entries  # past 100 bytes: entries were written
    first.unlink()
    reopened = LocalLog(tmp_path / "t-0", LogConfig.from_dict({"index.interval.bytes": 100}))
    assert first.read_bytes() == entries
    assert [r.offset for r in _read_all(reopened)] == list(range(20))


def test_a_read_stops_once_max_records_are_read_not_at_max_bytes(make_log):
    """Regression: a page of 100 records scanned max_fetch_bytes (8 MiB) although it stopped at once."""
    log = make_log(segment_bytes=1 << 30)
    for i in range(200):
        log.append_records([_kv(i), _kv(i + 1000)])  # 2-record batches
    batches = log.read(0, max_bytes=1 << 30, max_records=11)
    assert [b.base_offset for b in batches] == [0, 2, 4, 6, 8, 10]  # 12 records: the 6th batch reaches 11
    assert len(log.read(0, max_bytes=1 << 30)) == 200
    mid = log.read(5, max_bytes=1 << 30, max_records=3)  # counts only records at or after offset 5
    assert [b.base_offset for b in mid] == [4, 6]
    page = read_local(log, 0, max_bytes=1 << 30, max_records=11)
    assert [r.offset for r in page.records] == list(range(11)) and page.next_offset == 11


def test_a_marker_that_bumps_the_epoch_resets_the_producers_sequences(make_log):
    """Regression (found by the model state machine): after an ABORT/COMMIT marker at a
    new producer epoch, the producer's first batch at that epoch (sequence 0) was rejected as
    out of order. Kafka's maybeUpdateProducerEpoch clears the old epoch's batch metadata."""
    log = make_log()
    log.append_records([_kv(0)], producer_id=9, producer_epoch=0, base_sequence=0)
    log.append_records([_kv(1)], producer_id=9, producer_epoch=0, base_sequence=1)
    log.append_marker(9, 1, ControlRecordType.ABORT)  # the coordinator fenced epoch 0
    res = log.append_records([_kv(2)], producer_id=9, producer_epoch=1, base_sequence=0)
    assert (res.base_offset, res.duplicate) == (3, False)
    assert log.append_records([_kv(2)], producer_id=9, producer_epoch=1, base_sequence=0).duplicate
    with pytest.raises(InvalidProducerEpochError):
        log.append_records([_kv(3)], producer_id=9, producer_epoch=0, base_sequence=2)


def _segment_bytes(log) -> bytes:
    return b"".join(s.log_path.read_bytes() for s in log.all_segments())


@pytest.mark.parametrize("codec", [CompressionType.NONE, CompressionType.LZ4])
def test_append_columns_writes_what_append_records_writes(tmp_path, clock, codec):
    """The produce route's columns (no RecordSpec per record) give the same batches, byte for
    byte, as the same records appended as RecordSpecs: keyless records, tombstones, given and
    missing timestamps (the append time), idempotent producer fields."""
    cfg = LogConfig.from_dict({})
    a, b = LocalLog(tmp_path / "a-0", cfg, clock=clock), LocalLog(tmp_path / "b-0", cfg, clock=clock)
    keys = [b"k1", None, b"k3", b"", b"k5"]
    values = [b"v1", b"v2", None, b"", b"x" * 300]
    stamps = [None, 7, None, 2**40, None]
    for ts in (None, stamps):
        ra = a.append_records([RecordSpec(k, v, None if ts is None else ts[i]) for i, (k, v) in
                               enumerate(zip(keys, values, strict=True))], compression=codec)
        rb = b.append_columns(list(keys), list(values), None if ts is None else list(ts), compression=codec)
        assert ra == rb
        clock.advance(5)
    pa = a.append_records([RecordSpec(b"p", b"q")], producer_id=9, producer_epoch=1, base_sequence=0)
    pb = b.append_columns([b"p"], [b"q"], producer_id=9, producer_epoch=1, base_sequence=0)
    assert pa == pb
    assert _segment_bytes(a) == _segment_bytes(b)
    assert [(r.offset, r.timestamp, r.key, r.value) for r in _read_all(b)] == [
        (r.offset, r.timestamp, r.key, r.value) for r in _read_all(a)]
    with pytest.raises(InvalidRequestError, match="at least one record"):
        b.append_columns([], [])
    with pytest.raises(ValueError, match="same length"):
        b.append_columns([b"k"], [b"v", b"w"])


def test_page_fields_are_the_records(make_log):
    """A page keeps its records as the decoded field tuples; ``records`` makes the same
    Records the batches hold, and a page that starts inside a batch holds no earlier record."""
    log = make_log()
    for i in range(5):
        log.append_records([_kv(10 * i + j) for j in range(10)])
    batches = log.read(0, max_bytes=1 << 30)
    every = [r for batch in batches for r in batch.records()]
    page = read_local(log, 13, max_bytes=1 << 20, max_records=20)
    assert [f[0] for f in page.fields] == list(range(13, 33))
    assert page.records == [r for r in every if 13 <= r.offset < 33]
    assert [(r.offset, r.timestamp, r.key, r.value, r.headers, r.sequence) for r in page.records] == page.fields
    assert page.next_offset == 33


# ---- DeleteRecords: the log start offset moved by offset ---------------------------------------

def test_advance_log_start_offset_hides_what_is_below_survives_reopen_and_retention_removes_segments(make_log):
    log = make_log(segment_bytes=300, cleanup_policy="compact,delete", retention_ms=-1)
    for i in range(40):
        log.append_records([_kv(i)])
    log.roll()
    segs = log.all_segments()
    target = segs[2].base_offset + 1  # inside the third segment
    assert log.advance_log_start_offset(target) == target == log.log_start_offset
    assert log.deleted_records_offset == target
    with pytest.raises(OffsetOutOfRangeError):
        log.read(target - 1)
    # a read at the new start gets the whole batch holding it, as Kafka returns it
    assert [r.offset for r in records_from_batches(log.read(target), target).records][0] == target
    assert [r.offset for r in _read_all(log)] == list(range(target, 40))
    # the start only moves forward; the high watermark bounds it
    assert log.advance_log_start_offset(1) == target
    with pytest.raises(OffsetOutOfRangeError, match="high watermark"):
        log.advance_log_start_offset(41)
    with pytest.raises(OffsetOutOfRangeError):
        log.advance_log_start_offset(-2)
    # the segments wholly below it go with retention; the one holding it stays
    assert [s.base_offset for s in log.start_breached_segments()] == [segs[0].base_offset, segs[1].base_offset]
    assert log.delete_old_segments() == [segs[0].base_offset, segs[1].base_offset]
    assert log.all_segments()[0].base_offset == segs[2].base_offset
    log.close()
    reopened = make_log(segment_bytes=300, cleanup_policy="compact,delete", retention_ms=-1)
    assert reopened.log_start_offset == target
    with pytest.raises(OffsetOutOfRangeError):
        reopened.read(target - 1)
    # to the high watermark: nothing is left to read, and appends go on from there
    assert reopened.advance_log_start_offset(40) == 40
    assert reopened.append_records([_kv(99)]).base_offset == 40
    assert [r.offset for r in _read_all(reopened)] == [40]
    reopened.close()


def test_a_malformed_log_start_offset_checkpoint_keeps_the_partition_closed(make_log):
    from log.errors import CorruptRecordError

    log = make_log(cleanup_policy="delete")
    log.append_records([_kv(i) for i in range(5)])
    log.advance_log_start_offset(3)
    log.close()
    (log.dir / "log-start-offset-checkpoint").write_text("0\n1\nnot-a-number\n")
    # read as empty, the partition would serve the deleted records again
    with pytest.raises(CorruptRecordError, match="log-start-offset-checkpoint"):
        make_log(cleanup_policy="delete")


def test_the_log_start_moving_up_truncates_the_leader_epoch_history_from_the_start(make_log, clock):
    """Kafka's truncateFromStart: DeleteRecords and retention drop the epochs wholly below the new log start and
    start the one holding it there, on disk; OffsetForLeaderEpoch for a deleted epoch then answers the log start."""
    log = make_log(segment_bytes=300, cleanup_policy="delete", retention_ms=10_000)
    for epoch, first in ((0, 0), (2, 10), (5, 20)):
        log.assign_epoch(epoch)
        for i in range(first, first + 10):
            log.append_records([RecordSpec(b"k", b"v%d" % i, timestamp=clock.milliseconds())])

    def history(lg):
        return [(e.epoch, e.start_offset) for e in lg.epoch_entries]

    assert history(log) == [(0, 0), (2, 10), (5, 20)]
    log.advance_log_start_offset(5)
    assert history(log) == [(0, 5), (2, 10), (5, 20)]
    assert end_offset_for_epoch(log.epoch_entries, 0, log.log_end_offset) == (0, 10)
    log.advance_log_start_offset(10)
    assert history(log) == [(2, 10), (5, 20)]
    log.advance_log_start_offset(15)
    assert history(log) == [(2, 15), (5, 20)]
    # the epoch before the first one known: the requested epoch and the log start (was 10, below the start)
    assert end_offset_for_epoch(log.epoch_entries, 0, log.log_end_offset) == (0, 15)
    assert end_offset_for_epoch(log.epoch_entries, 2, log.log_end_offset) == (2, 20)
    # a segment below the start (tiered before retention removes it) is labelled with the oldest epoch known,
    # not the newest: a lineage rebuilt from the segments' epochs stays in order
    assert log.epochs_for_range(0, 10) == {2: 0}
    assert log.epochs_for_range(10, 25) == {2: 15, 5: 20}
    log.close()
    log = make_log(segment_bytes=300, cleanup_policy="delete", retention_ms=10_000)
    assert history(log) == [(2, 15), (5, 20)]
    clock.advance(20_000)
    log.append_records([RecordSpec(b"k", b"new", timestamp=clock.milliseconds())])
    assert log.delete_old_segments()
    start = log.log_start_offset
    assert start > 20 and history(log) == [(5, start)]
    log.close()
