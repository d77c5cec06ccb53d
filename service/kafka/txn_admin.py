"""DescribeTransactions v0 and ListTransactions v0-v1 for operators: what this node's transaction coordinator holds."""

from __future__ import annotations

from typing import Any

from kafka.protocol.admin.transactions import (
    DescribeTransactionsRequest,
    DescribeTransactionsResponse,
    ListTransactionsRequest,
    ListTransactionsResponse,
)

from coordinator.txn import state as S
from coordinator.txn.state import TxnState
from service.kafka.registry import RequestContext, kafka_api
from service.kafka.transactions import txn_coordinator

_Desc = DescribeTransactionsResponse.TransactionState
_Listed = ListTransactionsResponse.TransactionState


@kafka_api(DescribeTransactionsRequest, min_version=0, max_version=0)
async def handle_describe_transactions(ctx: RequestContext, request: Any) -> Any:
    tc = txn_coordinator(ctx)
    out = []
    for tid in request.transactional_ids or ():
        code, m = (S.COORDINATOR_NOT_AVAILABLE, None) if tc is None else await ctx.run(tc.describe, tid)
        if m is None:
            out.append(_Desc(error_code=code, transactional_id=tid, transaction_state="", transaction_timeout_ms=0,
                             transaction_start_time_ms=-1, producer_id=-1, producer_epoch=-1, topics=[]))
            continue
        topics: dict[str, list[int]] = {}
        for tp in sorted(m.partitions):
            topics.setdefault(tp.topic, []).append(tp.partition)
        out.append(_Desc(error_code=0, transactional_id=tid, transaction_state=m.state,
                         transaction_timeout_ms=m.timeout_ms, transaction_start_time_ms=m.txn_start_ms,
                         producer_id=m.producer_id, producer_epoch=m.producer_epoch,
                         topics=[_Desc.TopicData(topic=t, partitions=ps) for t, ps in topics.items()]))
    return ctx.response(throttle_time_ms=0, transaction_states=out)


@kafka_api(ListTransactionsRequest, min_version=0, max_version=1)
async def handle_list_transactions(ctx: RequestContext, request: Any) -> Any:
    tc = txn_coordinator(ctx)
    if tc is None:
        return ctx.response(throttle_time_ms=0, error_code=S.COORDINATOR_NOT_AVAILABLE, unknown_state_filters=[],
                            transaction_states=[])
    known = {s.value for s in TxnState}
    states = set(request.state_filters or ())
    pids = set(request.producer_id_filters or ())
    min_duration = getattr(request, "duration_filter", -1) if ctx.api_version >= 1 else -1
    now = ctx.node.clock.milliseconds()
    listed = []
    for m in await ctx.run(tc.list):
        if (states and m.state not in states) or (pids and m.producer_id not in pids):
            continue
        if min_duration is not None and min_duration >= 0 and (m.txn_start_ms < 0 or now - m.txn_start_ms < min_duration):
            continue
        listed.append(_Listed(transactional_id=m.transactional_id, producer_id=m.producer_id,
                              transaction_state=m.state))
    return ctx.response(throttle_time_ms=0, error_code=0, unknown_state_filters=sorted(states - known),
                        transaction_states=listed)
