"""DescribeProducers v0: the active producers of the partitions this node leads (``kafka-transactions describe-producers``).

As Kafka's Partition.activeProducerState: per producer id its epoch, last sequence, last timestamp,
coordinator epoch and, while a transaction is open, the offset it started at (-1 otherwise); the
partition's error is NOT_LEADER_OR_FOLLOWER on a node that does not lead it and
UNKNOWN_TOPIC_OR_PARTITION for one that does not exist. Operators find hanging transactions with it.
"""

from __future__ import annotations

from typing import Any

from kafka.protocol.admin import DescribeProducersRequest, DescribeProducersResponse

from service.kafka.errors import NONE, error_message
from service.kafka.fetch import check_leader, partition_error, partition_log
from service.kafka.registry import RequestContext, kafka_api

_Topic = DescribeProducersResponse.TopicResponse
_Partition = _Topic.PartitionResponse
_Producer = _Partition.ProducerState


def _partition(ctx: RequestContext, topic: str, index: int) -> Any:
    log = partition_log(ctx.node, topic, index)
    check_leader(ctx, log.topic_partition)
    with log.lock:  # the entries change with every append: read them whole under the log's lock
        rows = sorted((e.producer_id, e.producer_epoch, e.last_sequence, e.last_timestamp, e.coordinator_epoch,
                       -1 if e.current_txn_first_offset is None else e.current_txn_first_offset)
                      for e in log.producer_state.active_producers().values())
    return _Partition(partition_index=index, error_code=NONE, error_message=None, active_producers=[
        _Producer(producer_id=pid, producer_epoch=epoch, last_sequence=seq, last_timestamp=ts, coordinator_epoch=ce,
                  current_txn_start_offset=txn) for pid, epoch, seq, ts, ce, txn in rows])


def _describe(ctx: RequestContext, request: Any) -> Any:
    topics = []
    for t in request.topics or ():
        parts = []
        for index in t.partition_indexes or ():
            try:
                parts.append(_partition(ctx, t.name, index))
            except Exception as e:  # noqa: BLE001 - every failure is the partition's error code
                parts.append(_Partition(partition_index=index, error_code=partition_error(e),
                                        error_message=error_message(e), active_producers=[]))
        topics.append(_Topic(name=t.name, partitions=parts))
    return DescribeProducersResponse(throttle_time_ms=0, topics=topics)


@kafka_api(DescribeProducersRequest, min_version=0, max_version=0)
async def handle_describe_producers(ctx: RequestContext, request: Any) -> Any:
    return await ctx.run(_describe, ctx, request)
