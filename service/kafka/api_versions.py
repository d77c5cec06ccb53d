"""ApiVersions v0-v3: the API keys and version ranges this listener implements, straight from the registry."""

from __future__ import annotations

from typing import Any

from kafka.protocol.metadata import ApiVersionsRequest, ApiVersionsResponse

from service.kafka.registry import RequestContext, kafka_api, supported_versions


@kafka_api(ApiVersionsRequest, min_version=0, max_version=3, before_auth=True)
async def handle_api_versions(ctx: RequestContext, request: Any) -> Any:
    keys = [ApiVersionsResponse.ApiVersion(api_key=k, min_version=lo, max_version=hi)
            for k, lo, hi in supported_versions()]
    return ApiVersionsResponse(error_code=0, api_keys=keys, throttle_time_ms=0)
