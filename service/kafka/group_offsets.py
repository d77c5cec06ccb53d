"""OffsetCommit v0-v8, OffsetFetch v0-v8 (require_stable, batched groups in v8) and OffsetDelete v0 for consumer groups.

Offsets of topics or partitions the cluster does not have answer UNKNOWN_TOPIC_OR_PARTITION
(as Kafka's KafkaApis does before the coordinator sees them); the rest go to the group
coordinator, which stores them under its coordinator epoch. kafka-python's schemas start
OffsetCommit at v2 and OffsetFetch at v1 (Kafka 4.0 removed the older ones): OffsetCommit v0-v1 and
OffsetFetch v0 are read and written through kio (service.kafka.kio_codec). A v0 commit is one
without a generation (Kafka before 4.0 kept v0 offsets in ZooKeeper; here every version shares the
group's store) and v1's per-partition ``commit_timestamp`` is not used: the commit time is the node's.
"""

from __future__ import annotations

import time
import weakref
from typing import Any

from kafka.protocol.consumer import (
    OffsetCommitRequest,
    OffsetCommitResponse,
    OffsetDeleteRequest,
    OffsetDeleteResponse,
    OffsetFetchRequest,
    OffsetFetchResponse,
)

from coordinator.group import errors as E
from log.types import TopicPartition
from metadata.group_offsets import CommittedOffset
from service.kafka.groups import group_coordinator
from service.kafka.kio_codec import KioVersions
from service.kafka.registry import RequestContext, kafka_api

_CTopic = OffsetCommitResponse.OffsetCommitResponseTopic
_CPart = _CTopic.OffsetCommitResponsePartition
_FTopic = OffsetFetchResponse.OffsetFetchResponseTopic
_FPart = _FTopic.OffsetFetchResponsePartition
_FGroup = OffsetFetchResponse.OffsetFetchResponseGroup
_FGTopic = _FGroup.OffsetFetchResponseTopics
_FGPart = _FGTopic.OffsetFetchResponsePartitions
_DTopic = OffsetDeleteResponse.OffsetDeleteResponseTopic
_DPart = _DTopic.OffsetDeleteResponsePartition

_TOPICS: weakref.WeakKeyDictionary[Any, tuple[float, dict[str, int]]] = weakref.WeakKeyDictionary()


def _topics(node: Any, refresh: bool) -> dict[str, int]:
    """Topic -> partition count over the cluster (cached a second; ``refresh`` rereads)."""
    from service.kafka.metadata_api import stored_topics

    cached = _TOPICS.get(node)
    if cached is not None and not refresh and time.monotonic() - cached[0] < 1.0:
        return cached[1]
    topics = stored_topics(node)
    _TOPICS[node] = (time.monotonic(), topics)
    return topics


def forget_cached_topics(node: Any) -> None:
    """A topic of ``node`` was deleted: the next check rereads the topics, so no commit for the deleted
    topic is let through by a cached topic list (it would bring back the offsets its deletion dropped)."""
    _TOPICS.pop(node, None)


def _unknown(node: Any, tps: list[tuple[str, int]]) -> set[tuple[str, int]]:
    """The (topic, partition)s the cluster does not have."""
    topics = _topics(node, False)
    missing = {(t, p) for t, p in tps if p < 0 or p >= topics.get(t, 0)}
    if missing:
        topics = _topics(node, True)
        missing = {(t, p) for t, p in missing if p < 0 or p >= topics.get(t, 0)}
    return missing


def _tp(topic: str, partition: int) -> TopicPartition | None:
    try:
        return TopicPartition(topic, partition)
    except Exception:  # noqa: BLE001 - an invalid name: reported as unknown
        return None


@kafka_api(OffsetCommitRequest, min_version=2, max_version=8, older=KioVersions(0, 1))
async def handle_offset_commit(ctx: RequestContext, request: Any) -> Any:
    v = ctx.api_version
    now = int(time.time() * 1000)
    wanted = [(t.name, p.partition_index) for t in request.topics or () for p in t.partitions or ()]
    unknown = await ctx.run(_unknown, ctx.node, wanted)
    offsets: dict[TopicPartition, CommittedOffset] = {}
    for t in request.topics or ():
        for p in t.partitions or ():
            tp = _tp(t.name, p.partition_index)
            if tp is not None and (t.name, p.partition_index) not in unknown:
                epoch = p.committed_leader_epoch if v >= 6 else -1
                offsets[tp] = CommittedOffset(p.committed_offset, epoch, p.committed_metadata, now)
    gc = group_coordinator(ctx)
    if gc is None:
        codes = dict.fromkeys(offsets, E.COORDINATOR_NOT_AVAILABLE)
    elif offsets:
        codes = await gc.call(gc.commit_offsets(
            request.group_id, request.generation_id_or_member_epoch, request.member_id or "",
            getattr(request, "group_instance_id", None) if v >= 7 else None, offsets))
    else:
        codes = {}
    topics = []
    for t in request.topics or ():
        parts = []
        for p in t.partitions or ():
            tp = _tp(t.name, p.partition_index)
            code = E.UNKNOWN_TOPIC_OR_PARTITION if tp is None or tp not in codes else codes[tp]
            parts.append(_CPart(partition_index=p.partition_index, error_code=code))
        topics.append(_CTopic(name=t.name, partitions=parts))
    return ctx.response(throttle_time_ms=0, topics=topics)


