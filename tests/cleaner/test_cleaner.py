"""Kafka's cleaner behaviours (LogCleanerTest-style), one by one."""

from __future__ import annotations

from types import SimpleNamespace

from cleaner.cleaner import Cleaner, group_segments_by_size
from cleaner.config import CleanerConfig
from cleaner.log_to_clean import LogToClean, cleanable_offsets
from cleaner.offset_map import CompactOffsetMap
from log.clock import MockClock
from log.local_log import LocalLog, RecordSpec
from log.record import RECORD_BATCH_OVERHEAD, CompressionType, ControlRecordType
from tests.cleaner.model import Producers, all_batches, committed_records, replay

DAY = 86_400_000


def _round(log: LocalLog, now: int, checkpoint: int | None = None, entries: int = 1000):
    cfg = CleanerConfig(dedupe_buffer_size=24 * entries, load_factor=1.0)
    o = cleanable_offsets(log, checkpoint, now)
    ltc = LogToClean(log.topic_partition, log, o.first_dirty_offset, o.first_uncleanable_dirty_offset)
    # as many 16-byte slots as SkimpyOffsetMap would have had 24-byte ones: the same capacity rule
    return Cleaner(CompactOffsetMap(16 * (cfg.dedupe_buffer_per_thread // 24)), cfg).do_clean(ltc, now)


def _records(log: LocalLog):
    return [(r.offset, r.key, r.value) for b in all_batches(log) if not b.is_control for r in b.records()]


def _put(log: LocalLog, *pairs, **kw) -> None:
    for k, v in pairs:
        log.append_records([RecordSpec(k, v)], **kw)


def test_newest_record_per_key_kept_offsets_unchanged(make_log, clock: MockClock) -> None:
    log = make_log()
    _put(log, (b"a", b"1"), (b"b", b"1"), (b"a", b"2"), (b"c", b"1"), (b"b", b"2"))
    log.roll()
    end, stats = _round(log, clock.milliseconds())
    assert end == 5
    assert _records(log) == [(2, b"a", b"2"), (3, b"c", b"1"), (4, b"b", b"2")]
    d = stats.as_dict()
    assert (d["records_read"], d["records_retained"], d["checkpoint"]) == (5, 3, 5)


def test_keyless_records_are_kept_unlike_kafka(make_log, clock: MockClock) -> None:
    log = make_log()
    _put(log, (None, b"x"), (b"a", b"1"), (None, b"y"), (b"a", b"2"))
    log.roll()
    _end, stats = _round(log, clock.milliseconds())
    assert _records(log) == [(0, None, b"x"), (2, None, b"y"), (3, b"a", b"2")]
    assert stats.invalid_messages_read == 2


def test_partial_cleaning_when_the_map_fills(make_log, clock: MockClock) -> None:
    log = make_log(**{"segment.bytes": 400})
    for i in range(20):
        _put(log, (b"k%d" % (i % 10), b"v%d" % i))
    log.roll()
    expected = replay(committed_records(all_batches(log)))
    now = clock.milliseconds()
    end1, s1 = _round(log, now, entries=4)
    assert s1.map_full and end1 == 4  # four distinct keys mapped: offsets 0..3
    assert [o for o, _k, _v in _records(log)] == list(range(20))  # nothing superseded within 0..3
    end2, s2 = _round(log, now, end1, entries=4)
    assert s2.map_full and end2 == 8
    cp, rounds = end2, 2
    while True:
        nxt, st = _round(log, now, cp, entries=4)
        rounds += 1
        if nxt == cp or not st.map_full:
            cp = nxt
            break
        cp = nxt
    assert cp == 20 and rounds >= 5
    assert replay(committed_records(all_batches(log))) == expected
    assert [o for o, _k, _v in _records(log)] == list(range(10, 20))


def test_batches_that_lose_nothing_are_copied_byte_for_byte(make_log, clock: MockClock) -> None:
    log = make_log(**{"segment.bytes": 300})
    _put(log, (b"a", b"1"), (b"b", b"1"), (b"c", b"1"))
    log.append_records([RecordSpec(b"a", b"2"), RecordSpec(b"d", b"1")], compression=CompressionType.LZ4)
    log.roll()
    before = {b.base_offset: bytes(b.raw) for b in all_batches(log)}
    _end, stats = _round(log, clock.milliseconds())
    after = {b.base_offset: bytes(b.raw) for b in all_batches(log)}
    assert after[1] == before[1] and after[2] == before[2] and after[3] == before[3]
    assert 0 not in after and stats.batches_copied == 3


def test_compressed_batches_are_recompressed_with_their_codec(make_log, clock: MockClock) -> None:
    log = make_log()
    log.append_records([RecordSpec(b"a", b"1"), RecordSpec(b"b", b"1" * 50)], compression=CompressionType.ZSTD)
    _put(log, (b"a", b"2"))
    log.roll()
    _round(log, clock.milliseconds())
    (b0, _b1) = all_batches(log)
    assert b0.compression is CompressionType.ZSTD and b0.base_offset == 0 and b0.last_offset == 1
    assert [(r.offset, r.key) for r in b0.records()] == [(1, b"b")]
    assert b0.records_count == 1 and b0.last_offset_delta == 1


def test_tombstone_kept_with_delete_horizon_then_removed(make_log, clock: MockClock) -> None:
    log = make_log(**{"delete.retention.ms": DAY, "segment.bytes": 200})
    _put(log, (b"a", b"1"), (b"a", None), (b"b", b"1"), (b"b", b"2"))
    log.roll()
    now = clock.milliseconds()
    _round(log, now)
    tomb = [b for b in all_batches(log) if b.base_offset == 1][0]
    assert tomb.has_delete_horizon and tomb.delete_horizon_ms == now + DAY
    assert [r.value for r in tomb.records()] == [None]
    _round(log, now + DAY - 1)  # not yet
    assert 1 in [o for o, _k, _v in _records(log)]
    _round(log, now + DAY)      # horizon reached
    assert [o for o, _k, _v in _records(log)] == [3]


def test_last_batch_of_a_producer_is_kept_as_an_empty_header(make_log, clock: MockClock) -> None:
    log = make_log()
    p = Producers(log)
    p.append([RecordSpec(b"a", b"1")], pid=5)
    p.append([RecordSpec(b"a", b"2")])
    _put(log, (b"z", b"1"))
    log.roll()
    _round(log, clock.milliseconds())
    b0 = all_batches(log)[0]
    assert (b0.base_offset, b0.records_count, b0.size_in_bytes, b0.producer_id, b0.base_sequence) == (0, 0, 61, 5, 0)
    assert RECORD_BATCH_OVERHEAD == 61
    # producer state survives a reopen: the next sequence is accepted, a replay is a duplicate
    log.close()
    log2 = LocalLog(log.dir, log.config, clock=clock)
    assert log2.producer_state.active_producers()[5].last_sequence == 0


def test_aborted_transaction_removed_and_markers_kept_until_safe(make_log, clock: MockClock) -> None:
    log = make_log(**{"delete.retention.ms": DAY, "segment.bytes": 250})
    p = Producers(log)
    p.append([RecordSpec(b"a", b"aborted")], pid=9, transactional=True)
    p.end(9, commit=False)
    p.append([RecordSpec(b"b", b"committed")], pid=9, transactional=True)
    p.end(9, commit=True)
    _put(log, (b"b", b"later"), (b"c", b"1"))
    log.roll()
    now = clock.milliseconds()
    _round(log, now)
    batches = all_batches(log)
    offsets = {b.base_offset: b for b in batches}
    assert 0 not in offsets                        # aborted data gone
    assert not offsets[1].has_delete_horizon       # ABORT marker kept: its data was read this round
    assert offsets[2].records_count == 0           # committed batch lost its record, but it is pid 9's last
    assert not offsets[3].has_delete_horizon       # COMMIT kept: a batch of its txn was read
    idx = [t for s in log.all_segments() for t in s.txn_index.all()]
    assert [(t.producer_id, t.first_offset, t.last_offset) for t in idx] == [(9, 0, 1)]
    _round(log, now + 1)
    offsets = {b.base_offset: b for b in all_batches(log)}
    assert offsets[1].has_delete_horizon           # no data of the aborted txn any more: stamped
    assert [t for s in log.all_segments() for t in s.txn_index.all()] == []
    _round(log, now + 1 + DAY)
    offsets = {b.base_offset: b for b in all_batches(log)}
    assert 1 not in offsets                        # ABORT marker removed after the horizon
    assert 3 in offsets                            # COMMIT stays while pid 9's empty batch is read
    assert replay(committed_records(all_batches(log)))[0] == {b"b": b"later", b"c": b"1"}


def test_rounds_last_batch_is_retained(make_log, clock: MockClock) -> None:
    """KAFKA-17076: the batch ending at the round's upper bound survives as an empty header."""
    log = make_log(**{"delete.retention.ms": 10})
    _put(log, (b"a", b"1"), (b"a", None))
    log.roll()
    now = clock.milliseconds()
    _round(log, now)
    _round(log, now + 100)
    (b,) = all_batches(log)
    assert (b.base_offset, b.records_count) == (1, 0)
    assert log.log_end_offset == 2


def test_group_segments_by_size() -> None:
    def seg(base, size, idx=8, tidx=12):
        return SimpleNamespace(base_offset=base, size=size, offset_index=SimpleNamespace(size_in_bytes=idx),
                               time_index=SimpleNamespace(size_in_bytes=tidx))

    segs = [seg(0, 400), seg(10, 400), seg(20, 400), seg(30, 100), seg(40, 0), seg(50, 900)]
    bases = lambda gs: [[s.base_offset for s in g] for g in gs]  # noqa: E731
    assert bases(group_segments_by_size(segs, 1000, 10**6, 60)) == [[0, 10], [20, 30, 40], [50]]
    # index size limit
    assert bases(group_segments_by_size(segs[:3], 10**6, 24, 30)) == [[0, 10], [20]]
    # offset range: the candidate's last offset (next base - 1) must fit 2^31-1 from the group's base
    big = [seg(0, 10), seg(2**31 - 10, 10), seg(2**31 + 5, 10)]
    assert bases(group_segments_by_size(big, 10**6, 10**6, 2**31 + 20)) == [[0], [2**31 - 10, 2**31 + 5]]
    # empty segments skip the offset check
    empty = [seg(0, 10), seg(2**31 + 100, 0), seg(2**31 + 200, 0)]
    assert bases(group_segments_by_size(empty, 10**6, 10**6, 2**32)) == [[0, 2**31 + 100, 2**31 + 200]]


def test_cleaned_segment_takes_the_last_sources_mtime(make_log, clock: MockClock) -> None:
    log = make_log()
    for k, v in ((b"a", b"1"), (b"a", b"2"), (b"b", b"1")):
        _put(log, (k, v))
        log.roll()
    segs = log.all_segments()[:-1]
    assert len(segs) == 3
    segs[0].set_last_modified(1_500_000_000_000)
    segs[-1].set_last_modified(1_600_000_000_000)
    _round(log, clock.milliseconds())
    assert len(log.all_segments()) == 2  # one group, one cleaned segment
    assert log.all_segments()[0].last_modified == 1_600_000_000_000


def test_min_compaction_lag_keeps_young_segments_dirty(make_log, clock: MockClock) -> None:
    log = make_log(**{"min.compaction.lag.ms": 1000, "segment.bytes": 150})
    _put(log, (b"a", b"1"), (b"a", b"2"))
    clock.advance(5000)
    _put(log, (b"a", b"3"), (b"a", b"4"))
    log.roll()
    o = cleanable_offsets(log, None, clock.milliseconds())
    assert o.first_uncleanable_dirty_offset == 2  # the young segment starts at 2
    _round(log, clock.milliseconds())
    assert [off for off, _k, _v in _records(log)] == [1, 2, 3]


def test_control_keys_are_not_compared_with_the_map(make_log, clock: MockClock) -> None:
    log = make_log()
    p = Producers(log)
    p.append([RecordSpec(ControlRecordType.COMMIT.key_bytes(), b"data")], pid=3, transactional=True)
    p.end(3, commit=True)
    _put(log, (b"x", b"1"))
    log.roll()
    _round(log, clock.milliseconds())
    recs = committed_records(all_batches(log))
    assert [(r.offset, r.value) for r in recs] == [(0, b"data"), (2, b"1")]


def test_map_messages_read_counts_only_records_mapped_before_the_map_filled(make_log, clock: MockClock) -> None:
    """Regression: with a full map, map_records_read counted the whole chunk read, not
    the records mapped (Kafka's indexMessagesRead is per record, up to the one that did not fit)."""
    log = make_log()
    for i in range(20):
        _put(log, (b"k%d" % (i % 10), b"v%d" % i))
    log.roll()
    end, stats = _round(log, clock.milliseconds(), entries=5)
    assert end == 5  # k0..k4 mapped; the map is full at k5 (offset 5)
    assert stats.as_dict()["map_records_read"] == 5
