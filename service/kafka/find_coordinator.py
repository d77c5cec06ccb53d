"""FindCoordinator v0-v4: the live node that coordinates a group or transactional id (batched keys from v4).

The owner is the node holding the key's slot (coordinator.ownership); nobody live holding it
answers COORDINATOR_NOT_AVAILABLE (retriable: a node claims it within a round), an unknown key
type INVALID_REQUEST, an empty transactional id INVALID_REQUEST, as Kafka's KafkaApis does.
"""

from __future__ import annotations

from typing import Any

import kafka.errors as kerr
from kafka.protocol.metadata import FindCoordinatorRequest, FindCoordinatorResponse

from service.kafka.registry import RequestContext, kafka_api

NONE = 0
COORDINATOR_NOT_AVAILABLE = kerr.CoordinatorNotAvailableError.errno
INVALID_REQUEST = kerr.InvalidRequestError.errno
GROUP_KEY, TRANSACTION_KEY = 0, 1


def _find(ctx: RequestContext, key: str, key_type: int) -> tuple[int, int, str, int]:
    """(error, node id, host, port) for one key."""
    coordinators = getattr(ctx.listener, "coordinators", None)
    if key_type not in (GROUP_KEY, TRANSACTION_KEY):
        return INVALID_REQUEST, -1, "", -1
    if key_type == TRANSACTION_KEY and not key:
        return INVALID_REQUEST, -1, "", -1
    if coordinators is None:
        return COORDINATOR_NOT_AVAILABLE, -1, "", -1
    own = coordinators.ownership(key_type)
    found = own.lookup(key)
    if found.owner is None:
        return COORDINATOR_NOT_AVAILABLE, -1, "", -1
    for b in ctx.cluster.brokers():
        if b.broker_id == found.owner:
            return NONE, b.broker_id, b.host, b.port
    return COORDINATOR_NOT_AVAILABLE, -1, "", -1


def _message(code: int) -> str | None:
    return None if code == NONE else kerr.for_code(code).__name__


@kafka_api(FindCoordinatorRequest, min_version=0, max_version=4)
async def handle_find_coordinator(ctx: RequestContext, request: Any) -> Any:
    key_type = int(getattr(request, "key_type", 0) or 0)
    if ctx.api_version >= 4:
        out = []
        for key in request.coordinator_keys or ():
            code, nid, host, port = await ctx.run(_find, ctx, key, key_type)
            out.append(FindCoordinatorResponse.Coordinator(key=key, node_id=nid, host=host, port=port,
                                                           error_code=code, error_message=_message(code)))
        return ctx.response(throttle_time_ms=0, coordinators=out)
    code, nid, host, port = await ctx.run(_find, ctx, request.key, key_type)
    return ctx.response(throttle_time_ms=0, error_code=code, error_message=_message(code), node_id=nid, host=host,
                        port=port)
