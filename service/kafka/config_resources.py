"""ListConfigResources v0-v1 (KIP-714's ListClientMetricsResources, widened by KIP-1142): the config resources there are.

As Kafka's broker: v0 lists only CLIENT_METRICS resources; v1 takes a list of resource types, an empty one meaning
every type it supports, and answers UNSUPPORTED_VERSION, listing nothing, when one asked for is not supported.
Kafka lists every topic, every broker (by id), the groups that have dynamic group configs and the client-metrics
subscriptions. Here the same, except for what does not exist in tiercompact:
- GROUP lists nothing: there are no group configs (no KIP-848 groups), so no group has dynamic ones;
- CLIENT_METRICS lists nothing: there are no client-metrics subscriptions (no KIP-714 telemetry);
- BROKER_LOGGER (8) is not supported (DescribeConfigs describes no loggers): asked for, it answers
  UNSUPPORTED_VERSION, and an empty list of types leaves it out.
Every node answers for the whole cluster (topics of the shared metadata store, brokers of the registry).
"""

from __future__ import annotations

from typing import Any

from kafka.protocol.admin import ListConfigResourcesRequest, ListConfigResourcesResponse

from service.kafka.errors import NONE, UNSUPPORTED_VERSION
from service.kafka.metadata_api import stored_topics
from service.kafka.registry import RequestContext, kafka_api

TOPIC, BROKER, BROKER_LOGGER, CLIENT_METRICS, GROUP = 2, 4, 8, 16, 32
#: the types v1 lists, in the order their resources are answered (Kafka's order: groups, client metrics, brokers,
#: topics); v0 knows only CLIENT_METRICS
SUPPORTED = (GROUP, CLIENT_METRICS, BROKER, TOPIC)

_Resource = ListConfigResourcesResponse.ConfigResource


def _names(ctx: RequestContext, resource_type: int) -> list[str]:
    if resource_type == TOPIC:
        return sorted(stored_topics(ctx.node))
    if resource_type == BROKER:
        return [str(b.broker_id) for b in ctx.cluster.brokers()]
    return []  # GROUP, CLIENT_METRICS: none exist here


def _list(ctx: RequestContext, request: Any) -> Any:
    if ctx.api_version == 0:
        types = [CLIENT_METRICS]
    else:
        asked = set(request.resource_types or ())
        if asked - set(SUPPORTED):
            return ListConfigResourcesResponse(throttle_time_ms=0, error_code=UNSUPPORTED_VERSION,
                                               config_resources=[])
        types = [t for t in SUPPORTED if not asked or t in asked]
    resources = [_Resource(resource_name=name, resource_type=t) for t in types for name in _names(ctx, t)]
    return ListConfigResourcesResponse(throttle_time_ms=0, error_code=NONE, config_resources=resources)


@kafka_api(ListConfigResourcesRequest, min_version=0, max_version=1)
async def handle_list_config_resources(ctx: RequestContext, request: Any) -> Any:
    return await ctx.run(_list, ctx, request)
