"""The node's producer-id allocator: ids in blocks from the metadata store, shared by InitProducerId for
idempotent producers and the transaction coordinator."""

from __future__ import annotations

from metadata.producer_ids import ProducerIdAllocator
from service.per_node import per_node

#: the node's allocator, on the node's metadata store (made on first use)
allocator_for = per_node(lambda node: ProducerIdAllocator(node.metadata, node.broker_id))
