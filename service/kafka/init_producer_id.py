"""InitProducerId v0-v4 for idempotent producers: a producer id unique across every node sharing the metadata store, at epoch 0.

Ids come in blocks from the metadata store (metadata/producer_ids.py), so no two nodes, and no
restart of one, ever hand out the same id. A transactional id goes to the transaction
coordinator (service/kafka/transactions.py).
"""

from __future__ import annotations

from typing import Any

import kafka.errors as kerr
from kafka.protocol.producer import InitProducerIdRequest

from log.errors import TiercompactError
from service.kafka.producer_id_blocks import allocator_for
from service.kafka.registry import RequestContext, kafka_api


def _next_id(node: Any) -> int:
    return allocator_for(node).next_id()


@kafka_api(InitProducerIdRequest, min_version=0, max_version=4)
async def handle_init_producer_id(ctx: RequestContext, request: Any) -> Any:
    if request.transactional_id is not None:  # the transaction coordinator's
        from service.kafka.transactions import init_transactional

        return await init_transactional(ctx, request)
    try:
        pid = await ctx.run(_next_id, ctx.node)
    except TiercompactError:
        return ctx.response(throttle_time_ms=0, error_code=kerr.CoordinatorNotAvailableError.errno, producer_id=-1,
                            producer_epoch=-1)
    return ctx.response(throttle_time_ms=0, error_code=0, producer_id=pid, producer_epoch=0)
