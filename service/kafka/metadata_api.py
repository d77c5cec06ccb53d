"""Metadata v0-v12 and DescribeCluster v0-v1: the whole cluster's brokers, topics, topic ids and partition leaders.

Any node answers for every topic of the shared metadata store. A partition's leader is its
leadership record (``POST .../leadership``, or the first node that acted as its leader); a
partition nobody registered yet is led by the node answering (whose produce path accepts it). A
registered leader whose heartbeat expired shows LEADER_NOT_AVAILABLE with leader -1 (no election
here). Replicas and ISR are the leader alone: there is one copy of local data. The leadership records of every
partition a request answers are read in one query (:func:`leader_records`). While the metadata store fails, Metadata
answers what it read last (topics, leaders, brokers, topic ids), as Kafka's brokers answer from their metadata cache
while the controller is out of reach; a topic whose leaders it never read shows LEADER_NOT_AVAILABLE.

A topic a Metadata request names and the cluster does not have is created, as Kafka's broker creates it, when the
node's ``auto_create_topics_enable`` (auto.create.topics.enable) and the request allow it (the request's
``allow_auto_topic_creation`` from v4, always before): ``num_partitions`` partitions, the default topic configs.
Unlike Kafka, whose controller creates it after the answer (LEADER_NOT_AVAILABLE until then), the topic exists when
the answer is written, so the answer gives its partitions at once; past :data:`AUTO_CREATE_PER_REQUEST` creations in
one request, the rest answer LEADER_NOT_AVAILABLE, as Kafka's, and the client's next request creates them.
Otherwise it is UNKNOWN_TOPIC_OR_PARTITION.
"""

from __future__ import annotations

import logging
import threading
import time
import uuid
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from kafka.errors import (
    InvalidTopicError,
    LeaderNotAvailableError,
    NotLeaderForPartitionError,
    UnknownTopicIdError,
    UnknownTopicOrPartitionError,
    UnsupportedEndpointTypeError,
)
from kafka.protocol.admin import DescribeClusterRequest, DescribeClusterResponse
from kafka.protocol.metadata import MetadataRequest, MetadataResponse

from log.errors import TiercompactError, TopicExistsError
from log.types import TopicPartition, validate_topic_name
from service.kafka.acls import CLUSTER_OPERATION_CODES, TOPIC_OPERATION_CODES, authorized_operations
from service.kafka.errors import error_code
from service.kafka.registry import ClusterView, RequestContext, kafka_api
from service.per_node import per_node

logger = logging.getLogger(__name__)

ZERO_UUID = uuid.UUID(int=0)
#: topics one Metadata request may create (a few ms each): a request naming more gets LEADER_NOT_AVAILABLE for the
#: rest, which the client's next Metadata request creates, so every answer comes within a bound
AUTO_CREATE_PER_REQUEST = 50


@dataclass(frozen=True)
class PartitionLeader:
    """Who leads a partition, at which epoch, and the error Metadata shows for it (0: none)."""

    leader_id: int
    leader_epoch: int
    error_code: int = 0
    registered_id: int = -1


def partition_leader(node: Any, cluster: ClusterView, tp: TopicPartition, live: set[int] | None = None) -> PartitionLeader:
    """The leader of ``tp`` as every node sees it (blocking: reads the metadata store)."""
    state = node.metadata.leader_state(tp)
    return leader_of_record(node, cluster, tp, None if state is None else (state.leader_epoch, state.broker_id), live)


def leader_of_record(node: Any, cluster: ClusterView, tp: TopicPartition, record: tuple[int, int] | None,
                     live: set[int] | None) -> PartitionLeader:
    """The leader of ``tp`` given its leadership ``record`` (epoch, broker id; None: nobody registered one, so the
    node answering leads it, as its produce path accepts it)."""
    if record is None:
        log = node.log_manager.all_logs().get(tp)
        return PartitionLeader(cluster.broker_id, max(log.leader_epoch, 0) if log is not None else 0)
    epoch, broker = record
    if live is None:
        live = {b.broker_id for b in cluster.brokers()}
    if broker not in live:
        return PartitionLeader(-1, epoch, LeaderNotAvailableError.errno, broker)
    return PartitionLeader(broker, epoch, 0, broker)