async def _fetch_group(ctx: RequestContext, group_id: str, topics: Any, require_stable: bool) -> tuple[
        int, list[tuple[str, list[tuple[int, int, int, str, int]]]]]:
    """(group error, [(topic, [(partition, offset, leader epoch, metadata, error)])])."""
    gc = group_coordinator(ctx)
    tps: list[TopicPartition] | None = None
    if topics is not None:
        tps = [tp for t in topics for p in t.partition_indexes or () if (tp := _tp(t.name, p)) is not None]
    if gc is None:
        code, found = E.COORDINATOR_NOT_AVAILABLE, {}
    else:
        code, found = await gc.call(gc.fetch_offsets(group_id, tps, require_stable))
    by_topic: dict[str, list[tuple[int, int, int, str, int]]] = {}
    if topics is not None:
        for t in topics:
            for p in t.partition_indexes or ():
                tp = _tp(t.name, p)
                got, err = found.get(tp, (None, code)) if tp is not None else (None, E.UNKNOWN_TOPIC_OR_PARTITION)
                by_topic.setdefault(t.name, []).append(_row(p, got, err))
    else:
        for tp, (got, err) in sorted(found.items(), key=lambda kv: (kv[0].topic, kv[0].partition)):
            by_topic.setdefault(tp.topic, []).append(_row(tp.partition, got, err))
    return code, list(by_topic.items())


def _row(partition: int, got: CommittedOffset | None, err: int) -> tuple[int, int, int, str, int]:
    if got is None:
        return partition, -1, -1, "", err
    return partition, got.offset, got.leader_epoch, got.metadata or "", err


@kafka_api(OffsetFetchRequest, min_version=1, max_version=8, older=KioVersions(0, 0))
async def handle_offset_fetch(ctx: RequestContext, request: Any) -> Any:
    v = ctx.api_version
    stable = bool(getattr(request, "require_stable", False)) if v >= 7 else False
    if v >= 8:
        groups = []
        for g in request.groups or ():
            code, rows = await _fetch_group(ctx, g.group_id, g.topics, stable)
            groups.append(_FGroup(group_id=g.group_id, error_code=code, topics=[
                _FGTopic(name=t, partitions=[_FGPart(partition_index=p, committed_offset=o, committed_leader_epoch=e,
                                                     metadata=m, error_code=c) for p, o, e, m, c in parts])
                for t, parts in rows]))
        return ctx.response(throttle_time_ms=0, groups=groups)
    code, rows = await _fetch_group(ctx, request.group_id, request.topics, stable)
    topics = [_FTopic(name=t, partitions=[_FPart(partition_index=p, committed_offset=o, committed_leader_epoch=e,
                                                 metadata=m, error_code=c if v >= 2 or c != E.NONE else code)
                                          for p, o, e, m, c in parts])
              for t, parts in rows]
    return ctx.response(throttle_time_ms=0, topics=topics, error_code=code)


@kafka_api(OffsetDeleteRequest, min_version=0, max_version=0)
async def handle_offset_delete(ctx: RequestContext, request: Any) -> Any:
    gc = group_coordinator(ctx)
    tps = [tp for t in request.topics or () for p in t.partitions or ()
           if (tp := _tp(t.name, p.partition_index)) is not None]
    if gc is None:
        code, errors = E.COORDINATOR_NOT_AVAILABLE, {}
    else:
        code, errors = await gc.call(gc.delete_offsets(request.group_id, tps))
    if code != E.NONE:
        return ctx.response(error_code=code, throttle_time_ms=0, topics=[])
    topics = []
    for t in request.topics or ():
        parts = []
        for p in t.partitions or ():
            tp = _tp(t.name, p.partition_index)
            parts.append(_DPart(partition_index=p.partition_index,
                                error_code=errors.get(tp, E.UNKNOWN_TOPIC_OR_PARTITION) if tp else
                                E.UNKNOWN_TOPIC_OR_PARTITION))
        topics.append(_DTopic(name=t.name, partitions=parts))
    return ctx.response(error_code=E.NONE, throttle_time_ms=0, topics=topics)
