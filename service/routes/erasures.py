"""/v1/topics/{topic}/erasures and /v1/erasures: erase keys by a deadline, with a receipt."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter

from service.fields import decode_field
from service.routes.deps import READ, WRITE, NodeDep, TopicPath
from service.schemas import ErasureAccepted, ErasureReceipt, ErasureRequest, ErasureSummary, Error

router = APIRouter(prefix="/v1", tags=["erasures"],
                   responses={400: {"model": Error}, 401: {"model": Error}, 403: {"model": Error},
                              404: {"model": Error}, 409: {"model": Error}, 422: {"model": Error}})


@router.post("/topics/{topic}/erasures", status_code=202, response_model=ErasureAccepted, dependencies=WRITE)
def create_erasure(topic: TopicPath, body: ErasureRequest, node: NodeDep) -> dict[str, Any]:
    """Append a tombstone for each key and erase the keys' older values from both tiers by the
    deadline; 422 when the deadline cannot be met or the topic is not compacted."""
    keys = [decode_field(k, body.encoding, f"keys[{i}]") for i, k in enumerate(body.keys)]
    rec = node.erasures.create(topic, [k for k in keys if k is not None], encoding=body.encoding,
                               partitions=body.partitions, deadline_ms=body.deadline_ms)
    return {"erasure_id": rec.erasure_id, "state": rec.state, "deadline_ms": rec.deadline_ms}


@router.get("/erasures/{erasure_id}", response_model=ErasureReceipt, dependencies=READ)
def get_erasure(erasure_id: str, node: NodeDep) -> dict[str, Any]:
    """The erasure's receipt (kept in the metadata store: it survives restarts and leader changes)."""
    return node.erasures.receipt(node.erasures.get(erasure_id))


@router.get("/erasures", response_model=list[ErasureSummary], dependencies=READ)
def list_erasures(node: NodeDep, topic: str | None = None) -> list[dict[str, Any]]:
    """Every erasure, newest first."""
    return [node.erasures.summary(r) for r in node.erasures.list_all(topic=topic)]
