"""DescribeAcls, CreateAcls and DeleteAcls v1-v3: SECURITY_DISABLED, as a Kafka broker with no authorizer answers.

The node authenticates (SASL, service/kafka/sasl.py) but authorizes nothing: every authenticated
principal may call every API, as on a Kafka broker with no ``authorizer.class.name``. Kafka's
AclApis answers the three ACL APIs there with SECURITY_DISABLED ("No Authorizer is configured."),
which admin clients and ``kafka-acls`` report as such; so does this listener, instead of
UNSUPPORTED_VERSION.
"""

from __future__ import annotations

from typing import Any

from kafka.protocol.admin import (
    CreateAclsRequest,
    CreateAclsResponse,
    DeleteAclsRequest,
    DeleteAclsResponse,
    DescribeAclsRequest,
    DescribeAclsResponse,
)

from service.kafka.registry import RequestContext, kafka_api

SECURITY_DISABLED = 54
NO_AUTHORIZER = "No Authorizer is configured."

# What a resource allows when there is no authorizer: every operation Kafka supports on it (AuthHelper's
# authorizedOperations over AclEntry.supportedOperations), as the 32-bit fields of Metadata, DescribeCluster,
# DescribeGroups and DescribeTopicPartitions give it; AclOperation codes: READ 3, WRITE 4, CREATE 5, DELETE 6,
# ALTER 7, DESCRIBE 8, CLUSTER_ACTION 9, DESCRIBE_CONFIGS 10, ALTER_CONFIGS 11, IDEMPOTENT_WRITE 12.
TOPIC_OPERATION_CODES = frozenset({3, 4, 5, 6, 7, 8, 10, 11})
CLUSTER_OPERATION_CODES = frozenset({5, 7, 8, 9, 10, 11, 12})
GROUP_OPERATION_CODES = frozenset({3, 6, 8})
#: the topic's operations as an int32 field (DescribeTopicPartitions' schema types it so)
TOPIC_OPERATIONS = sum(1 << code for code in TOPIC_OPERATION_CODES)


def authorized_operations(codes: frozenset[int], asked: Any) -> set[int] | None:
    """A bitfield-typed authorized-operations field (Metadata, DescribeCluster, DescribeGroups) as kafka-python
    encodes one: the set of bits, or None for Integer.MIN_VALUE (the request did not ask for them)."""
    return set(codes) if asked else None


@kafka_api(DescribeAclsRequest, min_version=1, max_version=3)
async def handle_describe_acls(ctx: RequestContext, request: Any) -> Any:
    return DescribeAclsResponse(throttle_time_ms=0, error_code=SECURITY_DISABLED, error_message=NO_AUTHORIZER,
                                resources=[])


@kafka_api(CreateAclsRequest, min_version=1, max_version=3)
async def handle_create_acls(ctx: RequestContext, request: Any) -> Any:
    result = CreateAclsResponse.AclCreationResult
    return CreateAclsResponse(throttle_time_ms=0, results=[
        result(error_code=SECURITY_DISABLED, error_message=NO_AUTHORIZER) for _ in request.creations or ()])


@kafka_api(DeleteAclsRequest, min_version=1, max_version=3)
async def handle_delete_acls(ctx: RequestContext, request: Any) -> Any:
    result = DeleteAclsResponse.DeleteAclsFilterResult
    return DeleteAclsResponse(throttle_time_ms=0, filter_results=[
        result(error_code=SECURITY_DISABLED, error_message=NO_AUTHORIZER, matching_acls=[])
        for _ in request.filters or ()])
