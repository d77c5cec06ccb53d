"""CreateTopics v0-v7, DeleteTopics v0-v6 and CreatePartitions v0-v3 over the node's topic operations.

The same validation, shared metadata store and fencing as the HTTP API's /v1/topics (Node.create_topic,
Node.delete_topic, topic_sync), answered with Kafka's error codes: INVALID_CONFIG for a bad or
unknown config or a null value, TOPIC_ALREADY_EXISTS (also for a topic another node created),
INVALID_TOPIC_EXCEPTION for a bad name or one that collides with an existing topic's ('.' against '_'),
INVALID_REQUEST for a name listed twice in one request (none of its entries is acted on, as Kafka's
controller), INVALID_PARTITIONS,
INVALID_REPLICATION_FACTOR (there is one copy of each partition: a replication factor above 1 is
refused, as Kafka refuses one above the broker count), INVALID_REPLICA_ASSIGNMENT for manual
assignments, UNKNOWN_TOPIC_OR_PARTITION, NOT_LEADER_OR_FOLLOWER when a deletion is fenced.
``validate_only`` checks without creating. CreateTopics v0-v1 and DeleteTopics v0 (removed in Kafka 4.0)
are read and written through kio (service.kafka.kio_codec).
"""

from __future__ import annotations

import uuid
from collections import Counter
from collections.abc import Callable, Iterable, Iterator
from typing import Any

from kafka.protocol.admin import (
    CreatePartitionsRequest,
    CreatePartitionsResponse,
    CreateTopicsRequest,
    CreateTopicsResponse,
    DeleteTopicsRequest,
    DeleteTopicsResponse,
)

from log.config import LogConfig
from log.errors import (
    InvalidConfigError,
    InvalidRequestError,
    TopicExistsError,
)
from log.log_manager import MAX_PARTITIONS
from log.types import validate_topic_name
from service import topic_sync
from service.kafka.admin_configs import topic_config_entries
from service.kafka.errors import (
    INVALID_PARTITIONS,
    INVALID_REPLICATION_FACTOR,
    INVALID_REQUEST,
    INVALID_TOPIC_EXCEPTION,
    NONE,
    error_code,
    error_message,
)
from service.kafka.kio_codec import KioVersions
from service.kafka.registry import RequestContext, kafka_api

INVALID_REPLICA_ASSIGNMENT = 39
_DUPLICATE_NAME = "Duplicate topic name."
_NO_ID = uuid.UUID(int=0)

_CResult = CreateTopicsResponse.CreatableTopicResult
_CConfig = _CResult.CreatableTopicConfigs
_DResult = DeleteTopicsResponse.DeletableTopicResult
_PResult = CreatePartitionsResponse.CreatePartitionsTopicResult


class _Refused(Exception):
    """A refusal with its Kafka error code; its message is the answer's error_message as it is."""
    def __init__(self, code: int, message: str) -> None:
        super().__init__(message)
        self.code = code


def _message(e: BaseException) -> str | None:
    return str(e) if isinstance(e, _Refused) else error_message(e)


def _topic_id(ctx: RequestContext, name: str) -> uuid.UUID:
    fn = getattr(ctx.cluster, "topic_id", None)
    return fn(name) if fn is not None else _NO_ID


def _check_name(name: str) -> None:
    try:
        validate_topic_name(name)
    except InvalidRequestError as e:
        raise _Refused(INVALID_TOPIC_EXCEPTION, str(e)) from None


def _create_one(ctx: RequestContext, t: Any, validate_only: bool) -> Any:
    node = ctx.node
    name = t.name
    _check_name(name)
    partitions = node.config.num_partitions if t.num_partitions in (None, -1) else t.num_partitions
    if not 1 <= partitions <= MAX_PARTITIONS:
        raise _Refused(INVALID_PARTITIONS, f"Number of partitions must be 1..{MAX_PARTITIONS}, got {partitions}.")
    if t.replication_factor not in (None, -1, 1):
        raise _Refused(INVALID_REPLICATION_FACTOR,
                       f"Replication factor: {t.replication_factor} larger than the copies a partition has: 1.")
    if t.assignments:
        raise _Refused(INVALID_REPLICA_ASSIGNMENT, "manual replica assignments are not supported: each "
                                                   "partition has one copy, on its leader")
    nulls = [c.name for c in t.configs or () if c.value is None]
    if nulls:  # Kafka's controller: InvalidConfigurationException
        raise InvalidConfigError(f"Null value not supported for topic configs: {','.join(nulls)}")
    configs = {c.name: c.value for c in t.configs or ()}
    if validate_only:
        cfg = LogConfig.from_dict(configs)  # raises InvalidConfigError
        if any(x.name == name for x in node.topics()) or node.metadata.get_topic_config(name) is not None:
            raise TopicExistsError(f"Topic '{name}' already exists.")
        topic_sync.check_no_collision(node.log_manager, name)
        return name, partitions, cfg
    # a topic is the cluster's: one another node stored already exists (the HTTP API's create joins it instead)
    topic = node.create_topic(name, partitions, configs, join=False)
    return name, topic.partitions, topic.config


def _each_once(items: Iterable[Any], key: Callable[[Any], Any]) -> Iterator[tuple[Any, bool]]:
    """A request's entries, each ``key`` once, with whether the request lists that key more than once: Kafka's
    controller answers such a key once, with INVALID_REQUEST, and acts on none of its entries. A None key names
    nothing and is never a duplicate."""
    items = list(items)
    counts = Counter(key(i) for i in items)
    seen: set[Any] = set()
    for item in items:
        k = key(item)
        if k is not None and k in seen:
            continue
        seen.add(k)
        yield item, k is not None and counts[k] > 1