@dataclass
class _LastRead:
    """What Metadata read from the metadata store last: what it answers while the store fails, as Kafka's brokers
    answer from their metadata cache while the controller is out of reach."""

    lock: threading.Lock = field(default_factory=threading.Lock)
    #: the shared store's topics (name -> partition count), None until read once
    topics: dict[str, int] | None = None
    #: the leadership records of the partitions of ``leader_topics``
    leaders: dict[TopicPartition, tuple[int, int]] = field(default_factory=dict)
    leader_topics: set[str] = field(default_factory=set)
    #: when a failed read was last logged (one warning a minute, not one per request)
    warned_at: float = 0.0

    def warn(self, what: str, e: Exception) -> None:
        now = time.monotonic()
        if now - self.warned_at >= 60:
            self.warned_at = now
            logger.warning("Metadata answers the %s last read: the metadata store failed: %s", what, e)


_last_read = per_node(lambda _node: _LastRead())


@dataclass(frozen=True)
class LeaderRecords:
    """The leadership records (epoch, broker id) of some topics' partitions, read in one query. ``known`` names the
    topics whose records these are: a partition of one of them without a record has none (nobody registered one);
    a partition of another topic is unknown (the store failed before its records were ever read)."""

    records: dict[TopicPartition, tuple[int, int]]
    known: frozenset[str]

    def leader(self, node: Any, cluster: ClusterView, tp: TopicPartition, live: set[int]) -> PartitionLeader:
        if tp.topic not in self.known:
            return PartitionLeader(-1, -1, LeaderNotAvailableError.errno)
        return leader_of_record(node, cluster, tp, self.records.get(tp), live)


#: above this many topics, the leaders of every partition are read (and the others' left out) rather than named in
#: the query: SQLite caps a statement's parameters, and a long IN list costs more than the rows it saves
READ_ALL_ABOVE_TOPICS = 1000


def read_leader_records(node: Any, topics: Iterable[str]) -> dict[TopicPartition, tuple[int, int]]:
    """The leadership records (epoch, broker id) of ``topics``' partitions, in one query of the metadata store (a
    partition nobody registered has none); raises the store's error."""
    wanted = set(topics)
    if not wanted:
        return {}
    versions = node.metadata.partition_versions(sorted(wanted) if len(wanted) <= READ_ALL_ABOVE_TOPICS else None)
    return {tp: (v.leader_epoch, v.broker_id) for tp, v in versions.items()
            if v.leader_epoch >= 0 and tp.topic in wanted}


def leader_records(node: Any, topics: Iterable[str]) -> LeaderRecords:
    """The leadership records of ``topics``' partitions in one query of the metadata store (not one per partition);
    while the store fails, the ones last read."""
    wanted = frozenset(topics)
    if not wanted:
        return LeaderRecords({}, wanted)
    last = _last_read(node)
    try:
        records = read_leader_records(node, wanted)
    except TiercompactError as e:
        last.warn("leaders", e)
        with last.lock:
            return LeaderRecords({tp: r for tp, r in last.leaders.items() if tp.topic in wanted},
                                 wanted & last.leader_topics)
    with last.lock:
        for tp in [tp for tp in last.leaders if tp.topic in wanted]:
            del last.leaders[tp]
        last.leaders.update(records)
        last.leader_topics |= wanted
    return LeaderRecords(records, wanted)


def not_leader_error(node: Any, cluster: ClusterView, tp: TopicPartition) -> int:
    """0 when this node leads ``tp``, else NOT_LEADER_OR_FOLLOWER (or LEADER_NOT_AVAILABLE for a dead leader)."""
    lead = partition_leader(node, cluster, tp)
    if lead.error_code:
        return lead.error_code
    return 0 if lead.leader_id == cluster.broker_id else NotLeaderForPartitionError.errno


