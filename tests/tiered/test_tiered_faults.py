"""A crash or an object-store fault at every step of a tiered round, then recovery.

After each: every key's newest value still reads back, no record of a key whose
tombstone was already removed reappears, and no object is leaked.
"""

from __future__ import annotations

import pytest

from log.local_log import SimulatedCrash
from metadata.errors import MetadataStoreError
from remote.errors import RemoteStorageError
from tests.tiered.conftest import TP, assert_no_leak, final_state

GONE = [f"k{i:02d}".encode() for i in range(10)]  # deleted, and their tombstones removed


def _prepared(make_world, clock):
    """A tiered partition whose tombstones already expired, plus a dirty tail for the next round."""
    w = make_world(faulty=True)
    w.produce([(f"k{i:02d}".encode(), b"v1") for i in range(40)])
    w.roll_and_tier()
    w.produce([(k, None) for k in GONE] + [(f"k{i:02d}".encode(), b"v2") for i in range(10, 20)])
    w.roll_and_tier()
    w.clean()
    clock.advance(2000)  # past delete.retention.ms: the next round drops the tombstones
    w.produce([(f"k{i:02d}".encode(), b"v3") for i in range(20, 30)])
    w.roll_and_tier()
    w.clean()
    assert not any(k in GONE for _, k, _ in w.read_all())
    w.rlm.delete_unreferenced(TP)
    w.produce([(f"k{i:02d}".encode(), b"v4") for i in range(30, 40)])
    w.roll_and_tier()
    expected = final_state(w.read_all())
    assert len(expected) == 30 and expected[b"k35"] == b"v4"
    return w, expected


def _check(w, expected):
    records = w.read_all()
    assert final_state(records) == expected
    assert not any(k in GONE for _, k, _ in records), "a deleted key came back"


def _recover_and_finish(make_world, w, expected):
    """Restart (new LogManager, RLM and metadata connection on the same dirs), clean again."""
    w.close()
    w2 = make_world(create=False)
    w2.rlm.recover_orphans(TP)
    _check(w2, expected)
    w2.clean()
    w2.rlm.delete_unreferenced(TP, orphan_grace_ms=0)
    _check(w2, expected)
    assert_no_leak(w2)
    return w2


@pytest.mark.parametrize("step", ["mapped", "uploaded", "before_publish", "published"])
def test_crash_at_each_step_of_a_round_then_restart(make_world, clock, step):
    w, expected = _prepared(make_world, clock)
    cleaner = w.cleaner()

    def crash(at: str) -> None:
        if at == step:
            raise SimulatedCrash(at)

    cleaner.crash_hook = crash
    with pytest.raises(SimulatedCrash):
        w.clean(cleaner)
    referenced = {k for md in w.rlmm.list_remote_log_segments(TP) for k in w.rsm.object_keys(md)}
    orphans = w.object_keys() - referenced
    # uploads a crash left behind (or, after the publish, the replaced objects) are there to recover
    assert bool(orphans) == (step != "mapped")
    _recover_and_finish(make_world, w, expected)


@pytest.mark.parametrize("op", ["get_to_file", "put"])
def test_object_store_error_fails_the_round_cleanly(make_world, clock, op):
    w, expected = _prepared(make_world, clock)
    before = w.object_keys()
    # a persistent failure: the download (map pass) or the third upload of the round fails
    w.store.inject(op, "error", on_calls=None if op == "get_to_file" else {w.store.calls["put"] + 3})
    with pytest.raises(RemoteStorageError):
        w.clean()
    w.store.clear()
    _check(w, expected)
    assert w.object_keys() == before  # the round's own uploads were removed
    w.clean()
    w.rlm.delete_unreferenced(TP)
    _check(w, expected)
    assert_no_leak(w)


@pytest.mark.parametrize("op,kind", [("put", "truncate"), ("get_to_file", "timeout"), ("put", "transient")])
def test_transient_faults_are_retried_and_the_round_succeeds(make_world, clock, op, kind):
    w, expected = _prepared(make_world, clock)
    w.store.inject(op, kind, times=1)
    stats = w.clean()
    assert stats.bytes_uploaded > 0
    assert any(f == kind for _o, _k, f in w.store.log)  # the fault really fired
    w.rlm.delete_unreferenced(TP)
    _check(w, expected)
    assert_no_leak(w)


def test_a_download_damaged_in_transit_is_fetched_again_and_the_round_succeeds(make_world, clock):
    """Regression: one bit flipped on the way from the store made the round fail and marked the
    partition uncleanable, though the object itself was intact (reads already refetched)."""
    w, expected = _prepared(make_world, clock)
    w.store.inject("get_to_file", "flip", times=1, key_contains=".log")
    stats = w.clean()
    assert any(f == "flip" for _o, _k, f in w.store.log)  # the fault really fired
    assert stats.segments_downloaded >= 1
    w.rlm.delete_unreferenced(TP)
    _check(w, expected)
    assert_no_leak(w)


def test_metadata_failure_at_publish_removes_uploads(make_world, clock):
    w, expected = _prepared(make_world, clock)
    before = w.object_keys()

    def broken(*_a, **_k):
        raise MetadataStoreError("injected: the database is unavailable")

    w.rlmm.publish_compaction = broken
    with pytest.raises(MetadataStoreError):
        w.clean()
    assert w.object_keys() == before
    del w.rlmm.publish_compaction
    _check(w, expected)
    _recover_and_finish(make_world, w, expected)


def test_delete_faults_during_deferred_deletion_are_finished_later(make_world, clock):
    w, expected = _prepared(make_world, clock)
    w.clean()
    w.store.inject("delete", "error")
    try:
        w.rlm.delete_unreferenced(TP)
    except RemoteStorageError:
        pass  # reported; the segments stay unreferenced until a later pass
    _check(w, expected)
    w.store.clear()
    w.store.inject("delete", "crash", times=1)  # the process dies in the middle of a deletion
    with pytest.raises(RuntimeError):
        w.rlm.delete_unreferenced(TP)
    _recover_and_finish(make_world, w, expected)


def test_run_once_sweeps_objects_no_metadata_names(make_world, clock):
    """A Spark driver that died after its tasks uploaded leaves objects nobody registered."""
    w, expected = _prepared(make_world, clock)
    stray = f"{TP.dir_name}/{0:020d}-{'ab' * 16}.log"
    w.store.put(stray, b"uploaded by a driver that crashed before registering it")
    w.rlm.run_once()
    assert stray not in w.object_keys()
    _check(w, expected)
    assert_no_leak(w)
