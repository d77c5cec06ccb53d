"""/v1/transactions: transactional ids for operators (state, producer id and epoch, partitions and groups of the open transaction, timeout).

The state comes from the metadata store, so any node answers for every transactional id;
``coordinator`` names the node that coordinates it (its slot and coordinator epoch).
"""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter
from fastapi.responses import JSONResponse

from metadata.sql_txn_state import SqlTxnStateStore
from metadata.txn_state import TxnRecord, TxnStateStore
from service.errors import error_body
from service.per_node import per_node
from service.routes.coordinated import coordinator_of, coordinators, store_of
from service.routes.deps import READ, NodeDep
from service.schemas import Error

router = APIRouter(prefix="/v1/transactions", tags=["transactions"],
                   responses={401: {"model": Error}, 403: {"model": Error}, 404: {"model": Error}})

_own_store = per_node(lambda node: SqlTxnStateStore(node.config.metadata_url))


def _store(node: Any) -> TxnStateStore:
    return store_of(node, lambda c: getattr(getattr(c, "transactions", None), "store", None), _own_store)


def _coordinator_of(node: Any, tid: str) -> dict[str, Any]:
    c = coordinators(node)
    return coordinator_of(None if c is None else c.txn_ownership, tid,
                          getattr(node.config, "transaction_state_log_num_partitions", 50))


def _view(node: Any, r: TxnRecord) -> dict[str, Any]:
    return {"transactional_id": r.transactional_id, "state": r.state, "producer_id": r.producer_id,
            "producer_epoch": r.producer_epoch, "timeout_ms": r.timeout_ms,
            "partitions": sorted([tp.topic, tp.partition] for tp in r.partitions), "groups": sorted(r.groups),
            "txn_start_ms": r.txn_start_ms if r.txn_start_ms >= 0 else None, "update_ms": r.update_ms,
            "coordinator": _coordinator_of(node, r.transactional_id)}


@router.get("", dependencies=READ)
def list_transactions(node: NodeDep, state: str | None = None) -> dict[str, Any]:
    """Every transactional id known to the metadata store (``state`` filters on Kafka's state names)."""
    return {"transactions": [_view(node, r) for r in _store(node).all() if state is None or r.state == state]}


@router.get("/{transactional_id}", dependencies=READ)
def get_transaction(transactional_id: str, node: NodeDep) -> Any:
    """One transactional id: state, producer id and epoch, the open transaction's partitions and groups, timeout."""
    r = _store(node).get(transactional_id)
    if r is None:
        return JSONResponse(error_body(f"transactional id {transactional_id!r} is not known"), status_code=404)
    return _view(node, r)
