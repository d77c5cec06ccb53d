"""Tiered compaction end to end on file:// and on S3 through moto's HTTP server."""

from __future__ import annotations

import pytest

from metadata.errors import FencedLeaderEpochError
from tests.tiered.conftest import BOTH_STORES, TP, assert_no_leak, final_state


def _workload(world, rounds=6, keys=40, seed=1):
    import random

    rnd = random.Random(seed)
    produced = []
    for r in range(rounds):
        batch = []
        for _ in range(60):
            k = f"key-{rnd.randrange(keys):03d}".encode()
            v = None if rnd.random() < 0.1 else f"v{r}-{rnd.random():.6f}".encode()
            batch.append((k, v))
        if r == 2:
            batch.append((None, b"keyless"))
        world.produce(batch)
        produced.extend(batch)
        world.roll_and_tier()
    return produced


@BOTH_STORES
@pytest.mark.parametrize("policy", ["compact,delete", "compact"])
def test_tiered_clean_keeps_final_state_offsets_and_order(make_world, policy):
    w = make_world(config={"cleanup.policy": policy, "retention.ms": -1})
    _workload(w)
    before = w.read_all()
    if policy == "compact,delete":
        assert w.log.log_start_offset > 0  # local copies expired: the data is remote
    else:  # the tiered-compaction KIP draft: compact-only local copies stay until they are below the cleaner checkpoint
        assert w.log.log_start_offset == 0
    stats = w.clean()
    after = w.read_all()
    assert final_state(after) == final_state(before)
    assert len(after) < len(before)
    originals = {o: (k, v) for o, k, v in before}
    assert all(originals[o] == (k, v) for o, k, v in after)  # offsets never change
    assert [o for o, _, _ in after] == sorted(o for o, _, _ in after)
    assert (None, b"keyless") in [(k, v) for _, k, v in after]  # keyless records are kept
    assert stats.bytes_uploaded > 0
    # local copies are used whenever they exist; otherwise the segments are downloaded
    assert (stats.segments_downloaded > 0) == (policy == "compact,delete")
    assert w.checkpoints[TP] == stats.end_offset > 0
    assert w.log.log_start_offset >= stats.end_offset or w.log.all_segments()[0].read_next_offset() > stats.end_offset
    assert w.rlmm.resolve_cleaner_checkpoint(TP) == stats.end_offset


def test_replaced_segments_are_deleted_later_by_the_retention_loop(make_world):
    w = make_world()
    _workload(w, rounds=4)
    keys_before = w.object_keys()
    w.clean()
    # the old objects stay until the deferred-delete step validates and removes them
    assert keys_before <= w.object_keys()
    deleted = w.rlm.delete_unreferenced(TP)
    assert deleted
    assert_no_leak(w)
    assert final_state(w.read_all()) == final_state(w.read_all())


def test_second_round_skips_clean_segments_by_bloom(make_world):
    w = make_world()
    # many distinct keys spread over segments, then updates to a few keys only
    w.produce([(f"cold-{i:04d}".encode(), b"x" * 20) for i in range(300)])
    w.roll_and_tier()
    w.clean()
    w.rlm.delete_unreferenced(TP)
    n_clean_segments = len(w.rlmm.list_remote_log_segments(TP))
    w.produce([(b"hot-1", b"a"), (b"hot-2", b"b"), (b"hot-1", b"c")])
    w.roll_and_tier()
    stats = w.clean()
    assert stats.segments_skipped_by_bloom >= n_clean_segments - 1  # at most one false positive
    # the dirty segment is fetched twice (map pass, rewrite pass); skipped segments never
    assert stats.segments_downloaded <= 2 + (n_clean_segments - stats.segments_skipped_by_bloom)
    state = final_state(w.read_all())
    assert state[b"hot-1"] == b"c" and len(state) == 302


def test_tombstones_survive_delete_retention_then_go(make_world, clock):
    w = make_world()
    w.produce([(b"a", b"1"), (b"b", b"1")])
    w.roll_and_tier()
    w.produce([(b"a", None)])
    w.roll_and_tier()
    w.clean()
    assert (b"a", None) in [(k, v) for _, k, v in w.read_all()]  # kept the first time
    clock.advance(2000)  # past delete.retention.ms (1000)
    w.produce([(b"c", b"1")])
    w.roll_and_tier()
    w.clean()
    after = w.read_all()
    assert all(k != b"a" for _, k, _ in after)
    assert final_state(after) == {b"b": b"1", b"c": b"1"}


