"""ElectLeaders v0-v2 over partitions whose only replica is their leader: no election is ever needed or possible.

Metadata shows each partition's leader as its one replica and ISR (there are no followers; a
leadership moves with ``POST .../leadership``). So, as Kafka's controller answers for such a
partition: PREFERRED (and v0's implicit preferred) is ELECTION_NOT_NEEDED while the leader is alive
and PREFERRED_LEADER_NOT_AVAILABLE once it is not; UNCLEAN is ELECTION_NOT_NEEDED while there is a
leader and ELIGIBLE_LEADERS_NOT_AVAILABLE when there is none. A partition that does not exist is
UNKNOWN_TOPIC_OR_PARTITION; ``topic_partitions`` null means every partition, and then, as Kafka,
the partitions that needed no election are left out of the answer.
"""

from __future__ import annotations

from typing import Any

from kafka.protocol.admin import ElectLeadersRequest, ElectLeadersResponse

from service.kafka.errors import NONE, error_code, error_message
from service.kafka.fetch import partition_log
from service.kafka.metadata_api import partition_leader
from service.kafka.registry import RequestContext, kafka_api

PREFERRED, UNCLEAN = 0, 1
PREFERRED_LEADER_NOT_AVAILABLE = 80
ELIGIBLE_LEADERS_NOT_AVAILABLE = 83
ELECTION_NOT_NEEDED = 84

_Result = ElectLeadersResponse.ReplicaElectionResult
_Partition = _Result.PartitionResult


def _elect(ctx: RequestContext, topic: str, partition: int, election: int) -> tuple[int, str | None]:
    try:
        log = partition_log(ctx.node, topic, partition)
        lead = partition_leader(ctx.node, ctx.cluster, log.topic_partition)
    except Exception as e:  # noqa: BLE001 - every failure is the partition's error code
        return error_code(e), error_message(e)
    if not lead.error_code:
        return ELECTION_NOT_NEEDED, f"broker {lead.leader_id}, the partition's only replica, leads it"
    if election == UNCLEAN:
        return ELIGIBLE_LEADERS_NOT_AVAILABLE, (f"broker {lead.registered_id}, the partition's only replica, is not "
                                                f"alive; move the partition with POST .../leadership")
    return PREFERRED_LEADER_NOT_AVAILABLE, (f"broker {lead.registered_id}, the preferred (and only) replica, is not "
                                            f"alive; move the partition with POST .../leadership")


def _elect_leaders(ctx: RequestContext, request: Any, version: int) -> Any:
    election = PREFERRED if version == 0 else int(request.election_type)
    if request.topic_partitions is None:
        wanted = sorted((tp.topic, tp.partition) for tp in ctx.node.log_manager.all_logs())
        keep_not_needed = False
    else:
        wanted = [(t.topic, p) for t in request.topic_partitions for p in t.partitions or ()]
        keep_not_needed = True
    by_topic: dict[str, list[Any]] = {}
    for topic, partition in wanted:
        code, message = _elect(ctx, topic, partition, election)
        if code == ELECTION_NOT_NEEDED and not keep_not_needed:
            continue
        by_topic.setdefault(topic, []).append(_Partition(partition_id=partition, error_code=code,
                                                         error_message=message))
    return ElectLeadersResponse(throttle_time_ms=0, error_code=NONE, replica_election_results=[
        _Result(topic=topic, partition_result=parts) for topic, parts in by_topic.items()])


@kafka_api(ElectLeadersRequest, min_version=0, max_version=2)
async def handle_elect_leaders(ctx: RequestContext, request: Any) -> Any:
    return await ctx.run(_elect_leaders, ctx, request, ctx.api_version)
