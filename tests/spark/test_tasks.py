"""The executor-side functions without Spark: they pickle, and scan/replay match the in-process steps."""

from __future__ import annotations

import pickle
from pathlib import Path

from cleaner.cleaner import build_offset_map_from_segments
from cleaner.offset_map import SkimpyOffsetMap
from cleaner.spark.tasks import (
    DigestOffsetMap,
    RewriteTask,
    ScanTask,
    SegmentRef,
    StoreSpec,
    TxnBatchHeader,
    TxnState,
    aborted_batches,
    run_scan,
    scan_segment,
)
from cleaner.transactions import CleanedTransactionMetadata
from log.index.bloom import key_digest
from log.index.txn_index import AbortedTxn
from log.record import ControlRecordType
from tests.spark.conftest import Workload, make_world, partitions_of


def _world(tmp_path: Path):
    w = make_world(tmp_path / "w", (f"file://{tmp_path / 'obj'}", {}), config={"local.retention.ms": -1})
    wl = Workload(11)
    tp = partitions_of(w)[0]
    for _ in range(3):
        wl.round(w, tp)
    return w, tp


def test_tasks_and_results_pickle_without_live_clients(tmp_path):
    w, tp = _world(tmp_path)
    try:
        md = w.rlmm.list_remote_log_segments(tp)[0]
        ref = SegmentRef.of(md)
        store = StoreSpec.of("s3://bucket/prefix", {"endpoint_url": "http://127.0.0.1:1"})
        task = RewriteTask(0, store, "a" * 32, (ref,), ((),), 1, 2, 3, 2, ((7, 5, 0),), TxnState(), 0.01, 4096, 65536)
        for obj in (task, ScanTask(1, store, ref, 0), run_scan(ScanTask(1, StoreSpec.of(w.store.url), ref, 0))):
            assert pickle.loads(pickle.dumps(obj)) == obj
        assert ref.metadata().remote_log_segment_id == md.remote_log_segment_id
    finally:
        w.close()


def test_scan_maps_exactly_what_build_offset_map_maps(tmp_path):
    w, tp = _world(tmp_path)
    try:
        segs = [s for s in w.lm.get_log(tp).all_segments() if s.size]
        start = segs[1].base_offset + 3  # mid-segment, like a checkpoint inside one
        txns = [t for s in segs for t in s.txn_index.all()]
        skimpy = SkimpyOffsetMap(1 << 20)
        m = CleanedTransactionMetadata()
        m.add_aborted(t for t in txns if t.last_offset >= start)
        upper = segs[-1].read_next_offset()
        build_offset_map_from_segments(segs, start, upper, skimpy, m, max_entries=10**6)
        results = [scan_segment(i, s, start) for i, s in enumerate(segs)]
        dirty = [(s.base_offset, s.read_next_offset() - 1, r.txn_headers) for s, r in zip(segs, results, strict=True)]
        skipped = aborted_batches(dirty, [(t.producer_id, t.first_offset, t.last_offset, t.last_stable_offset)
                                          for t in txns if t.last_offset >= start])
        reduced: dict[bytes, int] = {}
        for r in results:
            for d, off in r.keys.items():
                reduced[d] = max(reduced.get(d, -1), off)
            for d, off, batch in r.txn_keys:
                if batch not in skipped:
                    reduced[d] = max(reduced.get(d, -1), off)
        mapped = {d: o for d, o in reduced.items() if o >= 0}
        assert mapped and skipped  # the workload has mapped keys and aborted batches
        assert sorted(mapped) == sorted(skimpy.digests())
        keys = {k for s in segs for _p, b in s.batches() if not b.is_control
                for _o, k, _v in b.iter_key_offsets() if k is not None}
        for k in keys:
            assert mapped.get(key_digest(k), -1) == skimpy.get(k), k
    finally:
        w.close()


