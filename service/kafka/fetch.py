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
import os
import struct
import weakref
from dataclasses import dataclass
from typing import Any

from kafka.protocol.consumer import FetchRequest, FetchResponse

from log.types import TopicPartition
from remote.raw_read import RawTieredRead
from service.kafka.errors import NONE, error_code
from service.kafka.registry import RequestContext, kafka_api

_Partition = FetchResponse.FetchableTopicResponse.PartitionData
_Aborted = _Partition.AbortedTransaction
#: records at least this large are spliced into the encoded response (SplicedFetchResponse)
SPLICE_MIN_BYTES = 4096
_MARKER_BYTES = 16


@dataclass(frozen=True, slots=True)
class _Want:
    topic: str
    partition: int
    offset: int
    max_bytes: int


_READERS: weakref.WeakKeyDictionary[Any, RawTieredRead] = weakref.WeakKeyDictionary()


def raw_reader(node: Any) -> RawTieredRead:
    """The node's two-tier raw reader (made once per node)."""
    raw = _READERS.get(node)
    if raw is None:
        raw = _READERS.setdefault(node, RawTieredRead(node.remote.read_path))
    return raw


def check_leader(node: Any, log: Any) -> None:
    """NOT_LEADER_OR_FOLLOWER (NotLeaderForPartitionError) when another node leads the partition."""
    node.check_leader_for_produce(log)


def _read(node: Any, wants: list[_Want], max_bytes: int, committed: bool) -> tuple[list[Any], int]:
    """Every partition's PartitionData, and the bytes read in all (blocking: a worker thread)."""
    raw = raw_reader(node)
    out = []
    budget = max_bytes
    first = True
    total = 0
    for w in wants:
        try:
            log = node.log(w.topic, w.partition)
            check_leader(node, log)
            limit = max(min(w.max_bytes, budget), 0)
            res = raw.fetch(log, w.offset, limit, committed=committed, min_one=first)
        except Exception as e:  # noqa: BLE001 - every failure is the partition's error code
            out.append(_Partition(partition_index=w.partition, error_code=error_code(e), high_watermark=-1,
                                  last_stable_offset=-1, log_start_offset=-1, aborted_transactions=None,
                                  records=b""))
            continue
        if res.data:
            first = False
            budget -= len(res.data)
            total += len(res.data)
        aborted = None if res.aborted is None else [
            _Aborted(producer_id=t.producer_id, first_offset=t.first_offset) for t in res.aborted]
        out.append(_Partition(partition_index=w.partition, error_code=NONE, high_watermark=res.high_watermark,
                              last_stable_offset=res.last_stable_offset, log_start_offset=res.log_start_offset,
                              aborted_transactions=aborted, records=res.data))
    return out, total


@kafka_api(FetchRequest, min_version=4, max_version=12)
async def handle_fetch(ctx: RequestContext, request: Any) -> Any:
    # answered later, so the connection's next requests are dispatched while this one long-polls
    return ctx.later(_fetch(ctx, request))


async def _fetch(ctx: RequestContext, request: Any) -> Any:
    wants = [_Want(t.topic, p.partition, p.fetch_offset, p.partition_max_bytes)
             for t in request.topics or () for p in t.partitions or ()]
    committed = int(request.isolation_level or 0) == 1
    max_bytes = request.max_bytes if request.max_bytes is not None and request.max_bytes >= 0 else 2**31 - 1
    loop = asyncio.get_running_loop()
    deadline = loop.time() + max(request.max_wait_ms or 0, 0) / 1000
    tps = [TopicPartition(w.topic, w.partition) for w in wants]
    while True:
        parts, total = await ctx.run(_read, ctx.node, wants, max_bytes, committed)
        remaining = deadline - loop.time()
        if (total >= (request.min_bytes or 0) or remaining <= 0 or not wants
                or any(p.error_code != NONE for p in parts)):
            break
        if not await ctx.wait_for_append(tps, remaining):
            parts, total = await ctx.run(_read, ctx.node, wants, max_bytes, committed)
            break
    return _response(wants, parts)


def _response(wants: list[_Want], parts: list[Any]) -> Any:
    topics: list[Any] = []
    payloads: list[bytes | memoryview] = []
    prefix = os.urandom(12)
    for w, part in zip(wants, parts, strict=True):
        if not topics or topics[-1].topic != w.topic:
            topics.append(FetchResponse.FetchableTopicResponse(topic=w.topic, partitions=[]))
        if len(part.records or b"") >= SPLICE_MIN_BYTES:
            payloads.append(part.records)
            part.records = prefix + struct.pack(">I", len(payloads))
        elif isinstance(part.records, memoryview):
            part.records = bytes(part.records)
        topics[-1].partitions.append(part)
    response = FetchResponse(throttle_time_ms=0, error_code=NONE, session_id=0, responses=topics)
    return SplicedFetchResponse(response, prefix, payloads) if payloads else response


class SplicedFetchResponse:
    """A FetchResponse whose large ``records`` are spliced into the encoded message: the generated
    encoder copies a field's bytes twice (into its buffer, then out of it), which for a fetch of
    stored batches costs more CPU than reading them. Each partition's records are encoded as a
    16-byte marker (a random prefix and the payload's number), found in order in the encoded
    bytes and replaced, with its length prefix, by the payload. Anything else is the response's."""

    def __init__(self, response: Any, prefix: bytes, payloads: list[bytes | memoryview]) -> None:
        self.response = response
        self._prefix = prefix
        self._payloads = payloads

    def __getattr__(self, name: str) -> Any:
        return getattr(self.response, name)

    def encode(self, version: int | None = None) -> bytes:
        body = self.response.encode(version=version)
        flexible = bool(FetchResponse.flexible_version_q(self.response.API_VERSION))
        pieces: list[bytes | memoryview] = []
        view = memoryview(body)
        pos = 0
        for n, data in enumerate(self._payloads, 1):
            at = body.index(self._prefix + struct.pack(">I", n), pos)
            if flexible:  # COMPACT_BYTES: uvarint(length + 1), 0x11 for the 16-byte marker
                pieces += [view[pos:at - 1], _uvarint(len(data) + 1)]
            else:  # BYTES: int32 length
                pieces += [view[pos:at - 4], struct.pack(">i", len(data))]
            pieces.append(data)
            pos = at + _MARKER_BYTES
        pieces.append(view[pos:])
        return b"".join(pieces)


def _uvarint(n: int) -> bytes:
    out = bytearray()
    while n >= 0x80:
        out.append((n & 0x7F) | 0x80)
        n >>= 7
    out.append(n)
    return bytes(out)
