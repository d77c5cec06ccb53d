"""The transactional producer's APIs: InitProducerId with a transactional.id, AddPartitionsToTxn v0-v3, AddOffsetsToTxn v0-v3, EndTxn v0-v3, TxnOffsetCommit v0-v3.

Each handler hands the request to the node's transaction coordinator (coordinator.txn, blocking:
through ``ctx.run``), or, for TxnOffsetCommit, to the group coordinator, which keeps the
offsets pending until the transaction's marker. :func:`start_transactions` builds the
transaction coordinator beside the group coordinator (service/kafka/coordinators.py calls it).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from kafka.protocol.producer import (
    AddOffsetsToTxnRequest,
    AddPartitionsToTxnRequest,
    AddPartitionsToTxnResponse,
    EndTxnRequest,
    TxnOffsetCommitRequest,
    TxnOffsetCommitResponse,
)

from coordinator.txn import state as S
from log.types import TopicPartition
from metadata.group_offsets import CommittedOffset
from service.kafka.registry import RequestContext, kafka_api

if TYPE_CHECKING:
    from coordinator.txn.coordinator import TransactionCoordinator
    from service.kafka.coordinators import Coordinators

_TopicResult = AddPartitionsToTxnResponse.AddPartitionsToTxnTopicResult
_PartResult = _TopicResult.AddPartitionsToTxnPartitionResult
_OTopic = TxnOffsetCommitResponse.TxnOffsetCommitResponseTopic
_OPart = _OTopic.TxnOffsetCommitResponsePartition


def start_transactions(coords: Coordinators) -> TransactionCoordinator:
    """The node's transaction coordinator on ``coords.txn_ownership`` (its load listener registered before the rounds start)."""
    from coordinator.txn.coordinator import TransactionCoordinator, TxnConfig
    from metadata.sql_txn_state import SqlTxnStateStore
    from service.kafka.group_offsets import _unknown
    from service.kafka.peer_client import PeerClient, credentials_for
    from service.kafka.producer_id_blocks import allocator_for
    from service.kafka.txn_markers import NodeMarkerSink

    node, config = coords.node, coords.node.config
    peers = PeerClient(credentials_for(config, node.broker_id), tls=getattr(config, "kafka_tls_cert", None) is not None)
    sink = NodeMarkerSink(node, coords.listener.cluster, coords.groups, peers)

    def unknown(tps: Any) -> set[TopicPartition]:
        missing = _unknown(node, [(tp.topic, tp.partition) for tp in tps])
        return {TopicPartition(t, p) for t, p in missing}

    tconf = TxnConfig(max_timeout_ms=getattr(config, "transaction_max_timeout_ms", 900_000),
                      abort_check_interval_ms=getattr(config, "transaction_abort_timed_out_transaction_cleanup_"
                                                              "interval_ms", 10_000),
                      id_expiration_ms=getattr(config, "transactional_id_expiration_ms", 604_800_000),
                      remove_expired_interval_ms=getattr(config, "transaction_remove_expired_transaction_"
                                                                 "cleanup_interval_ms", 3_600_000))
    store = SqlTxnStateStore(engine=coords.store.engine)
    tc = TransactionCoordinator(store, coords.txn_ownership, next_producer_id=allocator_for(node).next_id,
                                sink=sink, unknown_partitions=unknown, now_ms=node.clock.milliseconds,
                                config=tconf).start()
    collectors = getattr(node, "metric_collectors", None)
    if collectors is not None:
        from service.kafka.txn_metrics import TxnMetrics

        collectors.append(TxnMetrics(tc))
    return tc


def txn_coordinator(ctx: RequestContext) -> TransactionCoordinator | None:
    coordinators = getattr(ctx.listener, "coordinators", None)
    return None if coordinators is None else coordinators.transactions


