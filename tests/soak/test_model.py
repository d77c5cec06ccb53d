"""The soak's model check must catch what it is there to catch (and pass what is allowed)."""

from __future__ import annotations

from typing import Any

from tests.soak.model import HEADER, Model, Txn, check_read


def _rec(off: int, rid: str, key: str, value: str | None) -> dict[str, Any]:
    return {"offset": off, "key": key, "value": value, "headers": [{"key": HEADER, "value": rid}]}


def _model() -> Model:
    m = Model()
    for i, (key, value) in enumerate([("a", "1"), ("b", "2"), ("a", "3"), ("b", None)]):
        r = m.add(f"r{i}", "t", 0, key, value)
        r.status, r.offset = "acked", i
    return m


def kinds(vs: list[Any]) -> list[str]:
    return sorted(v.kind for v in vs)


def test_compacted_view_passes() -> None:
    m = _model()
    assert check_read(m, "t", 0, [_rec(2, "r2", "a", "3")], isolation="read_uncommitted", upper=4,
                      compacted=True) == []  # tombstone of b gone, a's newest kept
    assert check_read(m, "t", 0, [_rec(0, "r0", "a", "1"), _rec(2, "r2", "a", "3"), _rec(3, "r3", "b", None)],
                      isolation="read_uncommitted", upper=4, compacted=True) == []


def test_lost_resurrected_moved_phantom() -> None:
    m = _model()
    assert kinds(check_read(m, "t", 0, [], isolation="read_uncommitted", upper=4, compacted=True)) == ["lost"]
    assert kinds(check_read(m, "t", 0, [_rec(1, "r1", "b", "2"), _rec(2, "r2", "a", "3")],
                            isolation="read_uncommitted", upper=4, compacted=True)) == ["resurrected"]
    assert kinds(check_read(m, "t", 0, [_rec(5, "r2", "a", "3")], isolation="read_uncommitted", upper=6,
                            compacted=True)) == ["moved"]
    f = m.add("bad", "t", 0, "c", "x")
    f.status = "failed"
    assert "phantom" in kinds(check_read(m, "t", 0, [_rec(2, "r2", "a", "3"), _rec(4, "bad", "c", "x")],
                                         isolation="read_uncommitted", upper=5, compacted=True))
    assert kinds(check_read(m, "t", 0, [_rec(2, "r2", "a", "9")], isolation="read_uncommitted", upper=4,
                            compacted=True)) == ["corrupt"]


def test_unknown_is_promoted_once_seen() -> None:
    m = _model()
    u = m.add("u", "t", 0, "a", "4")
    u.status = "unknown"
    assert check_read(m, "t", 0, [_rec(7, "u", "a", "4")], isolation="read_uncommitted", upper=8,
                      compacted=True) == []
    assert (u.status, u.offset) == ("acked", 7)
    assert kinds(check_read(m, "t", 0, [_rec(2, "r2", "a", "3")], isolation="read_uncommitted", upper=8,
                            compacted=True)) == ["lost"]


def test_transactions() -> None:
    m = _model()
    txn = Txn("x", "t", 0, 5, 0, state="aborted")
    r = m.add("x.0", "t", 0, "a", "aborted", txn)
    r.status, r.offset = "acked", 4
    base = [_rec(2, "r2", "a", "3"), _rec(4, "x.0", "a", "aborted")]
    assert check_read(m, "t", 0, base, isolation="read_uncommitted", upper=5, compacted=True) == []
    assert kinds(check_read(m, "t", 0, base, isolation="read_committed", upper=5,
                            compacted=True)) == ["aborted-visible"]
    # an aborted record does not supersede: dropping a's committed value for it is a loss
    assert kinds(check_read(m, "t", 0, base[1:], isolation="read_committed", upper=5,
                            compacted=True)) == ["aborted-visible", "lost"]
    txn.state = "committed"
    assert check_read(m, "t", 0, base[1:], isolation="read_committed", upper=5, compacted=True) == []


def test_delete_policy_needs_every_record() -> None:
    m = _model()
    assert kinds(check_read(m, "t", 0, [_rec(2, "r2", "a", "3"), _rec(3, "r3", "b", None)],
                            isolation="read_uncommitted", upper=4, compacted=False)) == ["lost", "lost"]
