"""RemoteLogManager.delete_replaced_now (erasures): only the named replaced segments go,
at once and validated (fenced); referenced segments and other replaced ones keep their schedule."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from log.clock import MockClock
from metadata.errors import FencedLeaderEpochError
from metadata.types import RemoteLogSegmentState as S
from tests.remote.test_log_manager import _fill, _supersede
from tests.remote.tiering import TP, TierEnv


@pytest.fixture
def env(tmp_path: Path, clock: MockClock) -> Iterator[TierEnv]:
    e = TierEnv(tmp_path, clock)
    yield e
    e.close()


def test_only_the_named_replaced_segments_are_deleted(env: TierEnv) -> None:
    log = env.create(local_retention_ms=0)
    _fill(log)
    env.rlm.tier(TP)
    remote = env.rlm.remote_segments(TP)
    assert len(remote) >= 3
    new = _supersede(env, env.rlm, remote[:2], 0)
    # a referenced segment and an unknown id are never deleted; one replaced segment is named
    done = env.rlm.delete_replaced_now(TP, [remote[0].id, new.id, remote[2].id, "f" * 32])
    assert list(done) == [remote[0].id]
    assert not env.inner.exists(env.rsm.object_key(remote[0]))
    assert env.inner.exists(env.rsm.object_key(remote[1]))  # replaced too, but not named: its schedule
    assert env.inner.exists(env.rsm.object_key(new)) and env.inner.exists(env.rsm.object_key(remote[2]))
    states = {m.id: m.state for m in env.md.list_remote_log_segments(TP, include_superseded=True, states=list(S))}
    assert states[remote[0].id] is S.DELETE_SEGMENT_FINISHED and states[remote[1].id] is S.COPY_SEGMENT_FINISHED
    assert env.rlm.delete_replaced_now(TP, [remote[0].id]) == {}  # already gone: nothing to do
    assert env.rlm.delete_unreferenced(TP) == [remote[1].id]  # the deferred loop takes the rest


def test_a_zombie_cannot_delete_replaced_segments(env: TierEnv) -> None:
    log = env.create(local_retention_ms=0)
    _fill(log)
    env.rlm.tier(TP)
    remote = env.rlm.remote_segments(TP)
    _supersede(env, env.rlm, remote[:1], 0)
    new_leader = env.make_rlm(2, name="broker")
    new_leader.become_leader(TP, 1, 2)
    with pytest.raises(FencedLeaderEpochError):
        env.rlm.delete_replaced_now(TP, [remote[0].id])
    assert env.inner.exists(env.rsm.object_key(remote[0]))
