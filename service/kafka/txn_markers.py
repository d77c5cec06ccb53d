"""Transaction markers on the wire: the coordinator's marker sink (local append or WriteTxnMarkers to the leader) and the WriteTxnMarkers v0-v1 handler.

A marker for a partition this node leads is appended through the node's log (the leader check
of the produce path, the coordinator epoch in the control record); for a partition another node
leads, a WriteTxnMarkers request goes to that node's Kafka listener (authenticated when the
cluster has credentials, service/kafka/peer_client.py), whose handler appends it the same way.
A marker older than the newest coordinator epoch a partition saw for the producer is refused
with TRANSACTION_COORDINATOR_FENCED (Kafka's ProducerStateManager coordinator-epoch check).
"""

from __future__ import annotations

import logging
import threading
import weakref
from collections.abc import Iterable
from typing import Any

import kafka.errors as kerr
from kafka.protocol.producer import WriteTxnMarkersRequest
from kafka.protocol.producer import WriteTxnMarkersResponse as R

from log.record import ControlRecordType
from log.types import TopicPartition
from service.kafka.produce import error_code_for
from service.kafka.registry import RequestContext, kafka_api

logger = logging.getLogger(__name__)

NONE = 0
UNKNOWN_TOPIC_OR_PARTITION = kerr.UnknownTopicOrPartitionError.errno
INVALID_PRODUCER_EPOCH = kerr.InvalidProducerEpochError.errno
TRANSACTION_COORDINATOR_FENCED = kerr.TransactionCoordinatorFencedError.errno
CLUSTER_AUTHORIZATION_FAILED = kerr.ClusterAuthorizationFailedError.errno
#: answers after which the marker must not be tried again (written, or superseded by a newer one)
FINAL = {NONE, UNKNOWN_TOPIC_OR_PARTITION, INVALID_PRODUCER_EPOCH, TRANSACTION_COORDINATOR_FENCED}

_COORD_EPOCHS: weakref.WeakKeyDictionary[Any, dict[int, int]] = weakref.WeakKeyDictionary()
_EPOCH_LOCK = threading.Lock()


def write_marker_local(node: Any, tp: TopicPartition, producer_id: int, producer_epoch: int, commit: bool,
                       coordinator_epoch: int) -> int:
    """Append one COMMIT/ABORT marker on this node (blocking); Kafka's error code (0 when written)."""
    try:
        log = node.log(tp.topic, tp.partition)
        node.check_leader_for_produce(log)
        with _EPOCH_LOCK:
            seen = _COORD_EPOCHS.setdefault(log, {})
            if coordinator_epoch < seen.get(producer_id, -1):
                return TRANSACTION_COORDINATOR_FENCED
            seen[producer_id] = coordinator_epoch
        kind = ControlRecordType.COMMIT if commit else ControlRecordType.ABORT
        log.append_marker(producer_id, producer_epoch, kind, coordinator_epoch)
    except Exception as e:  # noqa: BLE001 - the error code is the answer
        code = error_code_for(e)
        if code == kerr.UnknownError.errno:
            logger.exception("marker for producer %d on %s failed", producer_id, tp)
        return code
    notify = getattr(node, "notify_append", None)
    if notify is not None:
        notify(tp)
    return NONE