async def init_transactional(ctx: RequestContext, request: Any) -> Any:
    """InitProducerId for a transactional.id (service/kafka/init_producer_id.py hands it here)."""
    tc = txn_coordinator(ctx)
    v = ctx.api_version
    if tc is None:
        code, pid, epoch = S.COORDINATOR_NOT_AVAILABLE, -1, -1
    elif request.transactional_id == "":
        code, pid, epoch = S.INVALID_REQUEST, -1, -1
    else:
        expected = (request.producer_id, request.producer_epoch) if v >= 3 else (-1, -1)
        code, pid, epoch = await ctx.run(tc.init_producer_id, request.transactional_id,
                                         request.transaction_timeout_ms, expected[0], expected[1], v)
    return ctx.response(throttle_time_ms=0, error_code=code, producer_id=pid, producer_epoch=epoch)


@kafka_api(AddPartitionsToTxnRequest, min_version=0, max_version=3)
async def handle_add_partitions_to_txn(ctx: RequestContext, request: Any) -> Any:
    tps = [TopicPartition(t.name, p) for t in request.v3_and_below_topics or () for p in t.partitions or ()]
    tc = txn_coordinator(ctx)
    if tc is None:
        codes = dict.fromkeys(tps, S.COORDINATOR_NOT_AVAILABLE)
    else:
        codes = await ctx.run(tc.add_partitions, request.v3_and_below_transactional_id,
                              request.v3_and_below_producer_id, request.v3_and_below_producer_epoch, tps,
                              ctx.api_version)
    by_topic: dict[str, list[Any]] = {}
    for tp in tps:
        by_topic.setdefault(tp.topic, []).append(_PartResult(partition_index=tp.partition,
                                                             partition_error_code=codes[tp]))
    return ctx.response(throttle_time_ms=0, error_code=0, results_by_topic_v3_and_below=[
        _TopicResult(name=t, results_by_partition=ps) for t, ps in by_topic.items()])


@kafka_api(AddOffsetsToTxnRequest, min_version=0, max_version=3)
async def handle_add_offsets_to_txn(ctx: RequestContext, request: Any) -> Any:
    tc = txn_coordinator(ctx)
    code = S.COORDINATOR_NOT_AVAILABLE if tc is None else await ctx.run(
        tc.add_offsets, request.transactional_id, request.producer_id, request.producer_epoch, request.group_id,
        ctx.api_version)
    return ctx.response(throttle_time_ms=0, error_code=code)


@kafka_api(EndTxnRequest, min_version=0, max_version=3)
async def handle_end_txn(ctx: RequestContext, request: Any) -> Any:
    tc = txn_coordinator(ctx)
    code = S.COORDINATOR_NOT_AVAILABLE if tc is None else await ctx.run(
        tc.end_txn, request.transactional_id, request.producer_id, request.producer_epoch, bool(request.committed),
        ctx.api_version)
    return ctx.response(throttle_time_ms=0, error_code=code)


@kafka_api(TxnOffsetCommitRequest, min_version=0, max_version=3)
async def handle_txn_offset_commit(ctx: RequestContext, request: Any) -> Any:
    """The consumer's offsets inside the transaction: pending in the group coordinator until the marker."""
    v = ctx.api_version
    offsets = {TopicPartition(t.name, p.partition_index): CommittedOffset(
        p.committed_offset, p.committed_leader_epoch if v >= 2 else -1, p.committed_metadata or "", ctx.node.clock.milliseconds())
        for t in request.topics or () for p in t.partitions or ()}
    coordinators = getattr(ctx.listener, "coordinators", None)
    gc = None if coordinators is None else coordinators.groups
    if gc is None:
        codes = dict.fromkeys(offsets, S.COORDINATOR_NOT_AVAILABLE)
    else:
        generation = request.generation_id if v >= 3 else -1
        member = request.member_id if v >= 3 else ""
        instance = request.group_instance_id if v >= 3 else None
        codes = await gc.call(gc.txn_offset_commit(request.group_id, request.producer_id, request.producer_epoch,
                                                   offsets, generation, member, instance))
    by_topic: dict[str, list[Any]] = {}
    for tp, code in codes.items():
        by_topic.setdefault(tp.topic, []).append(_OPart(partition_index=tp.partition, error_code=code))
    return ctx.response(throttle_time_ms=0, topics=[_OTopic(name=t, partitions=ps) for t, ps in by_topic.items()])
