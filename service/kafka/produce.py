"""Produce v3-v9: each partition's one record batch validated (log/batch_validation.py) and appended as it came, answered per acks.

Per partition, as Kafka's ReplicaManager.appendRecords answers it:

* the topic and partition must exist (UNKNOWN_TOPIC_OR_PARTITION) and this node must lead
  it (NOT_LEADER_OR_FOLLOWER, after which clients refresh their metadata);
* the batch is checked (CORRUPT_MESSAGE, INVALID_RECORD with per-record errors in v8+,
  INVALID_TIMESTAMP, MESSAGE_TOO_LARGE; zstd needs v7+: UNSUPPORTED_COMPRESSION_TYPE), then
  appended with Kafka's idempotent producer checks (a retry of one of the producer's last 5
  batches answers its original base offset; OUT_OF_ORDER_SEQUENCE_NUMBER,
  INVALID_PRODUCER_EPOCH, UNKNOWN_PRODUCER_ID);
* acks=0 sends no answer, acks=1 answers after the append, acks=-1 after the partition's
  records are on disk (service/kafka/durability.py: one sync for every request that waited for
  it).

The appends go on the connection's ordered lane (service/kafka/lane.py): the listener reads the
client's next pipelined requests while they run, the appends of every request queued meanwhile
run next as one worker job in the order they were sent, and for acks=-1 that job then syncs
the partitions it appended to, once, before it answers its requests.
"""

from __future__ import annotations

import asyncio
import functools
import logging
import time
from typing import Any, cast

import kafka.errors as kerr
from kafka.protocol.producer import ProduceRequest, ProduceResponse

from log.batch_validation import validate_produce_batch
from log.errors import (
    InvalidProducerEpochError,
    InvalidRecordError,
    InvalidTimestampError,
    InvalidTxnStateError,
    OutOfOrderSequenceError,
    RecordTooLargeError,
    TiercompactError,
    UnknownProducerIdError,
)
from log.local_log import LocalLog
from log.record import COMPRESSION_CODEC_MASK
from log.types import TimestampType, TopicPartition
from service.kafka import errors as kafka_errors
from service.kafka.durability import NeedsDurable, group_sync_for
from service.kafka.metadata_api import not_leader_error
from service.kafka.produce_answer import PRODUCE as PRODUCE_ANSWERS
from service.kafka.registry import RequestContext, kafka_api

logger = logging.getLogger(__name__)

PartitionResponse = ProduceResponse.TopicProduceResponse.PartitionProduceResponse
RecordErrorMsg = PartitionResponse.BatchIndexAndErrorMessage

ZSTD = 4
#: Produce v7 is the first a zstd batch may come in (KIP-110)
ZSTD_MIN_VERSION = 7

#: our error classes -> Kafka's error codes, nearest class first (checked in this order)
_CODES: list[tuple[type[BaseException], int]] = [
    (UnknownProducerIdError, kerr.UnknownProducerIdError.errno),
    (OutOfOrderSequenceError, kerr.OutOfOrderSequenceNumberError.errno),
    (InvalidProducerEpochError, kerr.InvalidProducerEpochError.errno),
    (InvalidTxnStateError, kerr.InvalidTxnStateError.errno),
    (RecordTooLargeError, kerr.MessageSizeTooLargeError.errno),
    (InvalidTimestampError, kerr.InvalidTimestampError.errno),
    (InvalidRecordError, kerr.InvalidRecordError.errno),
]


def error_code_for(exc: BaseException) -> int:
    """Kafka's error code for an append failure: the produce-specific ones here, the rest from
    the listener's shared table (service/kafka/errors.py)."""
    for cls, code in _CODES:
        if isinstance(exc, cls):
            return code
    return kafka_errors.error_code(exc)


class _Outcome:
    """One partition's answer being built (and, for acks=-1, the log end to wait for)."""

    __slots__ = ("index", "error", "message", "base_offset", "append_time", "log_start", "record_errors", "log",
                 "end", "size", "records")

    def __init__(self, index: int) -> None:
        self.index = index
        self.error = 0
        self.message: str | None = None
        self.base_offset = -1
        self.append_time = -1
        self.log_start = -1
        self.record_errors: list[tuple[int, str]] = []
        self.log: LocalLog | None = None
        self.end = -1
        #: the batch's bytes and records, once appended (BytesInPerSec, MessagesInPerSec)
        self.size = 0
        self.records = 0

    def fail(self, exc: BaseException) -> None:
        self.error = error_code_for(exc)
        self.message = str(exc)[:1000]
        self.record_errors = list(getattr(exc, "record_errors", []))

    def response(self, version: int) -> Any:
        fields: dict[str, Any] = {"index": self.index, "error_code": self.error, "base_offset": self.base_offset,
                                  "log_append_time_ms": self.append_time, "log_start_offset": self.log_start}
        if version >= 8:
            fields["record_errors"] = [RecordErrorMsg(batch_index=i, batch_index_error_message=m[:1000], version=version)
                                       for i, m in self.record_errors]
            fields["error_message"] = self.message
        # made at the answer's version, its fields are plain attributes for the encoder: half the encode time of a
        # versionless message, whose absent fields each cost a __getattr__ fallback
        return PartitionResponse(**fields, version=version)