class NodeMarkerSink:
    """The coordinator's :class:`coordinator.txn.markers.MarkerSink` on a node with a Kafka listener."""

    def __init__(self, node: Any, cluster: Any, groups: Any, peers: Any) -> None:
        self.node = node
        self.cluster = cluster
        self.groups = groups
        self.peers = peers

    def _leader(self, tp: TopicPartition) -> int:
        from service.kafka.metadata_api import partition_leader

        return partition_leader(self.node, self.cluster, tp).leader_id

    def write_markers(self, producer_id: int, producer_epoch: int, commit: bool, coordinator_epoch: int,
                      partitions: set[TopicPartition]) -> set[TopicPartition]:
        by_leader: dict[int, list[TopicPartition]] = {}
        for tp in partitions:
            try:
                by_leader.setdefault(self._leader(tp), []).append(tp)
            except Exception as e:  # noqa: BLE001 - the store is unreachable: retry
                logger.warning("leader of %s: %s", tp, e)
        retry = set(partitions) - {tp for tps in by_leader.values() for tp in tps}
        for leader, tps in by_leader.items():
            if leader == self.cluster.broker_id:
                codes = {tp: write_marker_local(self.node, tp, producer_id, producer_epoch, commit, coordinator_epoch)
                         for tp in tps}
            elif leader < 0:
                codes = dict.fromkeys(tps, -1)
            else:
                codes = self._remote(leader, tps, producer_id, producer_epoch, commit, coordinator_epoch)
            retry |= {tp for tp, c in codes.items() if c not in FINAL}
        return retry

    def _remote(self, leader: int, tps: list[TopicPartition], producer_id: int, producer_epoch: int, commit: bool,
                coordinator_epoch: int) -> dict[TopicPartition, int]:
        broker = next((b for b in self.cluster.brokers() if b.broker_id == leader), None)
        if broker is None:
            return dict.fromkeys(tps, -1)
        topics: dict[str, list[int]] = {}
        for tp in tps:
            topics.setdefault(tp.topic, []).append(tp.partition)
        Marker = WriteTxnMarkersRequest.WritableTxnMarker
        req = WriteTxnMarkersRequest(markers=[Marker(
            producer_id=producer_id, producer_epoch=producer_epoch, transaction_result=commit,
            coordinator_epoch=coordinator_epoch,
            topics=[Marker.WritableTxnMarkerTopic(name=t, partition_indexes=ps) for t, ps in topics.items()])])
        try:
            resp = self.peers.call(broker.host, broker.port, req, 1)
        except Exception as e:  # noqa: BLE001 - retried by the completer
            logger.warning("WriteTxnMarkers to broker %d: %s", leader, e)
            return dict.fromkeys(tps, -1)
        codes: dict[TopicPartition, int] = dict.fromkeys(tps, -1)
        for m in resp.markers:
            for t in m.topics:
                for p in t.partitions:
                    codes[TopicPartition(t.name, p.partition_index)] = p.error_code
        return codes

    def complete_groups(self, producer_id: int, commit: bool, groups: set[str]) -> None:
        if self.groups is None:
            raise RuntimeError("no group coordinator on this node")
        self.groups.complete_txn(producer_id, commit, sorted(groups))


def _write_all(node: Any, markers: Iterable[Any], refuse: int = NONE) -> list[Any]:
    out = []
    for m in markers:
        topics = []
        for t in m.topics:
            parts = [R.WritableTxnMarkerResult.WritableTxnMarkerTopicResult.WritableTxnMarkerPartitionResult(
                partition_index=p, error_code=refuse or write_marker_local(
                    node, TopicPartition(t.name, p), m.producer_id, m.producer_epoch, bool(m.transaction_result),
                    m.coordinator_epoch))
                for p in t.partition_indexes]
            topics.append(R.WritableTxnMarkerResult.WritableTxnMarkerTopicResult(name=t.name, partitions=parts))
        out.append(R.WritableTxnMarkerResult(producer_id=m.producer_id, topics=topics))
    return out


@kafka_api(WriteTxnMarkersRequest, min_version=0, max_version=1)
async def handle_write_txn_markers(ctx: RequestContext, request: Any) -> Any:
    """A coordinator (any node) asks this node, the partitions' leader, to append markers; on a node with
    credentials only another node's principal may (CLUSTER_AUTHORIZATION_FAILED otherwise)."""
    from service.kafka.peer_client import is_peer_principal

    refuse = NONE if is_peer_principal(ctx.node.config, ctx.principal) else CLUSTER_AUTHORIZATION_FAILED
    return ctx.response(markers=await ctx.run(_write_all, ctx.node, list(request.markers or ()), refuse))
