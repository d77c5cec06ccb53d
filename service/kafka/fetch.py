"""Fetch v4-v12: stored batch bytes from either tier, sessionless, with Kafka's byte limits and long poll.

Kafka's ReplicaManager.fetchMessages for a consumer: each partition is read from its fetch
offset up to ``partition_max_bytes`` and what is left of the response's ``max_bytes``; the first
partition that has data returns at least one whole batch (minOneMessage), the others stop at
the limit. read_committed is bounded by the last stable offset and answers the aborted
transactions of the range read. While fewer than ``min_bytes`` are readable and ``max_wait_ms``
has not passed, the request waits for an append to one of its partitions (the listener's
``wait_for_append``) and reads again. Fetch sessions (KIP-227) are answered sessionless:
session id 0, every request names all its partitions.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import struct
import weakref
from dataclasses import dataclass
from typing import Any

from kafka.protocol.consumer import FetchRequest, FetchResponse

from log.errors import InvalidRequestError, UnknownTopicOrPartitionError
from log.record.varint import encode_uvarint
from log.types import TopicPartition
from remote.raw_read import RawTieredRead
from service.kafka.errors import (
    FENCED_LEADER_EPOCH,
    NONE,
    NOT_LEADER_OR_FOLLOWER,
    UNKNOWN_LEADER_EPOCH,
    error_code,
)
from service.kafka.leader_cache import leader_cache
from service.kafka.registry import RequestContext, kafka_api

_Partition = FetchResponse.FetchableTopicResponse.PartitionData
_Aborted = _Partition.AbortedTransaction
#: records at least this large are spliced into the encoded response (SplicedFetchResponse)
SPLICE_MIN_BYTES = 4096
#: Kafka's broker config fetch.max.bytes: no response holds more, whatever the client asks (but a
#: first batch larger than that, up to max.message.bytes, still goes whole)
FETCH_MAX_BYTES = 55 * 1024 * 1024
_MARKER_BYTES = 16


@dataclass(frozen=True, slots=True)
class _Want:
    topic: str
    partition: int
    offset: int
    max_bytes: int
    leader_epoch: int = -1


_READERS: weakref.WeakKeyDictionary[Any, RawTieredRead] = weakref.WeakKeyDictionary()


def raw_reader(node: Any) -> RawTieredRead:
    """The node's two-tier raw reader (made once per node)."""
    raw = _READERS.get(node)
    if raw is None:
        raw = _READERS.setdefault(node, RawTieredRead(node.remote.read_path))
    return raw


class NotLeaderError(Exception):
    """This node cannot serve the partition: ``code`` is NOT_LEADER_OR_FOLLOWER, LEADER_NOT_AVAILABLE,
    FENCED_LEADER_EPOCH or UNKNOWN_LEADER_EPOCH."""

    def __init__(self, code: int) -> None:
        super().__init__(code)
        self.code = code


def check_leader(ctx: RequestContext, tp: TopicPartition, current_leader_epoch: int = -1, *,
                 fresh: bool = False) -> None:
    """Raise NotLeaderError unless this node leads ``tp`` as Metadata tells clients (KIP-320: a
    client's ``current_leader_epoch`` below the leader's is FENCED_LEADER_EPOCH, above it
    UNKNOWN_LEADER_EPOCH). The leader comes from the node's leader cache (service.kafka.leader_cache: read
    in bulk, refreshed off the request path; ``fresh`` for a caller about to write); blocking: call from a
    worker thread."""
    lead = leader_cache(ctx.node, ctx.cluster).leader(tp, fresh=fresh)
    if lead.error_code:
        raise NotLeaderError(lead.error_code)
    if lead.leader_id != ctx.cluster.broker_id:
        raise NotLeaderError(NOT_LEADER_OR_FOLLOWER)
    if current_leader_epoch >= 0 and current_leader_epoch != lead.leader_epoch:
        raise NotLeaderError(FENCED_LEADER_EPOCH if current_leader_epoch < lead.leader_epoch
                             else UNKNOWN_LEADER_EPOCH)


