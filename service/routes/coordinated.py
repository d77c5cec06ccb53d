"""What the operator routes for groups and transactions share: the node's Kafka coordinators, their store, who coordinates a key."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

from coordinator.ownership import SlotStatus, slot_for

S = TypeVar("S")


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


def store_of(node: Any, live: Callable[[Any], S | None], own: Callable[[Any], S]) -> S:
    """The running coordinators' store (``live(coordinators)``) or, without one, ``own(node)`` on the metadata store."""
    c = coordinators(node)
    store = None if c is None else live(c)
    return store if store is not None else own(node)
