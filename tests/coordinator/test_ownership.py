"""Coordinator slots: Kafka's key -> slot hash, one owner per slot among live nodes, epoch CAS, hand-off and takeover."""

from __future__ import annotations

from pathlib import Path

import pytest

from coordinator.ownership import CoordinatorOwnership, SlotStatus, java_string_hash, slot_for
from metadata.coordinators import GROUP, CoordinatorFencedError
from metadata.sql_coordinators import SqlCoordinatorStore, fence


def test_java_hash_and_slot() -> None:
    assert java_string_hash("") == 0
    assert java_string_hash("hello") == 99162322
    assert java_string_hash("polygenelubricants") == -(2**31)
    assert slot_for("polygenelubricants", 50) == 0  # Utils.abs(Integer.MIN_VALUE) is 0
    assert java_string_hash("\u00e9t\u00e9") == 3 * 0 + ((0xE9 * 31 + 0x74) * 31 + 0xE9)
    assert slot_for("hello", 50) == 99162322 % 50
    assert slot_for("a", 7) == 97 % 7


class Cluster:
    """Nodes sharing one SQLite store, with a registry we control."""

    def __init__(self, tmp: Path) -> None:
        self.url = f"sqlite:///{tmp / 'meta.db'}"
        self.live: dict[int, str] = {}
        self.now = 1000

    def node(self, broker_id: int, incarnation: str, slots: int = 6) -> CoordinatorOwnership:
        self.live[broker_id] = incarnation
        return CoordinatorOwnership(SqlCoordinatorStore(self.url), GROUP, broker_id=broker_id,
                                    incarnation=incarnation, live=lambda: dict(self.live), now_ms=lambda: self.now,
                                    num_slots=slots)


def test_one_owner_per_slot_hand_off_and_takeover(tmp_path: Path) -> None:
    c = Cluster(tmp_path)
    a = c.node(1, "a1")
    loads: list[tuple[int, int]] = []
    unloads: list[int] = []
    a.add_listener(lambda s, e: loads.append((s, e)), unloads.append)
    a.reconcile()
    assert sorted(a.owned_slots()) == list(range(6))
    assert loads == [(s, 0) for s in range(6)]
    b = c.node(2, "b1")
    b.reconcile()  # a still holds everything: b waits
    assert b.owned_slots() == {}
    a.reconcile()  # a sees b: hands off b's preferred slots (odd ones)
    assert sorted(a.owned_slots()) == [0, 2, 4]
    assert sorted(unloads) == [1, 3, 5]
    b.reconcile()
    assert b.owned_slots() == {1: 1, 3: 1, 5: 1}
    a.reconcile()
    assert a.lookup("x").owner in (1, 2)
    for key in ("g1", "g2", "g3", "hello"):
        s = slot_for(key, 6)
        assert a.lookup(key).owner == b.lookup(key).owner == (1 if s % 2 == 0 else 2)
        assert (a.lookup(key).status == SlotStatus.OWNED) == (s % 2 == 0)
    # a's writes under its old epoch of slot 1 are fenced; b's are not
    with a.store.engine.begin() as conn, pytest.raises(CoordinatorFencedError):
        fence(conn, GROUP, 1, 1, 0)
    with b.store.engine.begin() as conn:
        fence(conn, GROUP, 1, 2, 1)
    # b restarts (new incarnation): it takes its own slots back at once, at a new epoch
    c.live[2] = "b2"
    b2 = c.node(2, "b2")
    b2.reconcile()
    assert b2.owned_slots() == {1: 2, 3: 2, 5: 2}
    # b dies (leaves the registry): a takes everything over
    del c.live[2]
    a.reconcile()
    assert sorted(a.owned_slots()) == list(range(6))
    assert a.owned_slots()[1] == 3
    b2.reconcile()  # b2 notices it was superseded
    assert b2.owned_slots() == {}


def test_claim_is_compare_and_swap(tmp_path: Path) -> None:
    s1 = SqlCoordinatorStore(f"sqlite:///{tmp_path / 'm.db'}")
    s2 = SqlCoordinatorStore(f"sqlite:///{tmp_path / 'm.db'}")
    assert s1.claim(GROUP, 3, 1, "x", 0, expected_epoch=None) is not None
    assert s2.claim(GROUP, 3, 2, "y", 0, expected_epoch=None) is None
    assert s2.claim(GROUP, 3, 2, "y", 0, expected_epoch=0).epoch == 1
    assert s1.claim(GROUP, 3, 1, "x", 0, expected_epoch=0) is None
    assert s1.holds(GROUP, 3, 2, 1) and not s1.holds(GROUP, 3, 1, 0)
    assert not s1.release(GROUP, 3, 1, 0)
    assert s2.release(GROUP, 3, 2, 1)
    assert s1.claims(GROUP)[3].released
    assert s1.claim(GROUP, 4, 1, "x", 0, expected_epoch=None) is not None
    assert s1.claim(GROUP, 5, 1, "x", 0, expected_epoch=None) is not None
    assert s1.claim(GROUP, 6, 2, "y", 0, expected_epoch=None) is not None
    assert s2.release_all(GROUP, 1, "x") == 2
    assert {s: c.broker_id for s, c in s1.claims(GROUP).items()} == {3: -1, 4: -1, 5: -1, 6: 2}


def test_claim_many_is_one_compare_and_swap_per_slot(tmp_path: Path) -> None:
    s = SqlCoordinatorStore(f"sqlite:///{tmp_path / 'm.db'}")
    assert s.claim(GROUP, 1, 7, "z", 0, expected_epoch=None) is not None
    won = s.claim_many(GROUP, {0: None, 1: None, 2: None}, 1, "x", 5)
    assert [(c.slot, c.epoch) for c in won] == [(0, 0), (2, 0)]  # slot 1 was taken: not ours
    won = s.claim_many(GROUP, {0: 0, 1: 3, 2: 0}, 2, "y", 6)
    assert [(c.slot, c.epoch, c.broker_id) for c in won] == [(0, 1, 2), (2, 1, 2)]
    assert s.claims(GROUP)[1].broker_id == 7