#: how long a non-tiered partition's leadership record is trusted without reading it again
LEADER_CACHE_S = 1.0
_leaders: dict[tuple[int, TopicPartition], tuple[float, int]] = {}


def _check_leader(node: Any, cluster: Any, log: LocalLog) -> int:
    """0 when this node leads the partition, else Kafka's error code: the partition's leadership
    record, as Metadata shows it. A tiered partition's record is read on every request (records a
    deposed leader acknowledged could never be tiered) and the node's own fencing applies too
    (Node.check_leader_for_produce); another partition's is read at most once a second."""
    tiered = log.config.remote_storage_enable
    if tiered:
        node.check_leader_for_produce(log)  # raises NotLeaderForPartitionError
    if cluster is None:
        return 0
    key = (id(node), log.topic_partition)
    now = time.monotonic()
    hit = None if tiered else _leaders.get(key)
    if hit is not None and now - hit[0] < LEADER_CACHE_S:
        return hit[1]
    code = not_leader_error(node, cluster, log.topic_partition)
    if not tiered:
        if len(_leaders) > 100_000:
            _leaders.clear()
        _leaders[key] = (now, code)
    return code


def _append_one(node: Any, cluster: Any, topic: str, index: int, records: bytes | None, version: int,
                out: _Outcome, acks: int = -1) -> None:
    """Validate and append one partition's batch; fills ``out`` (never raises for the request's sake)."""
    try:
        log = node.log(topic, index)
        code = _check_leader(node, cluster, log)
        if code:
            out.error = code
            out.message = f"broker {cluster.broker_id} does not lead {log.topic_partition}: refresh the metadata"
            return
        min_isr = log.config.min_insync_replicas
        if acks == -1 and min_isr > 1:  # Kafka's Partition.appendRecordsToLeader: the ISR is the leader alone
            out.error = kerr.NotEnoughReplicasError.errno
            out.message = (f"The size of the current ISR [{cluster.broker_id}] is insufficient to satisfy the min.isr "
                           f"requirement of {min_isr} for partition {log.topic_partition} (one copy per partition)")
            return
        if records is None or len(records) == 0:
            raise InvalidRecordError("a produce request needs one record batch per partition")
        if version < ZSTD_MIN_VERSION and len(records) > 22 and records[22] & COMPRESSION_CODEC_MASK == ZSTD:
            out.error = kerr.UnsupportedCompressionTypeError.errno
            out.message = f"zstd batches need Produce v{ZSTD_MIN_VERSION}+ (this request is v{version})"
            return
        tp = log.topic_partition
        buf = validate_produce_batch(records, log.config, node.clock.milliseconds(), partition=str(tp))
        res = log.append_batches(buf, strict_producers=True, validated=True)
    except Exception as e:  # noqa: BLE001 - a partition's failure is its answer, not the request's
        out.fail(e)
        if not isinstance(e, TiercompactError):
            logger.exception("produce to %s-%d failed unexpectedly", topic, index)
        elif out.error == kafka_errors.UNKNOWN_SERVER_ERROR:
            logger.warning("produce to %s-%d failed: %s: %s", topic, index, type(e).__name__, e)
        return
    out.base_offset = res.base_offset
    out.log = log
    out.end = res.last_offset + 1
    if not res.duplicate:
        out.size, out.records = len(buf), res.last_offset - res.base_offset + 1
    out.log_start = log.log_start_offset
    if log.config.timestamp_type is TimestampType.LOG_APPEND_TIME and not res.duplicate:
        out.append_time = _append_time(log, res.base_offset)
    if not res.duplicate:
        notify = getattr(node, "notify_append", None)
        if notify is not None:
            notify(tp)  # also fsyncs per flush.messages (service/flush_policy.py)


def _append_time(log: LocalLog, base_offset: int) -> int:
    """The LOG_APPEND_TIME stamped into the batch just appended (its maxTimestamp)."""
    try:
        batches = log.read(base_offset, max_bytes=1)
    except TiercompactError:
        return -1
    return batches[0].max_timestamp if batches else -1


