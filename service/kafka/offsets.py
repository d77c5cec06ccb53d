"""ListOffsets v1-v7 (earliest, latest, by timestamp, max timestamp over both tiers) and OffsetForLeaderEpoch v0-v4.

ListOffsets answers as Kafka's Partition.fetchOffsetForTimestamp: EARLIEST (-2) is the log
start offset over both tiers, LATEST (-1) the high watermark (the last stable offset for
read_committed), MAX_TIMESTAMP (-3, KIP-734) the record with the largest timestamp, and a
timestamp the first record at or after it below that bound (offset and timestamp -1 when there
is none). OffsetForLeaderEpoch answers from the partition's leader-epoch cache
(LeaderEpochFileCache.endOffsetFor), which clients use to validate their position after a
leader change (KIP-320). kafka-python's schemas start OffsetForLeaderEpoch at v2 (Kafka 4.0 removed
v0-v1): those two are read and written through kio (service.kafka.kio_codec).
"""

from __future__ import annotations

from typing import Any

from kafka.protocol.consumer import (
    ListOffsetsRequest,
    ListOffsetsResponse,
    OffsetForLeaderEpochRequest,
    OffsetForLeaderEpochResponse,
)

from log.offset_lookup import end_offset_for_epoch, epoch_for_offset
from service.kafka.errors import NONE
from service.kafka.fetch import check_leader, partition_error, partition_log, raw_reader
from service.kafka.kio_codec import KioVersions
from service.kafka.registry import RequestContext, kafka_api

LATEST = -1
EARLIEST = -2
MAX_TIMESTAMP = -3
UNSUPPORTED_VERSION = 35

_LTopic = ListOffsetsResponse.ListOffsetsTopicResponse
_LPartition = _LTopic.ListOffsetsPartitionResponse
_ETopic = OffsetForLeaderEpochResponse.OffsetForLeaderTopicResult
_EPartition = _ETopic.EpochEndOffset


def _list_offset(ctx: RequestContext, p: Any, topic: str, committed: bool) -> Any:
    partition, timestamp = p.partition_index, p.timestamp
    node = ctx.node
    raw = raw_reader(node)
    log = partition_log(node, topic, partition)
    check_leader(ctx, log.topic_partition, -1 if p.current_leader_epoch is None else p.current_leader_epoch)
    bound = log.last_stable_offset if committed else log.high_watermark
    if timestamp == LATEST:
        return _LPartition(partition_index=partition, error_code=NONE, timestamp=-1, offset=bound,
                           leader_epoch=log.leader_epoch)
    if timestamp == EARLIEST:
        start = raw.log_start_offset(log)
        return _LPartition(partition_index=partition, error_code=NONE, timestamp=-1, offset=start,
                           leader_epoch=epoch_for_offset(log.epoch_entries, start))
    if timestamp == MAX_TIMESTAMP:
        found = raw.max_timestamp(log)
    elif timestamp >= 0:
        found = raw.offset_for_timestamp(log, timestamp)
    else:
        raise _Unsupported(timestamp)
    if found is None or found.offset >= bound:
        return _LPartition(partition_index=partition, error_code=NONE, timestamp=-1, offset=-1, leader_epoch=-1)
    return _LPartition(partition_index=partition, error_code=NONE, timestamp=found.timestamp,
                       offset=found.offset, leader_epoch=found.leader_epoch)


class _Unsupported(Exception):
    """A negative timestamp spec this listener does not implement (EARLIEST_LOCAL, LATEST_TIERED)."""


def _list_offsets(ctx: RequestContext, request: Any) -> Any:
    committed = int(request.isolation_level or 0) == 1
    topics = []
    for t in request.topics or ():
        parts = []
        for p in t.partitions or ():
            try:
                parts.append(_list_offset(ctx, p, t.name, committed))
            except _Unsupported:
                parts.append(_LPartition(partition_index=p.partition_index, error_code=UNSUPPORTED_VERSION,
                                         timestamp=-1, offset=-1, leader_epoch=-1))
            except Exception as e:  # noqa: BLE001 - every failure is the partition's error code
                parts.append(_LPartition(partition_index=p.partition_index, error_code=partition_error(e),
                                         timestamp=-1, offset=-1, leader_epoch=-1))
        topics.append(_LTopic(name=t.name, partitions=parts))
    return ListOffsetsResponse(throttle_time_ms=0, topics=topics)


@kafka_api(ListOffsetsRequest, min_version=1, max_version=7)
async def handle_list_offsets(ctx: RequestContext, request: Any) -> Any:
    return await ctx.run(_list_offsets, ctx, request)


def _epoch_end(ctx: RequestContext, p: Any, topic: str) -> Any:
    log = partition_log(ctx.node, topic, p.partition)
    check_leader(ctx, log.topic_partition, -1 if p.current_leader_epoch is None else p.current_leader_epoch)
    epoch, partition = p.leader_epoch, p.partition
    with log.lock:
        entries = list(log.epoch_entries)
        leo = log.log_end_offset
    found_epoch, end = end_offset_for_epoch(entries, epoch, leo)
    return _EPartition(error_code=NONE, partition=partition, leader_epoch=found_epoch, end_offset=end)


def _epoch_ends(ctx: RequestContext, request: Any) -> Any:
    topics = []
    for t in request.topics or ():
        parts = []
        for p in t.partitions or ():
            try:
                parts.append(_epoch_end(ctx, p, t.topic))
            except Exception as e:  # noqa: BLE001 - every failure is the partition's error code
                parts.append(_EPartition(error_code=partition_error(e), partition=p.partition, leader_epoch=-1,
                                         end_offset=-1))
        topics.append(_ETopic(topic=t.topic, partitions=parts))
    return OffsetForLeaderEpochResponse(throttle_time_ms=0, topics=topics)


@kafka_api(OffsetForLeaderEpochRequest, min_version=2, max_version=4, older=KioVersions(0, 1))
async def handle_offset_for_leader_epoch(ctx: RequestContext, request: Any) -> Any:
    return await ctx.run(_epoch_ends, ctx, request)