def partition_error(e: BaseException) -> int:
    return e.code if isinstance(e, NotLeaderError) else error_code(e)


def partition_log(node: Any, topic: str, partition: int) -> Any:
    """The partition's log; a name or number no partition can have is UNKNOWN_TOPIC_OR_PARTITION, as
    Kafka answers for a topic that does not exist (not INVALID_REQUEST)."""
    try:
        tp = TopicPartition(topic, partition)
    except InvalidRequestError:
        raise UnknownTopicOrPartitionError(f"no partition {partition!r} of topic {topic!r}") from None
    return node.log_manager.get_log(tp)


def _topic_partitions(wants: list[_Want]) -> list[TopicPartition]:
    out = []
    for w in wants:
        with contextlib.suppress(InvalidRequestError):
            out.append(TopicPartition(w.topic, w.partition))
    return out


def _read(ctx: RequestContext, wants: list[_Want], max_bytes: int, committed: bool) -> tuple[list[Any], int]:
    """Every partition's PartitionData, and the bytes read in all (blocking: a worker thread)."""
    node = ctx.node
    raw = raw_reader(node)
    leader_cache(node, ctx.cluster).ensure(_topic_partitions(wants))  # the leaders not cached yet, in one query
    out = []
    budget = max_bytes
    first = True
    total = 0
    for w in wants:
        try:
            log = partition_log(node, w.topic, w.partition)
            check_leader(ctx, log.topic_partition, w.leader_epoch)
            limit = max(min(w.max_bytes, budget), 0)
            res = raw.fetch(log, w.offset, limit, committed=committed, min_one=first)
        except Exception as e:  # noqa: BLE001 - every failure is the partition's error code
            out.append(_Partition(partition_index=w.partition, error_code=partition_error(e), high_watermark=-1,
                                  last_stable_offset=-1, log_start_offset=-1, aborted_transactions=None,
                                  records=b""))
            continue
        records = _records(res.chunks)
        if records:
            first = False
            budget -= len(records)
            total += len(records)
        aborted = None if res.aborted is None else [
            _Aborted(producer_id=t.producer_id, first_offset=t.first_offset) for t in res.aborted]
        out.append(_Partition(partition_index=w.partition, error_code=NONE, high_watermark=res.high_watermark,
                              last_stable_offset=res.last_stable_offset, log_start_offset=res.log_start_offset,
                              aborted_transactions=aborted, records=records))
    return out, total


class _Chunks:
    """A partition's stored batches read in several pieces: sent one after the other when the answer is
    spliced (SplicedFetchResponse), joined otherwise; ``len`` is their bytes."""

    __slots__ = ("chunks", "size")

    def __init__(self, chunks: tuple[bytes | memoryview, ...]) -> None:
        self.chunks = chunks
        self.size = sum(len(c) for c in chunks)

    def __len__(self) -> int:
        return self.size

    def __bytes__(self) -> bytes:
        return b"".join(self.chunks)


def _records(chunks: tuple[bytes | memoryview, ...]) -> bytes | memoryview | _Chunks:
    if not chunks:
        return b""
    return chunks[0] if len(chunks) == 1 else _Chunks(chunks)


@kafka_api(FetchRequest, min_version=4, max_version=12)
async def handle_fetch(ctx: RequestContext, request: Any) -> Any:
    # answered later, so the connection's next requests are dispatched while this one long-polls
    return ctx.later(_fetch(ctx, request))


