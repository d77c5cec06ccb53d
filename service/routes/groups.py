"""/v1/groups: consumer groups for operators (state, protocol, generation, members and their partitions, committed offsets).

Committed offsets and the last stored generation come from the metadata store, so any node
answers for every group; the live state (members, rebalances) comes from the group's coordinator
when that is this node (``coordinator`` names the node that coordinates it).
"""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter
from fastapi.responses import JSONResponse

from coordinator.group.consumer_protocol import assigned_partitions
from metadata.group_offsets import GroupRecord, GroupStore
from metadata.sql_group_offsets import SqlGroupStore
from service.errors import error_body
from service.per_node import per_node
from service.routes.coordinated import coordinator_of, coordinators, store_of
from service.routes.deps import READ, NodeDep
from service.schemas import Error

router = APIRouter(prefix="/v1/groups", tags=["groups"], responses={401: {"model": Error}, 403: {"model": Error},
                                                                    404: {"model": Error}})

_own_store = per_node(lambda node: SqlGroupStore(node.config.metadata_url))


def _store(node: Any) -> GroupStore:
    return store_of(node, lambda c: getattr(c, "group_store", None), _own_store)


def _coordinator_of(node: Any, group_id: str) -> dict[str, Any]:
    c = coordinators(node)
    return coordinator_of(None if c is None else c.groups_ownership, group_id,
                          getattr(node.config, "offsets_topic_num_partitions", 50))


def _live(node: Any, group_id: str) -> dict[str, Any] | None:
    c = coordinators(node)
    if c is None or c.groups is None:
        return None
    d = c.groups.call_blocking(c.groups.describe_group(group_id))
    return d if d.get("error") == 0 and d.get("state") != "Dead" else None


def _member(m: dict[str, Any]) -> dict[str, Any]:
    return {"member_id": m.get("member_id"), "group_instance_id": m.get("group_instance_id"),
            "client_id": m.get("client_id"), "client_host": m.get("client_host"),
            "session_timeout_ms": m.get("session_timeout_ms"), "rebalance_timeout_ms": m.get("rebalance_timeout_ms"),
            "assignment": assigned_partitions(bytes.fromhex(m["assignment"]) if isinstance(m.get("assignment"), str)
                                              else bytes(m.get("assignment") or b""))}


def _summary(group_id: str, live: dict[str, Any] | None, rec: GroupRecord | None) -> dict[str, Any]:
    if live is not None:
        return {"group_id": group_id, "state": live["state"], "protocol_type": live["protocol_type"] or None,
                "protocol": live["protocol"] or None, "generation": live["generation"], "leader": live["leader"],
                "members": [_member(m) for m in live["members"]], "live": True}
    if rec is not None:
        return {"group_id": group_id, "state": rec.state, "protocol_type": rec.protocol_type,
                "protocol": rec.protocol, "generation": rec.generation, "leader": rec.leader,
                "members": [_member(m) for m in rec.members], "live": False}
    return {"group_id": group_id, "state": "Empty", "protocol_type": None, "protocol": None, "generation": 0,
            "leader": None, "members": [], "live": False}


@router.get("", dependencies=READ)
def list_groups(node: NodeDep) -> dict[str, Any]:
    """Every group known to the metadata store (its committed offsets or stored generation), with its live state
    when this node coordinates it."""
    stored = _store(node).groups()
    out = []
    for gid in sorted(stored):
        coord = _coordinator_of(node, gid)
        s = _summary(gid, _live(node, gid) if coord["local"] else None, stored[gid])
        out.append({"group_id": gid, "state": s["state"], "protocol_type": s["protocol_type"],
                    "generation": s["generation"], "members": len(s["members"]), "coordinator": coord})
    return {"groups": out}


@router.get("/{group_id}", dependencies=READ)
def get_group(group_id: str, node: NodeDep) -> Any:
    """One group: state, protocol, generation, members (and the partitions assigned to each), committed offsets per
    partition (with the lag when this node has the partition), offsets pending in open transactions."""
    store = _store(node)
    coord = _coordinator_of(node, group_id)
    live = _live(node, group_id) if coord["local"] else None
    rec = store.group(group_id)
    committed = store.offsets(group_id)
    pending = store.pending_txn_partitions(group_id)
    if live is None and rec is None and not committed:
        return JSONResponse(error_body(f"group {group_id!r} is not known"), status_code=404)
    offsets = []
    for tp, o in sorted(committed.items(), key=lambda kv: (kv[0].topic, kv[0].partition)):
        row: dict[str, Any] = {"topic": tp.topic, "partition": tp.partition, "offset": o.offset,
                               "leader_epoch": o.leader_epoch, "metadata": o.metadata, "commit_ms": o.commit_ms}
        try:
            end = node.log(tp.topic, tp.partition).high_watermark
            row.update(log_end_offset=end, lag=max(end - o.offset, 0))
        except Exception:  # noqa: BLE001 - another node has the partition
            pass
        offsets.append(row)
    return {**_summary(group_id, live, rec), "coordinator": coord, "offsets": offsets,
            "pending_transactional_offsets": sorted([tp.topic, tp.partition] for tp in pending)}