def test_aborted_transactions_vanish_and_committed_survive(make_world):
    from log.record import ControlRecordType

    w = make_world()
    w.produce([(b"k", b"committed")], producer_id=1, producer_epoch=0, base_sequence=0, transactional=True)
    w.log.append_marker(1, 0, ControlRecordType.COMMIT)
    w.produce([(b"k", b"aborted")], producer_id=2, producer_epoch=0, base_sequence=0, transactional=True)
    w.log.append_marker(2, 0, ControlRecordType.ABORT)
    w.produce([(b"z", b"1")])
    w.roll_and_tier()
    w.clean()
    values = [v for _, k, v in w.read_all("read_uncommitted") if k == b"k"]
    assert values == [b"committed"]
    assert final_state(w.read_all("read_committed"))[b"k"] == b"committed"


def test_disk_use_stays_within_chunk_bound_plus_output(make_world):
    w = make_world(config={"segment.bytes": 4096})
    _workload(w, rounds=8, keys=200)
    peaks = []
    cleaner = w.cleaner(disk_hook=peaks.append, free_disk=lambda p: 3 * 4096)
    stats = w.clean(cleaner)
    bound = cleaner.chunk_bound(w.log)
    assert bound == 4096
    biggest_output = 4096  # a cleaned group never exceeds segment.bytes
    assert peaks and max(peaks) <= bound + biggest_output
    assert stats.segments_downloaded >= 3  # it really worked through several chunks


def test_map_fills_and_the_next_round_continues(make_world):
    w = make_world()
    _workload(w, rounds=6, keys=300)
    before = final_state(w.read_all())
    small = w.cleaner(dedupe=24 * 64)  # 64 slots: ~57 keys per round
    s1 = w.clean(small)
    assert s1.map_full
    rounds = 1
    while w.checkpoints[TP] < w.log.log_end_offset - 1 and rounds < 30:
        s = w.clean(small)
        rounds += 1
        if not s.map_full:
            break
    assert rounds > 2
    assert final_state(w.read_all()) == before


def _follower_of(a, make_world):
    """Broker B: a replica of A's local log (what replication would have given it)."""
    import shutil

    a.log.flush()
    shutil.copytree(a.root / "data-0", a.root / "data-1")
    return make_world(broker_id=1, create=False)


@BOTH_STORES
@pytest.mark.parametrize("order", ["zombie_publish_first", "leader_publish_first"])
def test_zombie_table_of_seed_004(make_world, order):
    """The tiered-compaction KIP draft's table. A (epoch 0) finishes a compaction: {LE-0 -> CO_a}. A stalls mid-round;
    B becomes leader (epoch 1), resolves {LE-0 -> CO_a} and cleans further: {LE-0 -> CO_a,
    LE-1 -> CO_b}. A wakes up and publishes its pending round. Whatever the arrival order,
    A's publish is rejected and changes nothing a reader sees; its uploads leave no object."""
    a = make_world(broker_id=0)
    _workload(a, rounds=3)
    a.clean()
    co_a = a.rlmm.resolve_cleaner_checkpoint(TP)
    assert a.rlmm.cleaner_offsets(TP) == {0: co_a}
    _workload(a, rounds=2, seed=7)  # dirty data both A's pending round and B will clean
    b = _follower_of(a, make_world)
    b_results = {}

    def b_takes_over_and_cleans():
        if b.rlmm.leader_state(TP).leader_epoch < 1:
            b.rlm.become_leader(TP, 1, 1)
        b.checkpoints[TP] = b.rlmm.resolve_cleaner_checkpoint(TP)
        assert b.checkpoints[TP] == co_a  # B resolves A's entry
        b_results["stats"] = b.clean()

    real_publish = a.rlmm.publish_compaction

    def delayed_publish(tp, **kw):  # A stalled between its uploads and its publish
        if order == "leader_publish_first":
            b_takes_over_and_cleans()
        else:
            b.rlm.become_leader(TP, 1, 1)
        b_results["visible_before_zombie"] = b.read_all()
        return real_publish(tp, **kw)

    a.rlmm.publish_compaction = delayed_publish
    a_cleaner = a.cleaner()
    a_uploads = []
    real_upload = a_cleaner._upload
    a_cleaner._upload = lambda *args, **kw: a_uploads.append(real_upload(*args, **kw)) or a_uploads[-1]
    with pytest.raises(FencedLeaderEpochError):
        a.clean(a_cleaner)
    assert a_uploads  # A really uploaded a pending compaction
    assert b.read_all() == b_results["visible_before_zombie"]  # the rejected publish changed nothing
    leftovers = b.object_keys() & {k for md in a_uploads for k in a.rsm.object_keys(md)}
    assert leftovers == set()  # ... and A removed what it uploaded
    if order == "zombie_publish_first":
        b_takes_over_and_cleans()
    co_b = b_results["stats"].end_offset
    assert b.rlmm.cleaner_offsets(TP) == {0: co_a, 1: co_b} and co_b > co_a
    b.rlm.delete_unreferenced(TP, orphan_grace_ms=0)
    assert_no_leak(b)
    # what B serves is the compacted log of everything written
    full = _follower_of_model(a)
    assert final_state(b.read_all()) == full


