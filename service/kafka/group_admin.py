"""ListGroups v0-v4 (states filter), DescribeGroups v0-v5 and DeleteGroups v0-v2: operators' view of the groups this node coordinates."""

from __future__ import annotations

from typing import Any

from kafka.protocol.admin import (
    DeleteGroupsRequest,
    DeleteGroupsResponse,
    DescribeGroupsRequest,
    DescribeGroupsResponse,
    ListGroupsRequest,
    ListGroupsResponse,
)

from coordinator.group import errors as E
from service.kafka.acls import GROUP_OPERATION_CODES, authorized_operations
from service.kafka.groups import group_coordinator
from service.kafka.registry import RequestContext, kafka_api

_Described = DescribeGroupsResponse.DescribedGroup
_DMember = _Described.DescribedGroupMember


@kafka_api(ListGroupsRequest, min_version=0, max_version=4)
async def handle_list_groups(ctx: RequestContext, request: Any) -> Any:
    gc = group_coordinator(ctx)
    if gc is None:
        return ctx.response(throttle_time_ms=0, error_code=E.COORDINATOR_NOT_AVAILABLE, groups=[])
    states = set(getattr(request, "states_filter", None) or ()) if ctx.api_version >= 4 else set()
    listed = await gc.call(gc.list_groups(states or None))
    return ctx.response(throttle_time_ms=0, error_code=E.NONE, groups=[
        ListGroupsResponse.ListedGroup(group_id=g, protocol_type=pt, group_state=st) for g, pt, st in listed])


@kafka_api(DescribeGroupsRequest, min_version=0, max_version=5)
async def handle_describe_groups(ctx: RequestContext, request: Any) -> Any:
    gc = group_coordinator(ctx)
    out = []
    ops = {"authorized_operations": authorized_operations(GROUP_OPERATION_CODES, request.include_authorized_operations)} \
        if ctx.api_version >= 3 else {}
    for gid in request.groups or ():
        if gc is None:
            d: dict[str, Any] = {"error": E.COORDINATOR_NOT_AVAILABLE, "state": "", "protocol_type": "",
                                 "protocol": "", "members": []}
        else:
            d = await gc.call(gc.describe_group(gid))
        out.append(_Described(
            error_code=d["error"], group_id=gid, group_state=d["state"], protocol_type=d["protocol_type"],
            protocol_data=d["protocol"], **ops, members=[
                _DMember(member_id=m["member_id"], group_instance_id=m["group_instance_id"],
                         client_id=m["client_id"], client_host=m["client_host"], member_metadata=m["metadata"],
                         member_assignment=m["assignment"]) for m in d["members"]]))
    return ctx.response(throttle_time_ms=0, groups=out)


@kafka_api(DeleteGroupsRequest, min_version=0, max_version=2)
async def handle_delete_groups(ctx: RequestContext, request: Any) -> Any:
    gc = group_coordinator(ctx)
    names = list(request.groups_names or ())
    if gc is None:
        codes = dict.fromkeys(names, E.COORDINATOR_NOT_AVAILABLE)
    else:
        codes = await gc.call(gc.delete_groups(names))
    return ctx.response(throttle_time_ms=0, results=[
        DeleteGroupsResponse.DeletableGroupResult(group_id=g, error_code=codes[g]) for g in names])
