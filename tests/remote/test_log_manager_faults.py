"""RemoteLogManager under object-store faults (FaultyObjectStore) during copy, fetch and
delete: operations fail with a clear error or retry; no data is lost; nothing stays
unreferenced forever; a local segment is deleted only once its copy FINISHED."""

from __future__ import annotations

from pathlib import Path

import pytest

from log.clock import MockClock
from log.fetch import READ_COMMITTED, READ_UNCOMMITTED
from metadata.types import RemoteLogSegmentState as S
from remote.errors import RemoteStorageError, RemoteStorageIOError, RemoteStorageTimeoutError
from tests.remote.tiering import TP, TierEnv, local_records, produce, read_all


@pytest.fixture
def env(tmp_path: Path, clock: MockClock) -> TierEnv:
    e = TierEnv(tmp_path, clock)
    yield e
    e.close()


def _states(env: TierEnv) -> list[S]:
    return [m.state for m in env.md.list_remote_log_segments(TP, include_superseded=True, states=list(S))]


def _setup(env: TierEnv, **cfg):
    log = env.create(**cfg)
    produce(log, batches=50, clock=env.clock)
    log.roll()
    env.clock.advance(10)
    return log, {iso: local_records(log, iso) for iso in (READ_UNCOMMITTED, READ_COMMITTED)}


def _assert_complete(env: TierEnv, expected) -> None:
    for iso, recs in expected.items():
        assert read_all(env.rlm, TP, iso) == recs


@pytest.mark.parametrize("kind", ["transient", "timeout", "truncate"])
def test_transient_upload_faults_are_retried(env: TierEnv, kind: str) -> None:
    log, expected = _setup(env)
    env.store.inject("put", kind, on_calls={1, 3})  # two failed attempts, each retried
    result = env.rlm.tier(TP)
    assert result.copied and result.deleted_local == result.copied
    assert set(_states(env)) == {S.COPY_SEGMENT_FINISHED}
    _assert_complete(env, expected)


@pytest.mark.parametrize("kind,key", [("error", ".log"), ("error", ".index"), ("truncate", ".timeindex"),
                                      ("timeout", ".leader_epoch_checkpoint")])
def test_failed_upload_is_abandoned_and_local_data_kept(env: TierEnv, kind: str, key: str) -> None:
    log, expected = _setup(env)
    bases = [s.base_offset for s in log.all_segments()]
    env.store.inject("put", kind, key_contains=key)
    with pytest.raises(RemoteStorageError) as e:
        env.rlm.tier(TP)
    assert key in str(e.value)  # the error names the object
    assert env.rlm.stats().copy_failures == 1
    # the attempt was abandoned through the delete path; no object and no reference remains
    assert _states(env) == [S.DELETE_SEGMENT_FINISHED]
    assert env.object_keys() == []
    assert env.rlm.apply_local_retention(TP) == []
    assert [s.base_offset for s in log.all_segments()] == bases
    _assert_complete(env, expected)
    env.store.clear()
    res = env.rlm.run_once()[TP]
    assert res.errors == [] and res.copied == bases[:-1] and res.deleted_local == bases[:-1]
    _assert_complete(env, expected)


def test_upload_failure_whose_cleanup_also_fails_is_deleted_by_a_later_run_once(env: TierEnv) -> None:
    _log, expected = _setup(env)
    env.store.inject("put", "error", key_contains=".timeindex")
    env.store.inject("delete", "error")
    res = env.rlm.run_once()[TP]
    assert any("copy" in e for e in res.errors)
    (orphan,) = env.md.list_remote_log_segments(TP, states=[S.COPY_SEGMENT_STARTED, S.DELETE_SEGMENT_STARTED])
    assert any(orphan.id in k for k in env.object_keys())  # the .log object could not be removed
    env.store.clear()
    res = env.rlm.run_once()[TP]  # no grace period needed: this manager knows it abandoned it
    assert res.errors == [] and orphan.id in res.deleted_remote
    assert not any(orphan.id in k for k in env.object_keys())
    assert all(m.state is not S.COPY_SEGMENT_STARTED for m in
               env.md.list_remote_log_segments(TP, include_superseded=True, states=list(S)))
    _assert_complete(env, expected)


def test_crash_fault_in_the_store_is_treated_as_a_failed_copy(env: TierEnv) -> None:
    log, expected = _setup(env)
    env.store.inject("put", "crash", key_contains=".index", times=1)
    with pytest.raises(RuntimeError, match="injected crash"):
        env.rlm.copy_rolled_segments(TP)
    assert _states(env) == [S.DELETE_SEGMENT_FINISHED] and env.object_keys() == []
    rolled = [s.base_offset for s in log.all_segments()[:-1]]
    assert env.rlm.tier(TP).copied == rolled
    _assert_complete(env, expected)


@pytest.mark.parametrize("kind", ["transient", "timeout", "truncate"])
def test_transient_fetch_faults_are_retried(env: TierEnv, kind: str) -> None:
    _log, expected = _setup(env)
    env.rlm.tier(TP)
    env.store.inject("get_range", kind, on_calls={1, 2, 5})
    env.store.inject("get", kind, on_calls={1, 4})  # offset and txn indexes
    _assert_complete(env, expected)
    assert [f.fired for f in env.store.faults] == [3, 2]  # every injected fault hit a read


@pytest.mark.parametrize("op,kind,err", [("get_range", "timeout", RemoteStorageTimeoutError),
                                         ("get_range", "error", RemoteStorageIOError),
                                         ("get", "error", RemoteStorageIOError)])
def test_persistent_fetch_faults_fail_clearly_and_recover(env: TierEnv, op, kind, err) -> None:
    _log, expected = _setup(env)
    env.rlm.tier(TP)
    env.store.inject(op, kind)
    with pytest.raises(err, match="injected"):
        env.rlm.read(TP, 0)
    env.store.clear()
    _assert_complete(env, expected)


def test_delete_faults_leave_delete_started_until_a_later_run_finishes(env: TierEnv) -> None:
    log, expected = _setup(env, retention_ms=5, local_retention_ms=0)
    env.rlm.tier(TP)
    n = len(env.rlm.remote_segments(TP))
    env.clock.advance(10_000)
    env.store.inject("delete", "error", key_contains=".index")
    res = env.rlm.run_once()[TP]
    assert any("remote retention" in e for e in res.errors)
    assert S.DELETE_SEGMENT_STARTED in _states(env)
    # a tombstoned segment is no longer served, and what is still referenced reads fine
    start = env.rlm.log_start_offset(TP)
    assert start > 0
    env.store.clear()
    res = env.rlm.run_once()[TP]
    assert res.errors == []
    assert set(_states(env)) == {S.DELETE_SEGMENT_FINISHED} and len(_states(env)) == n
    assert env.object_keys() == []
    assert env.rlm.log_start_offset(TP) == log.log_start_offset
    assert expected  # everything expired by retention.ms: nothing left to read remotely


def test_transient_delete_faults_are_retried_within_one_run(env: TierEnv) -> None:
    _log, _expected = _setup(env, retention_ms=5, local_retention_ms=0)
    env.rlm.tier(TP)
    env.clock.advance(10_000)
    env.store.inject("delete", "transient", on_calls={1, 2})
    res = env.rlm.run_once()[TP]
    assert res.errors == [] and res.deleted_remote
    assert env.object_keys() == []