def stored_topics(node: Any) -> dict[str, int]:
    """Topic name -> partition count: the shared store's topics, and this node's own. While the store fails, the
    store's topics last read (or none, if it never answered), with this node's own."""
    out = {t.name: t.partitions for t in node.topics()}
    last = _last_read(node)
    try:
        shared = {t.name: t.partitions for t in node.metadata.list_topic_configs()}
    except TiercompactError as e:
        last.warn("topics", e)
        with last.lock:
            shared = dict(last.topics or {})
    else:
        with last.lock:
            last.topics = dict(shared)
    out.update(shared)
    return out


def partition_fields(node: Any, cluster: ClusterView, name: str, indexes: range, live: set[int],
                     leaders: LeaderRecords | None = None) -> list[dict[str, Any]]:
    """Per partition of ``indexes``, the fields Metadata and DescribeTopicPartitions share: its leader (the
    leadership record, or this node), the leader alone as replicas and ISR, and a dead leader as offline.
    ``leaders``: the records already read (else read here, in one query for the topic)."""
    if leaders is None:
        leaders = leader_records(node, [name])
    out = []
    for p in indexes:
        lead = leaders.leader(node, cluster, TopicPartition(name, p), live)
        replicas = [lead.leader_id] if lead.leader_id >= 0 else [lead.registered_id]
        out.append({"error_code": lead.error_code, "partition_index": p, "leader_id": lead.leader_id,
                    "leader_epoch": lead.leader_epoch, "replica_nodes": replicas,
                    "isr_nodes": replicas if lead.error_code == 0 else [],
                    "offline_replicas": [] if lead.error_code == 0 else replicas})
    return out


def _partitions(node: Any, cluster: ClusterView, name: str, count: int, live: set[int],
                leaders: LeaderRecords) -> list[Any]:
    return [MetadataResponse.MetadataResponseTopic.MetadataResponsePartition(**f)
            for f in partition_fields(node, cluster, name, range(count), live, leaders)]


def _auto_create(node: Any, request: Any, version: int, name: str, stored: dict[str, int], budget: list[int]) -> int:
    """Create the unknown topic ``name`` if the node and the request allow it (adding it to ``stored``); returns the
    error code its Metadata entry gets: 0 once it exists (created here, or by another request or node meanwhile),
    UNKNOWN_TOPIC_OR_PARTITION when creation is not allowed, LEADER_NOT_AVAILABLE (retriable: the client's next
    Metadata request creates it) once the request's ``budget`` of creations is spent, else the creation's error."""
    allowed = request.allow_auto_topic_creation if version >= 4 else True
    if not (allowed and node.config.auto_create_topics_enable):
        return UnknownTopicOrPartitionError.errno
    if budget[0] <= 0:
        return LeaderNotAvailableError.errno
    budget[0] -= 1
    try:
        topic = node.create_topic(name, join=True)
    except TopicExistsError:  # created meanwhile (by a client's admin request, or another node): answer it as it is
        stored.update(stored_topics(node))
        return 0 if name in stored else UnknownTopicOrPartitionError.errno
    except TiercompactError as e:
        logger.warning("auto-creating topic %r failed: %s", name, e)
        return error_code(e)
    logger.info("auto-created topic %r with %d partition(s) for a Metadata request", name, topic.partitions)
    stored[name] = topic.partitions
    return 0


