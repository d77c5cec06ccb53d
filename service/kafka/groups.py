"""JoinGroup v0-v7, SyncGroup v0-v5, Heartbeat v0-v4 and LeaveGroup v0-v4 (batched members from v3): the classic group protocol.

Each handler decodes the request, hands it to the node's group coordinator
(coordinator.group.coordinator, on its own loop) and encodes its answer at the request's
version. A node without coordinators (no cluster registry) answers COORDINATOR_NOT_AVAILABLE.
"""

from __future__ import annotations

from typing import Any

from kafka.protocol.consumer import (
    HeartbeatRequest,
    JoinGroupRequest,
    JoinGroupResponse,
    LeaveGroupRequest,
    LeaveGroupResponse,
    SyncGroupRequest,
)

from coordinator.group import errors as E
from service.kafka.registry import RequestContext, kafka_api


def group_coordinator(ctx: RequestContext) -> Any:
    """The node's group coordinator, or None (the caller answers COORDINATOR_NOT_AVAILABLE)."""
    coordinators = getattr(ctx.listener, "coordinators", None)
    return None if coordinators is None else coordinators.groups


def client_host(ctx: RequestContext) -> str:
    """Kafka's form of the peer address: ``/ip``."""
    return "/" + ctx.connection.peer.rsplit(":", 1)[0]


@kafka_api(JoinGroupRequest, min_version=0, max_version=7)
async def handle_join_group(ctx: RequestContext, request: Any) -> Any:
    v = ctx.api_version
    gc = group_coordinator(ctx)
    instance_id = getattr(request, "group_instance_id", None) if v >= 5 else None
    if gc is None:
        code, result = E.COORDINATOR_NOT_AVAILABLE, None
    else:
        rebalance_ms = request.rebalance_timeout_ms if v >= 1 else request.session_timeout_ms
        result = await gc.call(gc.join_group(
            request.group_id, request.member_id or "", instance_id, ctx.header.client_id or "", client_host(ctx),
            request.session_timeout_ms, rebalance_ms, request.protocol_type,
            [(p.name, bytes(p.metadata)) for p in request.protocols or ()], v >= 4))
        code = result.error
    if result is None or code != E.NONE:
        return ctx.response(throttle_time_ms=0, error_code=code, generation_id=-1, protocol_type=None,
                            protocol_name=None if v >= 7 else "", leader="",
                            member_id=result.member_id if result is not None else request.member_id or "",
                            members=[])
    members = [JoinGroupResponse.JoinGroupResponseMember(member_id=m, group_instance_id=i, metadata=meta)
               for m, i, meta in result.members]
    return ctx.response(throttle_time_ms=0, error_code=E.NONE, generation_id=result.generation,
                        protocol_type=result.protocol_type, protocol_name=result.protocol or "",
                        leader=result.leader, member_id=result.member_id, members=members)


@kafka_api(SyncGroupRequest, min_version=0, max_version=5)
async def handle_sync_group(ctx: RequestContext, request: Any) -> Any:
    v = ctx.api_version
    gc = group_coordinator(ctx)
    if gc is None:
        return ctx.response(throttle_time_ms=0, error_code=E.COORDINATOR_NOT_AVAILABLE, assignment=b"")
    code, ptype, proto, assignment = await gc.call(gc.sync_group(
        request.group_id, request.generation_id, request.member_id,
        getattr(request, "group_instance_id", None) if v >= 3 else None,
        getattr(request, "protocol_type", None) if v >= 5 else None,
        getattr(request, "protocol_name", None) if v >= 5 else None,
        {a.member_id: bytes(a.assignment) for a in request.assignments or ()}))
    return ctx.response(throttle_time_ms=0, error_code=code, protocol_type=ptype, protocol_name=proto,
                        assignment=assignment)


@kafka_api(HeartbeatRequest, min_version=0, max_version=4)
async def handle_heartbeat(ctx: RequestContext, request: Any) -> Any:
    gc = group_coordinator(ctx)
    if gc is None:
        return ctx.response(throttle_time_ms=0, error_code=E.COORDINATOR_NOT_AVAILABLE)
    code = await gc.call(gc.heartbeat(request.group_id, request.generation_id, request.member_id,
                                      getattr(request, "group_instance_id", None) if ctx.api_version >= 3 else None))
    return ctx.response(throttle_time_ms=0, error_code=code)


@kafka_api(LeaveGroupRequest, min_version=0, max_version=4)
async def handle_leave_group(ctx: RequestContext, request: Any) -> Any:
    v = ctx.api_version
    if v >= 3:
        leaving = [(m.member_id or "", m.group_instance_id) for m in request.members or ()]
    else:
        leaving = [(request.member_id, None)]
    gc = group_coordinator(ctx)
    if gc is None:
        code, results = E.COORDINATOR_NOT_AVAILABLE, [(m, i, E.COORDINATOR_NOT_AVAILABLE) for m, i in leaving]
    else:
        code, results = await gc.call(gc.leave_group(request.group_id, leaving))
    if v < 3:
        return ctx.response(throttle_time_ms=0, error_code=code if code != E.NONE else results[0][2])
    return ctx.response(throttle_time_ms=0, error_code=code, members=[
        LeaveGroupResponse.MemberResponse(member_id=m, group_instance_id=i, error_code=c) for m, i, c in results])