def _create(ctx: RequestContext, request: Any) -> Any:
    out = []
    for t, duplicate in _each_once(request.topics or (), lambda t: t.name):
        if duplicate:
            out.append(_CResult(name=t.name, topic_id=_NO_ID, error_code=INVALID_REQUEST,
                                error_message=_DUPLICATE_NAME, topic_config_error_code=NONE, num_partitions=-1,
                                replication_factor=-1, configs=None))
            continue
        try:
            name, partitions, cfg = _create_one(ctx, t, bool(request.validate_only))
        except Exception as e:  # noqa: BLE001 - every failure is the topic's error code
            code = e.code if isinstance(e, _Refused) else error_code(e)
            out.append(_CResult(name=t.name, topic_id=_NO_ID, error_code=code, error_message=_message(e),
                                topic_config_error_code=NONE, num_partitions=-1, replication_factor=-1,
                                configs=None))
            continue
        configs = [_CConfig(name=n, value=v, read_only=False, config_source=src, is_sensitive=False)
                   for n, v, src, _doc, _type in topic_config_entries(cfg)]
        out.append(_CResult(name=name, topic_id=_topic_id(ctx, name) if not request.validate_only else _NO_ID,
                            error_code=NONE, error_message=None, topic_config_error_code=NONE,
                            num_partitions=partitions, replication_factor=1, configs=configs))
    return CreateTopicsResponse(throttle_time_ms=0, topics=out)


@kafka_api(CreateTopicsRequest, min_version=2, max_version=7, older=KioVersions(0, 1))
async def handle_create_topics(ctx: RequestContext, request: Any) -> Any:
    return await ctx.run(_create, ctx, request)


def _delete(ctx: RequestContext, request: Any) -> Any:
    names = [(t.name, t.topic_id) for t in request.topics or ()] if ctx.api_version >= 6 else \
        [(n, None) for n in request.topic_names or ()]
    ids = None
    out = []
    # an entry is named by its name, else by its topic id (v6+)
    for (name, topic_id), duplicate in _each_once(names, lambda e: e[0] or (None if e[1] in (None, _NO_ID) else e[1])):
        if duplicate:
            out.append(_DResult(name=name, topic_id=topic_id or _NO_ID, error_code=INVALID_REQUEST,
                                error_message=_DUPLICATE_NAME if name else "Duplicate topic id."))
            continue
        try:
            if not name and topic_id is not None and topic_id != _NO_ID:
                if ids is None:
                    ids = {v: k for k, v in getattr(ctx.cluster, "topic_ids", dict)().items()}
                name = ids.get(topic_id)
                if name is None:
                    raise _Refused(100, f"unknown topic id {topic_id}")  # UNKNOWN_TOPIC_ID
            tid = _topic_id(ctx, name) if ctx.api_version >= 6 else _NO_ID
            ctx.node.delete_topic(name)  # forgets the topic's id too
        except Exception as e:  # noqa: BLE001 - every failure is the topic's error code
            code = e.code if isinstance(e, _Refused) else error_code(e)
            out.append(_DResult(name=name, topic_id=topic_id or _NO_ID, error_code=code,
                                error_message=_message(e)))
            continue
        out.append(_DResult(name=name, topic_id=tid, error_code=NONE, error_message=None))
    return DeleteTopicsResponse(throttle_time_ms=0, responses=out)


@kafka_api(DeleteTopicsRequest, min_version=1, max_version=6, older=KioVersions(0, 0))
async def handle_delete_topics(ctx: RequestContext, request: Any) -> Any:
    return await ctx.run(_delete, ctx, request)


def _grow(ctx: RequestContext, t: Any, validate_only: bool) -> None:
    node = ctx.node
    topic = node.topic(t.name)  # UnknownTopicOrPartitionError
    if t.assignments:
        raise _Refused(INVALID_REPLICA_ASSIGNMENT, "manual replica assignments are not supported")
    if t.count == topic.partitions:
        raise _Refused(INVALID_PARTITIONS, f"Topic already has {topic.partitions} partitions.")
    if t.count < topic.partitions:
        raise _Refused(INVALID_PARTITIONS, f"Topic currently has {topic.partitions} partitions, which is higher "
                                           f"than the requested {t.count}.")
    if t.count > MAX_PARTITIONS:
        raise _Refused(INVALID_PARTITIONS, f"at most {MAX_PARTITIONS} partitions")
    if not validate_only:
        topic_sync.add_partitions(node.log_manager, node.metadata, t.name, t.count)


def _create_partitions(ctx: RequestContext, request: Any) -> Any:
    out = []
    for t, duplicate in _each_once(request.topics or (), lambda t: t.name):
        if duplicate:
            out.append(_PResult(name=t.name, error_code=INVALID_REQUEST, error_message=_DUPLICATE_NAME))
            continue
        try:
            _grow(ctx, t, bool(request.validate_only))
        except Exception as e:  # noqa: BLE001 - every failure is the topic's error code
            code = e.code if isinstance(e, _Refused) else error_code(e)
            out.append(_PResult(name=t.name, error_code=code, error_message=_message(e)))
            continue
        out.append(_PResult(name=t.name, error_code=NONE, error_message=None))
    return CreatePartitionsResponse(throttle_time_ms=0, results=out)


@kafka_api(CreatePartitionsRequest, min_version=0, max_version=3)
async def handle_create_partitions(ctx: RequestContext, request: Any) -> Any:
    return await ctx.run(_create_partitions, ctx, request)
