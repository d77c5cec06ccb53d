"""DescribeConfigs v0-v4, AlterConfigs v0-v2 and IncrementalAlterConfigs v0-v1 for topics, over the node's topic configs.

The same keys, validation and shared store as PATCH /v1/topics/{topic}/config (Node.alter_config):
an unknown key or bad value is INVALID_CONFIG, an unknown topic UNKNOWN_TOPIC_OR_PARTITION.
AlterConfigs replaces a topic's whole set of overrides (keys it leaves out go back to their
defaults), IncrementalAlterConfigs (KIP-339) sets, deletes, or appends to / subtracts from a
list-valued key (``cleanup.policy``). A broker resource describes the node's settings and topic
defaults under Kafka's broker names (service/kafka/broker_configs.py), all read-only: they are not
alterable here (the node's settings are ``tiercompact serve`` flags). DescribeConfigs v0 (removed in Kafka
4.0) is read and written through kio (service.kafka.kio_codec); its ``is_default`` is the config source
DEFAULT_CONFIG of v1+.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from kafka.protocol.admin import (
    AlterConfigsRequest,
    AlterConfigsResponse,
    DescribeConfigsRequest,
    DescribeConfigsResponse,
    IncrementalAlterConfigsRequest,
    IncrementalAlterConfigsResponse,
)

from log.config import CONFIG_DEF, INT32_KEYS, LogConfig
from log.errors import InvalidConfigError, InvalidRequestError
from service.kafka.broker_configs import DEFAULT_CONFIG, broker_config_entries
from service.kafka.errors import NONE, error_code, error_message
from service.kafka.kio_codec import KioVersions
from service.kafka.registry import RequestContext, kafka_api

TOPIC = 2
BROKER = 4
# DescribeConfigsResponse.ConfigSource
DYNAMIC_TOPIC_CONFIG = 1
# DescribeConfigsResponse.ConfigType
_BOOLEAN, _STRING, _INT, _LONG, _DOUBLE, _LIST = 1, 2, 3, 5, 6, 7
_LIST_KEYS = frozenset({"cleanup.policy", "leader.replication.throttled.replicas",
                        "follower.replication.throttled.replicas"})
# IncrementalAlterConfigs operations
SET, DELETE, APPEND, SUBTRACT = 0, 1, 2, 3

_DResult = DescribeConfigsResponse.DescribeConfigsResult
_DEntry = _DResult.DescribeConfigsResourceResult
_DSynonym = _DEntry.DescribeConfigsSynonym


def _show(value: Any) -> str:
    return ("true" if value else "false") if isinstance(value, bool) else str(value)


def _type_code(name: str) -> int:
    if name in _LIST_KEYS:
        return _LIST
    t = CONFIG_DEF[name].type
    if t is int:
        return _INT if name in INT32_KEYS else _LONG
    return _BOOLEAN if t is bool else _DOUBLE if t is float else _STRING


def topic_config_entries(cfg: LogConfig) -> list[tuple[str, str, int, str, int]]:
    """``(name, value, config source, documentation, config type)`` for every topic config key."""
    return [(k, _show(cfg.get(k)), DYNAMIC_TOPIC_CONFIG if k in cfg.overrides else DEFAULT_CONFIG,
             CONFIG_DEF[k].doc, _type_code(k)) for k in sorted(CONFIG_DEF)]


def _entry(name: str, value: str, source: int, type_: int, doc: str | None, *, read_only: bool,
           synonyms: bool) -> Any:
    return _DEntry(name=name, value=value, read_only=read_only, config_source=source,
                   is_default=source == DEFAULT_CONFIG, is_sensitive=False,
                   synonyms=[_DSynonym(name=name, value=value, source=source)] if synonyms else [],
                   config_type=type_, documentation=doc)


def _describe_one(ctx: RequestContext, r: Any, synonyms: bool, docs: bool) -> list[Any]:
    wanted = None if r.configuration_keys is None else set(r.configuration_keys)
    if r.resource_type == BROKER:  # the node's settings and topic defaults, all read-only
        defaults = [(name, value, type_) for name, value, _src, _doc, type_ in topic_config_entries(LogConfig())]
        entries = broker_config_entries(ctx.node, ctx.cluster, getattr(ctx.listener, "config", None),
                                        r.resource_name or "", defaults)
        return [_entry(name, value, source, type_, None, read_only=True, synonyms=synonyms)
                for name, value, source, type_ in entries if wanted is None or name in wanted]
    if r.resource_type != TOPIC:
        raise InvalidRequestError(f"resource type {r.resource_type} is not supported: topics (2) and brokers (4)")
    cfg = ctx.node.topic(r.resource_name).config
    return [_entry(name, value, source, type_, doc if docs else None, read_only=False, synonyms=synonyms)
            for name, value, source, doc, type_ in topic_config_entries(cfg) if wanted is None or name in wanted]


def _describe(ctx: RequestContext, request: Any) -> Any:
    results = []
    for r in request.resources or ():
        try:
            configs = _describe_one(ctx, r, bool(request.include_synonyms), bool(request.include_documentation))
        except Exception as e:  # noqa: BLE001 - every failure is the resource's error code
            results.append(_DResult(error_code=error_code(e), error_message=error_message(e),
                                    resource_type=r.resource_type, resource_name=r.resource_name, configs=[]))
            continue
        results.append(_DResult(error_code=NONE, error_message=None, resource_type=r.resource_type,
                                resource_name=r.resource_name, configs=configs))
    return DescribeConfigsResponse(throttle_time_ms=0, results=results)


@kafka_api(DescribeConfigsRequest, min_version=1, max_version=4, older=KioVersions(0, 0))
async def handle_describe_configs(ctx: RequestContext, request: Any) -> Any:
    return await ctx.run(_describe, ctx, request)


def _apply(ctx: RequestContext, r: Any, changes: Mapping[str, Any], validate_only: bool) -> None:
    topic = ctx.node.topic(r.resource_name)  # UnknownTopicOrPartitionError
    if validate_only:
        topic.config.with_overrides(changes)  # raises InvalidConfigError
        return
    ctx.node.alter_config(r.resource_name, dict(changes))


def _check_resource(r: Any, incremental: bool) -> None:
    if r.resource_type != TOPIC:
        raise InvalidRequestError(f"only topic configs (resource type 2) can be altered over Kafka, not type "
                                  f"{r.resource_type}: the node's own settings are `tiercompact serve` flags")
    names = [c.name for c in r.configs or ()]
    if len(names) != len(set(names)):
        raise InvalidRequestError("Error due to duplicate config keys")
    # Kafka: a null value is no way to reset a key (AlterConfigs leaves it out, IncrementalAlterConfigs DELETEs it)
    nulls = [c.name for c in r.configs or () if c.value is None and not (incremental and c.config_operation == DELETE)]
    if nulls:
        raise InvalidRequestError(f"Null value not supported for : {', '.join(nulls)}")


def _replacement(ctx: RequestContext, r: Any) -> dict[str, Any]:
    """AlterConfigs: the listed keys, and every other current override back to its default."""
    current = ctx.node.topic(r.resource_name).config.overrides
    changes: dict[str, Any] = dict.fromkeys(current)
    changes.update({c.name: c.value for c in r.configs or ()})
    return changes


def _incremental(ctx: RequestContext, r: Any) -> dict[str, Any]:
    cfg = ctx.node.topic(r.resource_name).config
    changes: dict[str, Any] = {}
    for c in r.configs or ():
        if c.name not in CONFIG_DEF:
            raise InvalidConfigError(f"Unknown topic config name: {c.name}")
        if c.config_operation == SET:
            changes[c.name] = c.value
        elif c.config_operation == DELETE:
            changes[c.name] = None
        elif c.config_operation in (APPEND, SUBTRACT):
            if c.name not in _LIST_KEYS:
                verb = "append" if c.config_operation == APPEND else "subtract"
                raise InvalidRequestError(f"Config value {verb} is not allowed for config key: {c.name}")
            items = [x.strip() for x in str(cfg.get(c.name)).split(",") if x.strip()]
            given = [x.strip() for x in (c.value or "").split(",") if x.strip()]
            if c.config_operation == APPEND:
                items += [x for x in given if x not in items]
            else:
                items = [x for x in items if x not in given]
            changes[c.name] = ",".join(items)
        else:
            raise InvalidRequestError(f"unknown config operation {c.config_operation} for {c.name}")
    return changes


def _alter(ctx: RequestContext, request: Any, incremental: bool) -> list[tuple[int, str | None, Any]]:
    out = []
    for r in request.resources or ():
        try:
            _check_resource(r, incremental)
            changes = _incremental(ctx, r) if incremental else _replacement(ctx, r)
            _apply(ctx, r, changes, bool(request.validate_only))
        except Exception as e:  # noqa: BLE001 - every failure is the resource's error code
            out.append((error_code(e), error_message(e), r))
            continue
        out.append((NONE, None, r))
    return out


async def _alter_response(ctx: RequestContext, request: Any, incremental: bool, response: Any) -> Any:
    """Run the alteration off the event loop and answer in ``response``'s shape (the two APIs
    share one per-resource response layout)."""
    done = await ctx.run(_alter, ctx, request, incremental)
    item = response.AlterConfigsResourceResponse
    return response(throttle_time_ms=0, responses=[
        item(error_code=code, error_message=msg, resource_type=r.resource_type, resource_name=r.resource_name)
        for code, msg, r in done])


@kafka_api(AlterConfigsRequest, min_version=0, max_version=2)
async def handle_alter_configs(ctx: RequestContext, request: Any) -> Any:
    return await _alter_response(ctx, request, False, AlterConfigsResponse)


@kafka_api(IncrementalAlterConfigsRequest, min_version=0, max_version=1)
async def handle_incremental_alter_configs(ctx: RequestContext, request: Any) -> Any:
    return await _alter_response(ctx, request, True, IncrementalAlterConfigsResponse)