def _metadata(node: Any, cluster: ClusterView, request: Any, version: int) -> Any:
    brokers = cluster.brokers()
    live = {b.broker_id for b in brokers}
    stored = stored_topics(node)
    topic_cls = MetadataResponse.MetadataResponseTopic
    wanted: list[tuple[str | None, uuid.UUID]]
    if request.topics is None or (version == 0 and not request.topics):
        wanted = [(name, ZERO_UUID) for name in sorted(stored)]
    else:
        wanted = [(t.name, getattr(t, "topic_id", None) or ZERO_UUID) for t in request.topics]
    by_id: dict[uuid.UUID, str] | None = None
    topics = []
    # the fields exist from v8 (the cluster's up to v10): a version without them must not be given them
    # (kafka-python names both TopicAuthorizedOperations and ClusterAuthorizedOperations authorized_operations)
    topic_ops = {"authorized_operations": authorized_operations(
        TOPIC_OPERATION_CODES, request.include_topic_authorized_operations)} if version >= 8 else {}
    cluster_ops = {"authorized_operations": authorized_operations(
        CLUSTER_OPERATION_CODES, request.include_cluster_authorized_operations)} if 8 <= version <= 10 else {}
    budget = [AUTO_CREATE_PER_REQUEST]
    answered: list[Any] = []  # the topics answered with their partitions (filled in once every name is resolved)
    for name, tid in wanted:
        if name is None:  # v10+: by topic id
            if by_id is None:
                by_id = {v: k for k, v in cluster.topic_ids().items() if k in stored}
            name = by_id.get(tid)
            if name is None:
                topics.append(topic_cls(error_code=UnknownTopicIdError.errno, name=None, topic_id=tid,
                                        is_internal=False, partitions=[]))
                continue
        try:
            validate_topic_name(name)
        except TiercompactError:
            topics.append(topic_cls(error_code=InvalidTopicError.errno, name=name, topic_id=ZERO_UUID,
                                    is_internal=False, partitions=[]))
            continue
        if name not in stored:
            code = _auto_create(node, request, version, name, stored, budget)
            if code:
                topics.append(topic_cls(error_code=code, name=name, topic_id=ZERO_UUID, is_internal=False,
                                        partitions=[]))
                continue
        topics.append(topic_cls(error_code=0, name=name, topic_id=cluster.topic_id(name), is_internal=False,
                                partitions=[], **topic_ops))
        answered.append(topics[-1])
    leaders = leader_records(node, (t.name for t in answered))  # one query for every partition answered
    for t in answered:
        t.partitions = _partitions(node, cluster, t.name, stored[t.name], live, leaders)
    return MetadataResponse(
        throttle_time_ms=0,
        brokers=[MetadataResponse.MetadataResponseBroker(node_id=b.broker_id, host=b.host, port=b.port, rack=b.rack)
                 for b in brokers],
        cluster_id=cluster.cluster_id, controller_id=min(live), topics=topics, **cluster_ops)


@kafka_api(MetadataRequest, min_version=0, max_version=12)
async def handle_metadata(ctx: RequestContext, request: Any) -> Any:
    return await ctx.run(_metadata, ctx.node, ctx.cluster, request, ctx.api_version)


def _describe_cluster(cluster: ClusterView, request: Any) -> Any:
    brokers = cluster.brokers()
    return DescribeClusterResponse(
        throttle_time_ms=0, error_code=0, error_message=None, endpoint_type=1, cluster_id=cluster.cluster_id,
        controller_id=min(b.broker_id for b in brokers),
        authorized_operations=authorized_operations(CLUSTER_OPERATION_CODES,
                                                            request.include_cluster_authorized_operations),
        brokers=[DescribeClusterResponse.DescribeClusterBroker(broker_id=b.broker_id, host=b.host, port=b.port,
                                                               rack=b.rack, is_fenced=False) for b in brokers])


@kafka_api(DescribeClusterRequest, min_version=0, max_version=1)
async def handle_describe_cluster(ctx: RequestContext, request: Any) -> Any:
    if ctx.api_version >= 1 and request.endpoint_type != 1:  # 2 = controllers: there are none to name
        return DescribeClusterResponse(throttle_time_ms=0, error_code=UnsupportedEndpointTypeError.errno,
                                       error_message="only brokers are described",
                                       endpoint_type=request.endpoint_type, cluster_id=ctx.cluster.cluster_id,
                                       controller_id=-1, brokers=[])
    return await ctx.run(_describe_cluster, ctx.cluster, request)
