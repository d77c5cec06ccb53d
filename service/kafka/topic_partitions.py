"""DescribeTopicPartitions v0 (KIP-966): Metadata's partitions of the named topics (or all), paged by a cursor.

kafka-python's ``describe_topic_partitions`` and Kafka's own admin client (3.7+, for
``describeTopics``) ask it. As Kafka's broker answers it (its DescribeTopicPartitionsRequestHandler
and the metadata cache's paging):

* no topics named means every topic; topics come sorted by name, from the cursor's topic on,
  whose partitions start at the cursor's index (a cursor naming a topic the request does not
  name is INVALID_REQUEST for every topic named);
* at most ``response_partition_limit`` partitions are answered (capped at 2000, Kafka's
  ``max.request.partition.size.limit``); where the limit cuts, ``next_cursor`` names the topic and
  partition to ask from next;
* a named topic that does not exist answers UNKNOWN_TOPIC_OR_PARTITION (INVALID_TOPIC_EXCEPTION
  for an invalid name) with no partitions; with all topics asked, there are none such;
* each partition is what Metadata shows (service/kafka/metadata_api.py): the leader from the
  leadership records, the leader alone as replicas and ISR, no eligible leader replicas (ELR is
  KIP-966's other half: one replica has none);
* ``topic_authorized_operations`` is every operation a topic supports, as a Kafka broker without
  an authorizer answers (the node authenticates but authorizes nothing; service/kafka/acls.py).
"""

from __future__ import annotations

from typing import Any

from kafka.errors import InvalidRequestError, InvalidTopicError, UnknownTopicOrPartitionError
from kafka.protocol.admin.topics import DescribeTopicPartitionsRequest, DescribeTopicPartitionsResponse

from log.errors import TiercompactError
from log.types import validate_topic_name
from service.kafka.acls import TOPIC_OPERATIONS
from service.kafka.metadata_api import ZERO_UUID, partition_fields, stored_topics
from service.kafka.registry import ClusterView, RequestContext, kafka_api

Topic = DescribeTopicPartitionsResponse.DescribeTopicPartitionsResponseTopic
Partition = Topic.DescribeTopicPartitionsResponsePartition

#: Kafka's max.request.partition.size.limit default: the most partitions one answer holds
MAX_PARTITIONS = 2000


def _error_topic(name: str, code: int) -> Any:
    return Topic(error_code=code, name=name, topic_id=ZERO_UUID, is_internal=False, partitions=[],
                 topic_authorized_operations=TOPIC_OPERATIONS)


def _describe(node: Any, cluster: ClusterView, request: Any) -> Any:
    cursor = request.cursor
    cursor_topic = cursor.topic_name if cursor is not None else ""
    named = [t.name for t in request.topics]
    stored = stored_topics(node)
    if named and cursor is not None and cursor_topic not in named:
        return DescribeTopicPartitionsResponse(
            throttle_time_ms=0, next_cursor=None,
            topics=[_error_topic(name, InvalidRequestError.errno) for name in named])
    wanted = sorted({name for name in (named or stored) if name >= cursor_topic})
    live = {b.broker_id for b in cluster.brokers()}
    remaining = max(0, min(MAX_PARTITIONS, request.response_partition_limit))
    topics: list[Any] = []
    next_cursor = None
    for name in wanted:
        if remaining == 0:  # the last topic took what was left: the next answer starts at this one
            next_cursor = DescribeTopicPartitionsResponse.Cursor(topic_name=name, partition_index=0)
            break
        if name not in stored:
            try:
                validate_topic_name(name)
                code = UnknownTopicOrPartitionError.errno
            except TiercompactError:
                code = InvalidTopicError.errno
            topics.append(_error_topic(name, code))
            continue
        first = cursor.partition_index if cursor is not None and name == cursor_topic else 0
        count = stored[name]
        stop = min(count, max(first, 0) + remaining)
        fields = partition_fields(node, cluster, name, range(max(first, 0), stop), live)
        topics.append(Topic(error_code=0, name=name, topic_id=cluster.topic_id(name), is_internal=False,
                            partitions=[Partition(**f, eligible_leader_replicas=[], last_known_elr=[])
                                        for f in fields],
                            topic_authorized_operations=TOPIC_OPERATIONS))
        if stop < count:
            next_cursor = DescribeTopicPartitionsResponse.Cursor(topic_name=name, partition_index=stop)
            break
        remaining -= len(fields)
    return DescribeTopicPartitionsResponse(throttle_time_ms=0, topics=topics, next_cursor=next_cursor)


@kafka_api(DescribeTopicPartitionsRequest, min_version=0, max_version=0)
async def handle_describe_topic_partitions(ctx: RequestContext, request: Any) -> Any:
    return await ctx.run(_describe, ctx.node, ctx.cluster, request)
