"""DeleteRecords v0-v2: a client deletes a partition's records below an offset (Node.delete_records).

As Kafka's ReplicaManager.deleteRecords: offset -1 means the high watermark, an offset outside
[0, high watermark] is OFFSET_OUT_OF_RANGE, a topic whose cleanup.policy lacks ``delete`` is
POLICY_VIOLATION, and the answer's low watermark is the partition's new log start offset. There
is one copy of each partition, so the answer comes once the new start is on disk (and, for a
tiered partition, in the metadata store); ``timeout_ms`` bounds nothing more.
"""

from __future__ import annotations

from typing import Any

from kafka.protocol.admin import DeleteRecordsRequest, DeleteRecordsResponse

from service.kafka.errors import NONE
from service.kafka.fetch import check_leader, partition_error, partition_log
from service.kafka.registry import RequestContext, kafka_api

_Topic = DeleteRecordsResponse.DeleteRecordsTopicResult
_Partition = _Topic.DeleteRecordsPartitionResult


def _delete_one(ctx: RequestContext, topic: str, p: Any) -> Any:
    log = partition_log(ctx.node, topic, p.partition_index)
    check_leader(ctx, log.topic_partition, fresh=True)  # it writes: not on a leader read over a second ago
    start = ctx.node.delete_records(topic, p.partition_index, p.offset)
    return _Partition(partition_index=p.partition_index, low_watermark=start, error_code=NONE)


def _delete_records(ctx: RequestContext, request: Any) -> Any:
    topics = []
    for t in request.topics or ():
        parts = []
        for p in t.partitions or ():
            try:
                parts.append(_delete_one(ctx, t.name, p))
            except Exception as e:  # noqa: BLE001 - every failure is the partition's error code
                parts.append(_Partition(partition_index=p.partition_index, low_watermark=-1,
                                        error_code=partition_error(e)))
        topics.append(_Topic(name=t.name, partitions=parts))
    return DeleteRecordsResponse(throttle_time_ms=0, topics=topics)


@kafka_api(DeleteRecordsRequest, min_version=0, max_version=2)
async def handle_delete_records(ctx: RequestContext, request: Any) -> Any:
    return await ctx.run(_delete_records, ctx, request)