class _Appended(NeedsDurable):
    """A request's outcomes per topic, and (acks=-1) the end offset each appended log must be durable to."""

    __slots__ = ("topics",)

    def __init__(self, topics: list[tuple[str, list[_Outcome]]], durable_ends: dict[LocalLog, int]) -> None:
        super().__init__(durable_ends)
        self.topics = topics


def _append_all(node: Any, cluster: Any, request: Any, version: int, acks: int) -> _Appended:
    done: list[tuple[str, list[_Outcome]]] = []
    ends: dict[LocalLog, int] = {}
    for td in request.topic_data:
        outs = []
        for pd in td.partition_data:
            out = _Outcome(pd.index)
            _append_one(node, cluster, td.name, pd.index, pd.records, version, out, acks)
            outs.append(out)
            log = out.log
            if acks == -1 and out.error == 0 and log is not None and ends.get(log, -1) < out.end:
                ends[log] = out.end
        done.append((td.name, outs))
    return _Appended(done, ends)


def _count(ctx: RequestContext, done: list[tuple[str, list[_Outcome]]]) -> list[int]:
    """Hand the metrics what the outcomes already say (the codes answered, bytes and records appended per topic);
    returns the codes."""
    codes = ctx.error_codes = [o.error for _n, outs in done for o in outs]
    produced: dict[str, tuple[int, int]] = {}
    for name, outs in done:
        size = sum(o.size for o in outs)
        if size:
            produced[name] = (size, sum(o.records for o in outs))
    ctx.produced = produced
    return codes


def _answer(ctx: RequestContext, done: list[tuple[str, list[_Outcome]]]) -> Any:
    v = ctx.api_version
    if not any(_count(ctx, done)) and all(o.message is None and not o.record_errors for _n, outs in done for o in outs):
        # every partition appended: the answer is written from its shape's layout (service/kafka/produce_answer.py)
        fast = PRODUCE_ANSWERS.answer(v, [(name, [(o.index, o.base_offset, o.append_time, o.log_start) for o in outs])
                                          for name, outs in done])
        if fast is not None:
            return fast
    topics = [ProduceResponse.TopicProduceResponse(name=name, partition_responses=[o.response(v) for o in outs],
                                                   version=v)
              for name, outs in done]
    return ctx.response(responses=topics, throttle_time_ms=0)


def _invalid_acks(ctx: RequestContext, request: Any) -> Any:
    done = []
    for td in request.topic_data:
        outs = []
        for pd in td.partition_data:
            o = _Outcome(pd.index)
            o.error = kerr.InvalidRequiredAcksError.errno
            o.message = f"acks={request.acks} is invalid: use 0, 1 or -1"
            outs.append(o)
        done.append((td.name, outs))
    return _answer(ctx, done)


@kafka_api(ProduceRequest, min_version=3, max_version=9, pipelined=True)
async def handle_produce(ctx: RequestContext, request: Any) -> Any:
    acks = request.acks
    if acks not in (0, 1, -1):
        return _invalid_acks(ctx, request)
    size = sum(len(pd.records or b"") for td in request.topic_data for pd in td.partition_data)
    # the appends run on the connection's lane; for acks=-1 the lane job then syncs what its requests appended
    # (GroupSync.finish_job) before it hands their outcomes back, so the answer is built from a callback, with no
    # Task per request, and the listener reads the next requests meanwhile
    appended = ctx.in_order(_append_all, ctx.node, ctx.cluster, request, ctx.api_version, acks, size=size,
                            finish=group_sync_for(ctx.node).finish_job if acks == -1 else None)
    answer: asyncio.Future[Any] = appended.get_loop().create_future()
    appended.add_done_callback(functools.partial(_appended, ctx, acks, answer))
    return answer


def _appended(ctx: RequestContext, acks: int, answer: asyncio.Future[Any], appended: asyncio.Future[Any]) -> None:
    if answer.done():
        return
    if appended.cancelled():
        answer.cancel()
        return
    try:
        result: _Appended = appended.result()
        done = result.topics
        if acks == 0:
            _count(ctx, done)
            ctx.error_codes = []  # no answer, so no code answered
            answer.set_result(None)
            return
        failed = result.sync_failed
        if failed:
            for _n, outs in done:
                for o in outs:
                    err = failed.get(cast(LocalLog, o.log)) if o.error == 0 else None
                    if err is not None:
                        logger.error("fsync of %s failed: %s", cast(LocalLog, o.log).topic_partition, err)
                        o.error = kerr.KafkaStorageError.errno
                        o.message = f"the records were appended but the fsync failed: {err}"
                        o.base_offset = -1
        answer.set_result(_answer(ctx, done))
    except BaseException as e:  # noqa: BLE001 - the request's failure, as its awaited answer would raise it
        if not answer.done():
            answer.set_exception(e)