def _follower_of_model(a):
    """The final state a reader must see: replay everything A's local log ever held."""
    from log.fetch import records_from_batches

    log = a.log
    batches = log.read(log.log_start_offset, max_bytes=1 << 30)
    recs = records_from_batches(batches, log.log_start_offset, max_records=10**9).records
    remote_state = final_state(a.read_all())
    local = [(r.offset, r.key, r.value) for r in recs]
    merged = dict(remote_state)
    merged_state = final_state([(0, k, v) for k, v in merged.items()] + local)
    return merged_state


def test_leadership_moves_mid_round_then_publish_is_fenced_and_uploads_removed(make_world):
    a = make_world(broker_id=0)
    _workload(a, rounds=4)
    b = _follower_of(a, make_world)
    visible = a.read_all()
    objects = a.object_keys()
    cleaner = a.cleaner()
    real_upload = cleaner._upload
    calls = []

    def upload_then_lose_leadership(*args, **kw):
        md = real_upload(*args, **kw)
        calls.append(md)
        if len(calls) == 1:
            b.rlm.become_leader(TP, 1, 1)  # B takes over while A is between upload and publish
        return md

    cleaner._upload = upload_then_lose_leadership
    with pytest.raises(FencedLeaderEpochError):
        a.clean(cleaner)
    assert calls  # A really uploaded before it was fenced
    assert a.object_keys() == objects  # A removed its own uploads
    assert b.read_all() == visible
    assert b.rlmm.cleaner_offsets(TP) == {}
    # the orphaned COPY_SEGMENT_STARTED rows are ended by the new leader's deferred delete
    b.rlm.delete_unreferenced(TP, orphan_grace_ms=0)
    from metadata.types import RemoteLogSegmentState

    started = b.rlmm.list_remote_log_segments(TP, include_superseded=True,
                                              states=[RemoteLogSegmentState.COPY_SEGMENT_STARTED])
    assert started == []


def test_new_leader_deleting_an_upload_in_flight_fences_the_round(make_world):
    """Found by the soak (a clean?wait=true answered 500): A's round registered its rewrite
    (COPY_SEGMENT_STARTED) and was copying it when B became leader and its deferred delete ended
    the row (outside B's epoch lineage). A then stored the segment's bloom filter: "was deleted",
    a plain failure. The filter is registered with the segment, in the fenced transaction, so
    what A learns next is that it was fenced."""
    a = make_world(broker_id=0)
    _workload(a, rounds=4)
    b = _follower_of(a, make_world)
    visible = a.read_all()
    cleaner = a.cleaner()
    real_copy = cleaner.rsm.copy_log_segment_data
    copies = []

    def copy_while_leadership_moves(md, data):
        out = real_copy(md, data)
        copies.append(md)
        if len(copies) == 1:
            b.rlm.become_leader(TP, 1, 1)
            b.rlm.delete_unreferenced(TP, orphan_grace_ms=0)  # ends A's STARTED row
        return out

    cleaner.rsm.copy_log_segment_data = copy_while_leadership_moves
    with pytest.raises(FencedLeaderEpochError):
        a.clean(cleaner)
    assert copies
    assert b.read_all() == visible
    b.rlm.delete_unreferenced(TP, orphan_grace_ms=0)
    assert_no_leak(b)


def test_a_round_fetches_each_transaction_index_at_most_once(make_world):
    from collections import Counter

    from log.record import ControlRecordType

    w = make_world(faulty=True)  # the fault-free wrapper logs every store call
    for r in range(4):
        w.produce([(f"k{i}".encode(), f"v{r}".encode()) for i in range(20)])
        w.produce([(b"t", b"aborted")], producer_id=r + 1, producer_epoch=0, base_sequence=0, transactional=True)
        w.log.append_marker(r + 1, 0, ControlRecordType.ABORT)
        w.roll_and_tier()
    w.store.log.clear()
    w.clean()
    txn_reads = Counter(key for op, key, _f in w.store.log if op == "get" and key.endswith(".txnindex"))
    assert txn_reads and max(txn_reads.values()) == 1  # map pass and rewrite share one fetch
    assert [v for _, k, v in w.read_all() if k == b"t"] == []  # and aborted data is still removed
