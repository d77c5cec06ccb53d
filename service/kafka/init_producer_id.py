"""InitProducerId v0-v4 for idempotent producers: a producer id unique across every node sharing the metadata store, at epoch 0.

Ids come in blocks from the metadata store (metadata/producer_ids.py), so no two nodes, and no
restart of one, ever hand out the same id. A transactional id needs the transaction
coordinator, which this node does not run yet: such a request answers NOT_COORDINATOR.
"""

from __future__ import annotations

import threading
import weakref
from typing import Any

import kafka.errors as kerr
from kafka.protocol.producer import InitProducerIdRequest

from log.errors import TiercompactError
from metadata.producer_ids import ProducerIdAllocator
from service.kafka.registry import RequestContext, kafka_api

_ALLOCATORS: weakref.WeakKeyDictionary[Any, ProducerIdAllocator] = weakref.WeakKeyDictionary()
_LOCK = threading.Lock()


def allocator_for(node: Any) -> ProducerIdAllocator:
    """The node's allocator, on the node's metadata store (made on first use)."""
    with _LOCK:
        alloc = _ALLOCATORS.get(node)
        if alloc is None:
            alloc = _ALLOCATORS[node] = ProducerIdAllocator(node.metadata, node.broker_id)
        return alloc


def _next_id(node: Any) -> int:
    return allocator_for(node).next_id()


@kafka_api(InitProducerIdRequest, min_version=0, max_version=4)
async def handle_init_producer_id(ctx: RequestContext, request: Any) -> Any:
    if request.transactional_id is not None:
        return ctx.response(throttle_time_ms=0, error_code=kerr.NotCoordinatorError.errno, producer_id=-1,
                            producer_epoch=-1)
    try:
        pid = await ctx.run(_next_id, ctx.node)
    except TiercompactError:
        return ctx.response(throttle_time_ms=0, error_code=kerr.CoordinatorNotAvailableError.errno, producer_id=-1,
                            producer_epoch=-1)
    return ctx.response(throttle_time_ms=0, error_code=0, producer_id=pid, producer_epoch=0)
