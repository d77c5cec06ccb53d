"""FindCoordinator v0-v4 on the wire: every key has one live owner, the same answer from every node, and moves when nodes come and go."""

from __future__ import annotations

from pathlib import Path

from kafka.protocol.metadata import FindCoordinatorRequest

from coordinator.ownership import slot_for
from tests.kafka.wire import InProcessNode, wait_until


def _find(node: InProcessNode, key: str, key_type: int = 0, version: int = 3) -> tuple[int, int, int]:
    w = node.wire()
    try:
        if version >= 4:
            r = w.call(FindCoordinatorRequest(key_type=key_type, coordinator_keys=[key]), version)
            c = r.coordinators[0]
            return c.error_code, c.node_id, c.port
        if version == 0:
            r = w.call(FindCoordinatorRequest(key=key), 0)
        else:
            r = w.call(FindCoordinatorRequest(key=key, key_type=key_type), version)
        return r.error_code, r.node_id, r.port
    finally:
        w.close()


def test_find_coordinator_two_nodes(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'meta.db'}"
    a = InProcessNode(tmp_path / "a", url, broker_id=1)
    b = None
    try:
        wait_until(lambda: len(a.coordinators.groups_ownership.owned_slots()) == 50, what="a owns every slot")
        for v in range(5):
            assert _find(a, "g", 0, v) == (0, 1, a.port)
        assert _find(a, "txn-1", 1, 4) == (0, 1, a.port)
        assert _find(a, "", 1, 3)[0] == 42  # INVALID_REQUEST: an empty transactional id
        assert _find(a, "x", 7, 4)[0] == 42
        b = InProcessNode(tmp_path / "b", url, broker_id=2)
        odd = next(f"group-{i}" for i in range(100) if slot_for(f"group-{i}", 50) % 2 == 1)
        even = next(f"group-{i}" for i in range(100) if slot_for(f"group-{i}", 50) % 2 == 0)
        wait_until(lambda: _find(a, odd)[1] == 2 and _find(b, odd)[1] == 2, what="the odd slots move to b")
        assert _find(b, odd) == (0, 2, b.port)
        assert _find(b, even) == (0, 1, a.port)
        wait_until(lambda: len(b.coordinators.txn_ownership.owned_slots()) == 25, what="b's txn slots")
        b.stop()
        b = None
        wait_until(lambda: _find(a, odd) == (0, 1, a.port), what="a takes the odd slots back")
    finally:
        if b is not None:
            b.stop()
        a.stop()
