"""What the operator routes for groups and transactions share: the node's Kafka coordinators and who coordinates a key."""

from __future__ import annotations

from typing import Any

from coordinator.ownership import SlotStatus, slot_for


def coordinators(node: Any) -> Any:
    """The node's Kafka coordinators (None when the node runs no Kafka listener)."""
    from service.kafka.coordinators import for_node

    return for_node(node)


def coordinator_of(ownership: Any | None, key: str, slots: int) -> dict[str, Any]:
    """The slot of ``key`` and the node coordinating it (``ownership`` None: only the slot, out of ``slots``)."""
    if ownership is None:
        return {"slot": slot_for(key, slots), "broker_id": None, "epoch": None, "local": False}
    own = ownership.lookup(key)
    return {"slot": own.slot, "broker_id": own.owner, "epoch": own.epoch if own.epoch >= 0 else None,
            "local": own.status is SlotStatus.OWNED}
