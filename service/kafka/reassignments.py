"""ListPartitionReassignments v0 and AlterPartitionReassignments v0-v1 over partitions with one replica, their leader.

A partition's only replica is its leader (Metadata shows it as replicas and ISR; there are no
followers to add or remove), so no reassignment is ever in progress:

* ListPartitionReassignments answers no ongoing reassignment, as Kafka's controller answers for
  partitions that are not reassigning (it leaves them out; a topic that does not exist is left
  out too, as Kafka does).
* AlterPartitionReassignments, per partition, as Kafka's controller validates it:
  - the replica set it already has, ``[leader]``: done at once (NONE), as Kafka completes a
    reassignment to the current replicas;
  - ``null`` (cancel): NO_REASSIGNMENT_IN_PROGRESS;
  - an empty list, a broker twice, or a broker no node registered: INVALID_REPLICA_ASSIGNMENT with
    Kafka's messages;
  - more than one replica while ``allow_replication_factor_change`` (v1) is false:
    INVALID_REPLICATION_FACTOR;
  - anything else (more replicas, or another broker): INVALID_REPLICA_ASSIGNMENT, saying where a
    partition's one copy moves instead: ``POST /v1/topics/{topic}/partitions/{p}/leadership``.
    This is where tiercompact differs from Kafka, which would copy the partition to the new
    replicas in the background.
"""

from __future__ import annotations

from typing import Any

import kafka.errors as kerr
from kafka.protocol.admin import (
    AlterPartitionReassignmentsRequest,
    AlterPartitionReassignmentsResponse,
    ListPartitionReassignmentsRequest,
    ListPartitionReassignmentsResponse,
)

from service.kafka.errors import NONE, error_code, error_message
from service.kafka.fetch import partition_log
from service.kafka.metadata_api import partition_leader
from service.kafka.registry import RequestContext, kafka_api

INVALID_REPLICA_ASSIGNMENT = kerr.InvalidReplicationAssignmentError.errno
INVALID_REPLICATION_FACTOR = kerr.InvalidReplicationFactorError.errno
NO_REASSIGNMENT_IN_PROGRESS = kerr.NoReassignmentInProgressError.errno

_TopicAnswer = AlterPartitionReassignmentsResponse.ReassignableTopicResponse
_PartitionAnswer = _TopicAnswer.ReassignablePartitionResponse


@kafka_api(ListPartitionReassignmentsRequest, min_version=0, max_version=0)
async def handle_list_partition_reassignments(ctx: RequestContext, request: Any) -> Any:
    # one replica per partition: none is ever reassigning, and Kafka lists only those that are
    return ListPartitionReassignmentsResponse(throttle_time_ms=0, error_code=NONE, error_message=None, topics=[])


def _reassign(ctx: RequestContext, topic: str, partition: int, replicas: list[int] | None,
              allow_rf_change: bool, registered: set[int]) -> tuple[int, str | None]:
    """One partition's answer: (error code, message)."""
    try:
        log = partition_log(ctx.node, topic, partition)
        lead = partition_leader(ctx.node, ctx.cluster, log.topic_partition)
    except Exception as e:  # noqa: BLE001 - every failure is the partition's error code
        return error_code(e), error_message(e)
    replica = lead.registered_id if lead.error_code else lead.leader_id
    if replicas is None:
        return NO_REASSIGNMENT_IN_PROGRESS, f"no reassignment of {topic}-{partition} is in progress"
    if not replicas:
        return INVALID_REPLICA_ASSIGNMENT, "The manual partition assignment includes an empty replica list."
    for i, broker in enumerate(replicas):
        if broker in replicas[:i]:
            return INVALID_REPLICA_ASSIGNMENT, f"The manual partition assignment includes the broker {broker} " \
                                               "more than once."
        if broker not in registered and broker != replica:
            return INVALID_REPLICA_ASSIGNMENT, f"The manual partition assignment includes broker {broker}, but " \
                                               "no such broker is registered."
    if replicas == [replica]:
        return NONE, None  # the replica set it has: nothing to move
    if len(replicas) != 1 and not allow_rf_change:
        return INVALID_REPLICATION_FACTOR, f"The replication factor is changed from 1 to {len(replicas)}"
    return INVALID_REPLICA_ASSIGNMENT, (
        f"{topic}-{partition} has one copy, on its leader (broker {replica}); tiercompact keeps no other replicas, "
        f"so it cannot be reassigned to {replicas}. Move it to another node with POST "
        f"/v1/topics/{topic}/partitions/{partition}/leadership")


def _alter(ctx: RequestContext, request: Any, version: int) -> Any:
    allow_rf_change = bool(request.allow_replication_factor_change) if version >= 1 else True
    registered = {b.broker_id for b in ctx.cluster.brokers()} if ctx.cluster is not None else {ctx.node.broker_id}
    answers = []
    for t in request.topics:
        parts = []
        for p in t.partitions:
            code, message = _reassign(ctx, t.name, p.partition_index, p.replicas, allow_rf_change, registered)
            parts.append(_PartitionAnswer(partition_index=p.partition_index, error_code=code, error_message=message))
        answers.append(_TopicAnswer(name=t.name, partitions=parts))
    fields: dict[str, Any] = {"allow_replication_factor_change": allow_rf_change} if version >= 1 else {}
    return AlterPartitionReassignmentsResponse(throttle_time_ms=0, error_code=NONE, error_message=None,
                                               responses=answers, **fields)


@kafka_api(AlterPartitionReassignmentsRequest, min_version=0, max_version=1)
async def handle_alter_partition_reassignments(ctx: RequestContext, request: Any) -> Any:
    return await ctx.run(_alter, ctx, request, ctx.api_version)