def test_txn_state_round_trips_and_replay_follows_markers():
    m = CleanedTransactionMetadata()
    m.add_aborted([AbortedTxn(7, 10, 20, 0), AbortedTxn(8, 30, 40, 0)])
    assert m.on_batch_read(TxnBatchHeader(7, 12, True, False, 2))  # aborted data
    assert not m.on_batch_read(TxnBatchHeader(9, 13, True, False, 1))  # committed-ongoing
    state = TxnState.capture(m)
    r = pickle.loads(pickle.dumps(state)).restore()
    assert TxnState.capture(r) == state
    # the restored state decides the next batches like the original
    for h in (TxnBatchHeader(7, 20, True, True, 1, int(ControlRecordType.ABORT)),
              TxnBatchHeader(9, 21, True, True, 1, int(ControlRecordType.COMMIT)),
              TxnBatchHeader(8, 31, True, False, 1)):
        a = m.on_control_batch_read(h) if h.is_control else m.on_batch_read(h)
        b = r.on_control_batch_read(h) if h.is_control else r.on_batch_read(h)
        assert a == b
    assert TxnState.capture(m) == TxnState.capture(r)


def test_digest_offset_map_answers_by_key():
    m = DigestOffsetMap([(key_digest(b"a"), 5)], latest_offset=9)
    assert m.get_all([b"a", b"b"]) == [5, -1]
    assert m.latest_offset == 9 and m.size == 1


def test_rewrite_uploads_a_key_index_beside_the_new_segment(tmp_path):
    """A Spark rewrite task uploads the new segment's exact key index and reports its size,
    which the driver records in the segment's metadata."""
    from cleaner.spark.tasks import run_rewrite
    from log.index.key_index import KeyIndex, build_segment_key_index
    from remote.storage_manager import IndexType

    w, tp = _world(tmp_path)
    try:
        md = w.rlmm.list_remote_log_segments(tp)[0]
        task = RewriteTask(0, StoreSpec.of(w.store.url), "b" * 32, (SegmentRef.of(md),), ((),), 1, 0,
                           md.end_offset + 1, md.end_offset, (), TxnState(), 0.01, 4096, 65536)
        res = run_rewrite(task, [])
        new = task.new_metadata(res.size, res.max_timestamp_ms, 1, key_index_bytes=res.key_index_bytes)
        raw = w.store.get(w.rsm.object_key(new, IndexType.KEY_INDEX))
        assert res.key_index_bytes == len(raw) == new.key_index_bytes
        path = tmp_path / "new.log"
        w.rsm.fetch_log_segment_to_file(new, path)
        assert KeyIndex.from_bytes(raw).to_bytes() == build_segment_key_index(path).to_bytes()
        assert len(KeyIndex.from_bytes(raw)) > 0
    finally:
        w.close()


def test_a_download_damaged_in_transit_is_fetched_again_by_scan_and_rewrite_tasks(tmp_path):
    """One bit flipped on the way from the store (once per object) is fetched once more, as
    remote reads and the in-process tiered round do, instead of failing the task."""
    import os

    from cleaner.spark import tasks
    from cleaner.spark.tasks import run_rewrite
    from remote.storage_manager import RemoteStorageManager
    from tests.support.faults import FaultyObjectStore

    w, tp = _world(tmp_path)
    spec = StoreSpec.of(w.store.url, {"faulty": True})
    try:
        md = w.rlmm.list_remote_log_segments(tp)[0]
        ref = SegmentRef.of(md)
        clean = run_scan(ScanTask(1, StoreSpec.of(w.store.url), ref, 0))
        faulty = FaultyObjectStore(w.store).inject("get_to_file", "flip", times=1, key_contains=".log")
        tasks._STORES[(os.getpid(), spec)] = RemoteStorageManager(faulty)
        assert run_scan(ScanTask(1, spec, ref, 0)).keys == clean.keys
        assert [f for _o, _k, f in faulty.log].count("flip") == 1  # the fault really fired
        faulty.inject("get_to_file", "flip", times=1, key_contains=".log")
        task = RewriteTask(0, spec, "c" * 32, (ref,), ((),), 1, 0, md.end_offset + 1, md.end_offset, (), TxnState(),
                           0.01, 4096, 65536)
        res = run_rewrite(task, [])
        assert [f for _o, _k, f in faulty.log].count("flip") == 2 and res.size > 0
    finally:
        tasks._STORES.pop((os.getpid(), spec), None)
        w.close()
