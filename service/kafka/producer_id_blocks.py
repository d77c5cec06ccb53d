"""The node's producer-id allocator: ids in blocks from the metadata store, shared by InitProducerId for
idempotent producers and the transaction coordinator."""

from __future__ import annotations

import threading
import weakref
from typing import Any

from metadata.producer_ids import ProducerIdAllocator

_ALLOCATORS: weakref.WeakKeyDictionary[Any, ProducerIdAllocator] = weakref.WeakKeyDictionary()
_LOCK = threading.Lock()


def allocator_for(node: Any) -> ProducerIdAllocator:
    """The node's allocator, on the node's metadata store (made on first use)."""
    with _LOCK:
        alloc = _ALLOCATORS.get(node)
        if alloc is None:
            alloc = _ALLOCATORS[node] = ProducerIdAllocator(node.metadata, node.broker_id)
        return alloc
