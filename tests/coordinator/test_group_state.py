"""The group coordinator's state machine in process (no network): rebalances, static members, pending members,
protocol checks, and a group reloaded by a new coordinator at the same generation."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from coordinator.group import errors as E
from coordinator.group.coordinator import GroupConfig, GroupCoordinator
from coordinator.ownership import CoordinatorOwnership
from metadata.coordinators import GROUP
from metadata.sql_coordinators import SqlCoordinatorStore
from metadata.sql_group_offsets import SqlGroupStore

P = [("range", b"meta")]


def make(url: str, incarnation: str = "i1") -> tuple[GroupCoordinator, CoordinatorOwnership]:
    store = SqlCoordinatorStore(url)
    own = CoordinatorOwnership(store, GROUP, broker_id=0, incarnation=incarnation, live=lambda: {0: incarnation},
                               now_ms=lambda: int(time.time() * 1000), num_slots=2)
    gc = GroupCoordinator(SqlGroupStore(engine=store.engine), own,
                          config=GroupConfig(min_session_timeout_ms=10, initial_rebalance_delay_ms=0)).start()
    own.reconcile()
    return gc, own


@pytest.fixture
def gc(tmp_path: Path) -> Iterator[GroupCoordinator]:
    g, _own = make(f"sqlite:///{tmp_path / 'm.db'}")
    yield g
    g.close()


def join(gc: GroupCoordinator, member: str = "", instance: str | None = None, protocols: Any = P,
         session_ms: int = 30_000, rebalance_ms: int = 2_000, ptype: str = "consumer", v4: bool = False) -> Any:
    return gc.submit(gc.join_group("g", member, instance, "c", "/h", session_ms, rebalance_ms, ptype, protocols, v4))


def stable_pair(gc: GroupCoordinator) -> tuple[str, str]:
    """Two members, generation 2, the first leads."""
    a = join(gc).result(5)
    gc.call_blocking(gc.sync_group("g", 1, a.member_id, None, None, None, {a.member_id: b"A"}))
    fb = join(gc)
    fa = join(gc, a.member_id)
    ra, rb = fa.result(5), fb.result(5)
    assert ra.generation == rb.generation == 2 and ra.leader == a.member_id
    fs = gc.submit(gc.sync_group("g", 2, rb.member_id, None, None, None, {}))
    gc.call_blocking(gc.sync_group("g", 2, a.member_id, None, None, None, {a.member_id: b"A", rb.member_id: b"B"}))
    assert fs.result(5)[3] == b"B"
    return a.member_id, rb.member_id


def test_follower_rejoin_keeps_the_generation_leader_rejoin_rebalances(gc: GroupCoordinator) -> None:
    a, b = stable_pair(gc)
    r = join(gc, b).result(5)  # same metadata, a follower: the current generation, no rebalance
    assert (r.error, r.generation, r.members) == (0, 2, [])
    fa = join(gc, a)  # the leader's rejoin starts a rebalance
    assert gc.call_blocking(gc.heartbeat("g", 2, b, None)) == E.REBALANCE_IN_PROGRESS
    rb = join(gc, b).result(5)
    assert fa.result(5).generation == rb.generation == 3
    assert gc.call_blocking(gc.heartbeat("g", 2, b, None)) == E.ILLEGAL_GENERATION
    assert gc.call_blocking(gc.sync_group("g", 3, b, None, "other", None, {}))[0] == E.INCONSISTENT_GROUP_PROTOCOL


def test_protocol_and_timeout_checks(gc: GroupCoordinator) -> None:
    assert join(gc, session_ms=1).result(5).error == E.INVALID_SESSION_TIMEOUT
    assert gc.call_blocking(gc.join_group("", "", None, "c", "/h", 30_000, 1000, "consumer", P, False)).error == \
        E.INVALID_GROUP_ID
    a = join(gc).result(5)
    assert a.error == 0
    assert join(gc, ptype="connect").result(5).error == E.INCONSISTENT_GROUP_PROTOCOL
    assert join(gc, protocols=[("roundrobin", b"")]).result(5).error == E.INCONSISTENT_GROUP_PROTOCOL
    assert join(gc, "ghost").result(5).error == E.UNKNOWN_MEMBER_ID


def test_static_member_restart_keeps_its_assignment_without_a_rebalance(gc: GroupCoordinator) -> None:
    a = join(gc, instance="leader-i").result(5)
    gc.call_blocking(gc.sync_group("g", 1, a.member_id, "leader-i", None, None, {a.member_id: b"A"}))
    fb = join(gc, instance="follower-i")
    fa = join(gc, a.member_id, instance="leader-i")
    b = fb.result(5)
    fa.result(5)
    fs = gc.submit(gc.sync_group("g", 2, b.member_id, "follower-i", None, None, {}))
    gc.call_blocking(gc.sync_group("g", 2, a.member_id, "leader-i", None, None,
                                   {a.member_id: b"A", b.member_id: b"B"}))
    assert fs.result(5)[3] == b"B"
    r = join(gc, instance="follower-i").result(5)  # the follower restarts: a new member id, same generation
    assert r.error == 0 and r.generation == 2 and r.member_id != b.member_id
    assert gc.call_blocking(gc.sync_group("g", 2, r.member_id, "follower-i", None, None, {}))[3] == b"B"
    assert gc.call_blocking(gc.heartbeat("g", 2, b.member_id, "follower-i")) == E.FENCED_INSTANCE_ID
    assert gc.call_blocking(gc.heartbeat("g", 2, r.member_id, "follower-i")) == E.NONE


def test_a_pending_member_that_never_joins_expires(gc: GroupCoordinator) -> None:
    a = join(gc).result(5)
    gc.call_blocking(gc.sync_group("g", 1, a.member_id, None, None, None, {a.member_id: b"A"}))
    pending = join(gc, v4=True, session_ms=300).result(5)
    assert pending.error == E.MEMBER_ID_REQUIRED
    time.sleep(0.5)  # it never comes back: the group is not held up, its member id is unknown
    assert join(gc, pending.member_id).result(5).error == E.UNKNOWN_MEMBER_ID
    assert gc.call_blocking(gc.heartbeat("g", 1, a.member_id, None)) == E.NONE


def test_a_new_coordinator_loads_the_group_at_its_generation(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'm.db'}"
    gc1, own1 = make(url, "i1")
    try:
        a, b = stable_pair(gc1)
    finally:
        own1.stop(release=True)
        gc1.close()
    gc2, own2 = make(url, "i2")
    try:
        assert gc2.call_blocking(gc2.heartbeat("g", 2, b, None)) == E.NONE
        assert gc2.call_blocking(gc2.sync_group("g", 2, b, None, None, None, {}))[3] == b"B"
        d = gc2.call_blocking(gc2.describe_group("g"))
        assert (d["state"], d["generation"], d["leader"]) == ("Stable", 2, a)
    finally:
        own2.stop()
        gc2.close()


def test_a_groups_writes_reach_the_store_in_order(tmp_path: Path) -> None:
    """Regression: the writes ran on a pool of threads, so the Empty state stored when the last member left could land
    after the Stable generation that followed it (and the next coordinator loaded the group Empty: a rebalance)."""
    gc, own = make(f"sqlite:///{tmp_path / 'm.db'}")
    store = gc.store
    real_save = store.save_group
    release = threading.Event()
    saved: list[str] = []

    def save_group(record: Any, fence: Any) -> None:
        if record.state == "Empty":
            assert release.wait(10)  # a slow write of the older state
        real_save(record, fence)
        saved.append(record.state)

    try:
        a = join(gc).result(5)
        gc.call_blocking(gc.sync_group("g", 1, a.member_id, None, None, None, {a.member_id: b"A"}))
        store.save_group = save_group  # type: ignore[method-assign]
        gc.call_blocking(gc.leave_group("g", [(a.member_id, None)]))  # generation 2, Empty: its write waits
        b = join(gc).result(5)
        assert b.generation == 3
        synced = gc.submit(gc.sync_group("g", 3, b.member_id, None, None, None, {b.member_id: b"B"}))
        time.sleep(0.2)
        release.set()
        assert synced.result(5)[0] == E.NONE
        deadline = time.monotonic() + 10
        while len(saved) < 2 and time.monotonic() < deadline:
            time.sleep(0.01)
        assert saved == ["Empty", "Stable"]
        record = store.group("g")
        assert record is not None and (record.state, record.generation) == ("Stable", 3)
    finally:
        release.set()
        own.stop()
        gc.close()
