"""sweep_orphan_objects: unknown segment ids are removed unless a live lease names them."""

from __future__ import annotations

from log.clock import MockClock
from log.types import TopicPartition
from metadata import load_metadata_manager
from metadata.types import RemoteLogSegmentId, RemoteLogSegmentMetadata
from remote import load_object_store
from remote.orphans import lease_key, release_lease, segment_id_of_key, sweep_orphan_objects, write_lease

TP = TopicPartition("t", 0)


def _objects(store, sid: str, start: int = 0) -> list[str]:
    keys = [f"{TP.dir_name}/{start:020d}-{sid}{suffix}" for suffix in (".log", ".index", ".timeindex")]
    for k in keys:
        store.put(k, b"x")
    return keys


def test_sweep_keeps_registered_and_leased_objects_and_removes_the_rest(tmp_path):
    store = load_object_store(f"file://{tmp_path / 'obj'}")
    rlmm = load_metadata_manager("sqlite:///:memory:")
    clock = MockClock()
    rlmm.become_leader(TP, 0, 0)
    known = RemoteLogSegmentId.generate(TP)
    rlmm.add_remote_log_segment_metadata(RemoteLogSegmentMetadata(known, 0, 9, 1, 0, 1, 1, {0: 0}), leader_epoch=0)
    keep = _objects(store, known.id)
    orphan = _objects(store, "a" * 32, 10)
    leased = _objects(store, "b" * 32, 20)
    other = f"{TP.dir_name}/README"
    store.put(other, b"not a segment")
    store.put("t-1/00000000000000000000-" + "c" * 32 + ".log", b"another partition")
    write_lease(store, TP, "job-1", ["b" * 32], clock)

    deleted = sweep_orphan_objects(store, rlmm, TP, grace_ms=1000, clock=clock)
    assert sorted(deleted) == sorted(orphan)
    remaining = set(store.list(""))
    assert set(keep) | set(leased) | {other, lease_key(TP, "job-1")} <= remaining
    assert "t-1/00000000000000000000-" + "c" * 32 + ".log" in remaining

    clock.advance(1000)  # the lease expired: its job is presumed dead
    deleted = sweep_orphan_objects(store, rlmm, TP, grace_ms=1000, clock=clock)
    assert sorted(deleted) == sorted(leased + [lease_key(TP, "job-1")])
    assert set(keep) <= set(store.list(""))


def test_protect_and_release(tmp_path):
    store = load_object_store(f"file://{tmp_path / 'obj'}")
    rlmm = load_metadata_manager("sqlite:///:memory:")
    clock = MockClock()
    mine = _objects(store, "d" * 32)
    assert sweep_orphan_objects(store, rlmm, TP, grace_ms=0, clock=clock, protect=["d" * 32]) == []
    write_lease(store, TP, "job-2", ["d" * 32], clock)
    release_lease(store, TP, "job-2")
    assert sorted(sweep_orphan_objects(store, rlmm, TP, grace_ms=10**9, clock=clock)) == sorted(mine)
    assert segment_id_of_key(TP, mine[0]) == "d" * 32
    assert segment_id_of_key(TP, f"{TP.dir_name}/_leases/x.json") is None


def test_objects_of_a_finished_deletion_that_land_late_are_swept(tmp_path):
    """Regression (found by the soak): a PUT the client gave up on landed in the store after
    the segment's deletion finished; the sweep treated the DELETE_SEGMENT_FINISHED id as known
    and the object leaked forever."""
    from metadata.types import RemoteLogSegmentState as S

    store = load_object_store(f"file://{tmp_path / 'obj'}")
    rlmm = load_metadata_manager("sqlite:///:memory:")
    clock = MockClock()
    rlmm.become_leader(TP, 0, 0)
    gone = RemoteLogSegmentId.generate(TP)
    rlmm.add_remote_log_segment_metadata(RemoteLogSegmentMetadata(gone, 0, 9, 1, 0, 1, 1, {0: 0}), leader_epoch=0)
    for st in (S.DELETE_SEGMENT_STARTED, S.DELETE_SEGMENT_FINISHED):
        rlmm.update_remote_log_segment_state(gone, st, leader_epoch=0, event_timestamp_ms=1, broker_id=0)
    late = _objects(store, gone.id)  # the late PUTs
    live = RemoteLogSegmentId.generate(TP)
    rlmm.add_remote_log_segment_metadata(RemoteLogSegmentMetadata(live, 10, 19, 1, 0, 1, 1, {0: 0}),
                                         leader_epoch=0)
    keep = _objects(store, live.id, 10)
    assert sorted(sweep_orphan_objects(store, rlmm, TP, grace_ms=10**9, clock=clock)) == sorted(late)
    assert set(keep) <= set(store.list(""))


def test_a_lease_claims_every_id_with_its_prefix_until_released(tmp_path):
    """Ids made on Spark executors carry the job's tag: the lease claims them by prefix while the
    job runs, and the sweep after its release removes what no metadata row names."""
    from remote.orphans import Lease

    store = load_object_store(f"file://{tmp_path / 'obj'}")
    rlmm = load_metadata_manager("sqlite:///:memory:")
    clock = MockClock()
    tag = "0123456789ab"
    tagged = _objects(store, tag + "e" * 20)
    other = _objects(store, "f" * 32, 10)
    write_lease(store, TP, "job-3", (), clock, id_prefixes=[tag])
    assert sorted(sweep_orphan_objects(store, rlmm, TP, grace_ms=1000, clock=clock)) == sorted(other)
    assert set(tagged) <= set(store.list(""))
    release_lease(store, TP, "job-3")
    assert sorted(sweep_orphan_objects(store, rlmm, TP, grace_ms=1000, clock=clock)) == sorted(tagged)
    # the format: an old lease (no prefixes) still reads; prefixes must be hex
    assert Lease.from_bytes(b'{"job_id": "j", "renewed_ms": 1, "segment_ids": []}').id_prefixes == frozenset()
    assert Lease.from_bytes(Lease("j", 1, frozenset(), frozenset({tag})).to_bytes()).claims(tag + "0" * 20)
    import pytest

    with pytest.raises(ValueError, match="hex"):
        Lease("j", 1, frozenset(), frozenset({"not-hex!"}))