async def _fetch(ctx: RequestContext, request: Any) -> Any:
    wants = [_Want(t.topic, p.partition, p.fetch_offset, p.partition_max_bytes,
                   -1 if p.current_leader_epoch is None else p.current_leader_epoch)
             for t in request.topics or () for p in t.partitions or ()]
    committed = int(request.isolation_level or 0) == 1
    asked = request.max_bytes if request.max_bytes is not None and request.max_bytes >= 0 else FETCH_MAX_BYTES
    max_bytes = min(asked, FETCH_MAX_BYTES)
    loop = asyncio.get_running_loop()
    deadline = loop.time() + max(request.max_wait_ms or 0, 0) / 1000
    min_bytes = request.min_bytes or 0
    tps = _topic_partitions(wants)
    while True:
        remaining = deadline - loop.time()
        waiter = None
        if remaining > 0 and min_bytes > 0 and tps:
            # wait for appends from before the read on: one landing between the read and the
            # wait would otherwise go unnoticed until max_wait_ms
            waiter = asyncio.ensure_future(ctx.wait_for_append(tps, remaining))
            await asyncio.sleep(0)
        try:
            parts, total = await ctx.run(_read, ctx, wants, max_bytes, committed)
        except BaseException:
            if waiter is not None:
                waiter.cancel()
            raise
        if waiter is None or total >= min_bytes or any(p.error_code != NONE for p in parts):
            if waiter is not None:
                waiter.cancel()
            break
        if not await waiter:
            parts, total = await ctx.run(_read, ctx, wants, max_bytes, committed)
            break
    return _response(wants, parts)


def _response(wants: list[_Want], parts: list[Any]) -> Any:
    topics: list[Any] = []
    spliced = False
    for w, part in zip(wants, parts, strict=True):
        if not topics or topics[-1].topic != w.topic:
            topics.append(FetchResponse.FetchableTopicResponse(topic=w.topic, partitions=[]))
        size = len(part.records or b"")
        if size >= SPLICE_MIN_BYTES:
            spliced = True
        elif isinstance(part.records, memoryview | _Chunks):
            part.records = bytes(part.records)
        topics[-1].partitions.append(part)
    response = FetchResponse(throttle_time_ms=0, error_code=NONE, session_id=0, responses=topics)
    return SplicedFetchResponse(response) if spliced else response


class SplicedFetchResponse:
    """A FetchResponse whose large ``records`` are spliced into the encoded message: the generated
    encoder copies a field's bytes twice (into its buffer, then out of it), which for a fetch of
    stored batches costs more CPU than reading them. While encoding, each such partition's
    records are a 16-byte marker (a random prefix and the payload's number), found in order in
    the encoded bytes and replaced, with its length prefix, by the payload. Everything else
    (the fields a metrics collector reads, records included) is the response's own."""

    def __init__(self, response: Any) -> None:
        self.response = response

    def __getattr__(self, name: str) -> Any:
        return getattr(self.response, name)

    def encode(self, version: int | None = None) -> bytes:
        return b"".join(self.encode_pieces(version))

    def encode_pieces(self, version: int | None = None) -> list[bytes | memoryview]:
        """The encoded message as buffers to send one after the other (the stored batches are not copied)."""
        prefix = os.urandom(12)
        swapped: list[tuple[Any, Any]] = []
        try:
            for topic in self.response.responses:
                for part in topic.partitions:
                    if len(part.records or b"") >= SPLICE_MIN_BYTES:
                        swapped.append((part, part.records))
                        part.records = prefix + struct.pack(">I", len(swapped))
            body = self.response.encode(version=version)
        finally:
            for part, records in swapped:
                part.records = records
        flexible = bool(FetchResponse.flexible_version_q(self.response.API_VERSION))
        pieces: list[bytes | memoryview] = []
        view = memoryview(body)
        pos = 0
        for n, (_part, data) in enumerate(swapped, 1):
            at = body.index(prefix + struct.pack(">I", n), pos)
            if flexible:  # COMPACT_BYTES: uvarint(length + 1), 0x11 for the 16-byte marker
                pieces += [view[pos:at - 1], encode_uvarint(len(data) + 1)]
            else:  # BYTES: int32 length
                pieces += [view[pos:at - 4], struct.pack(">i", len(data))]
            pieces += data.chunks if isinstance(data, _Chunks) else (data,)
            pos = at + _MARKER_BYTES
        pieces.append(view[pos:])
        return pieces
