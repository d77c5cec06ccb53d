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
    """The node's allocator, on the node's metadata store (opened on first use)."""
    with _LOCK:
        alloc = _ALLOCATORS.get(node)
        if alloc is None:
            from metadata.sql_producer_ids import SqlProducerIdBlockStore

            store = SqlProducerIdBlockStore(node.config.metadata_url,
                                            lock_timeout_ms=getattr(node.config, "metadata_lock_timeout_ms", 5_000))
            alloc = _ALLOCATORS[node] = ProducerIdAllocator(store, node.broker_id)
        return alloc
