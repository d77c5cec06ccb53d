"""/v1/topics/{topic}/partitions/{p}: produce, markers, read, describe, roll, tier, clean, delete-records, leadership."""

from __future__ import annotations

import re
from typing import Annotated, Any, Literal, get_args

import orjson
from fastapi import APIRouter, Query, Request
from fastapi.responses import JSONResponse, Response
from pydantic import ValidationError
from starlette.concurrency import run_in_threadpool
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from log.batch_validation import check_keys_for_compaction
from log.errors import TiercompactError
from log.local_log import RecordSpec
from service.auth import check_token
from service.errors import PartitionUnwritableError
from service.fields import decode_field, encode_field
from service.node import Node
from service.request_threads import RequestThreads
from service.routes.deps import READ, WRITE, NodeDep, PartitionPath, TopicPath
from service.schemas import (
    INT32_MAX,
    INT64_MAX,
    DeleteRecordsRequest,
    DeleteRecordsResponse,
    Error,
    FetchResponse,
    JobAccepted,
    LeadershipRequest,
    MarkerRequest,
    MarkerResponse,
    ParsedProduceRequest,
    Partition,
    ProduceRequest,
    ProduceResponse,
    RollResponse,
    TierResponse,
    in_range,
    range_schema,
)

#: how long POST .../clean?wait=true waits for its round before answering 202 with the job it goes on as
DEFAULT_CLEAN_WAIT_S = 60.0

router = APIRouter(prefix="/v1/topics/{topic}/partitions/{partition}", tags=["partitions"],
                   responses={400: {"model": Error}, 401: {"model": Error}, 403: {"model": Error},
                              404: {"model": Error}, 409: {"model": Error}, 413: {"model": Error}})


def check_writable(node: Node, topic: str, partition: int) -> None:
    """Refuse appends, with the repair, to a partition whose stored leader epoch no batch can carry.

    Versions before the int32 bound on POST .../leadership stored any epoch; a batch's
    partitionLeaderEpoch is an int32, so every append then failed deep in the write path
    (``struct.error``, a bare 500) on every request and after every restart.
    """
    log = node.log(topic, partition)
    epoch = log.leader_epoch
    if epoch > INT32_MAX:
        raise PartitionUnwritableError(
            f"partition {log.topic_partition} is at leader epoch {epoch}, above Kafka's int32 maximum {INT32_MAX} "
            f"(an older tiercompact accepted it); no record batch can carry it, so the partition takes no writes. "
            f"Reads still work. To repair: copy the records out with GET .../records, then DELETE the topic and "
            f"create it again; or stop the node, remove the lines with epochs above {INT32_MAX} from "
            f"{log.dir / 'leader-epoch-checkpoint'} and the partition's leader-epoch rows above it from the "
            f"metadata store, and restart")


def _json(payload: Any) -> Response:
    """A JSON response rendered once, here, with orjson: the hot routes return their answer
    already encoded, so FastAPI neither validates it against the response model again nor
    re-encodes it (the models stay the documented schema). The same JSON as FastAPI's own
    JSONResponse (compact, UTF-8 unescaped), about ten times faster for a page of records."""
    return Response(orjson.dumps(payload), media_type="application/json")


def _headers(headers: list[Any], enc: str, i: int) -> tuple[tuple[str, bytes | None], ...]:
    return tuple((h["key"], decode_field(h.get("value"), enc, f"records[{i}].headers[{j}].value"))
                 for j, h in enumerate(headers))


def _append(node: Node, topic: str, partition: int, body: ProduceRequest) -> Response:
    """The produce request's work, on a threadpool thread: decode the keys, values and
    headers (a 400 names the record of bad base64), append one batch, encode the answer."""
    check_writable(node, topic, partition)
    enc = body.encoding
    records = body.records
    p = body.producer
    producer: dict[str, Any] = {"producer_id": p.id, "producer_epoch": p.epoch, "base_sequence": p.base_sequence,
                                "transactional": p.transactional} if p else {}
    if enc == "utf-8" and not any(r.get("headers") for r in records):
        # the common case: utf-8 keys and values without headers, decoded as columns (no
        # RecordSpec per record); Text already checked that the strings encode
        keys = [None if (k := r.get("key")) is None else k.encode() for r in records]
        values = [None if (v := r.get("value")) is None else v.encode() for r in records]
        timestamps = [r.get("timestamp") for r in records]
        _check_keys(node, topic, partition, keys)
        res = node.produce_columns(topic, partition, keys, values,
                                   None if timestamps.count(None) == len(timestamps) else timestamps,
                                   compression=body.compression, **producer)
    else:
        specs = [RecordSpec(decode_field(r.get("key"), enc, f"records[{i}].key"),
                            decode_field(r.get("value"), enc, f"records[{i}].value"),
                            r.get("timestamp"), _headers(r["headers"], enc, i) if r.get("headers") else ())
                 for i, r in enumerate(records)]
        _check_keys(node, topic, partition, [r.key for r in specs])
        res = node.produce(topic, partition, specs, compression=body.compression, **producer)
    return _produced(res)


def _check_keys(node: Node, topic: str, partition: int, keys: list[bytes | None]) -> None:
    """A record without a key on a compacted topic is refused with 422, as Kafka refuses it
    (INVALID_RECORD): compaction has nothing to keep it by."""
    log = node.log(topic, partition)
    check_keys_for_compaction(keys, log.config, str(log.topic_partition))


def _produced(res: Any) -> Response:
    """The answer to an append: where its records landed, or that it was a duplicate."""
    return _json({"base_offset": res.base_offset, "last_offset": res.last_offset, "duplicate": res.duplicate})


def _append_columns(node: Node, topic: str, partition: int, keys: list[bytes | None], values: list[bytes | None],
                    compression: str) -> Response:
    """:func:`_append` for a body :func:`plain_columns` decoded (utf-8 keys and values only)."""
    check_writable(node, topic, partition)
    _check_keys(node, topic, partition, keys)
    res = node.produce_columns(topic, partition, keys, values, None, compression=compression)
    return _produced(res)


_PLAIN_BODY = frozenset(("records", "encoding", "compression"))
_PLAIN_RECORD = frozenset(("key", "value"))
_COMPRESSIONS = frozenset(get_args(ProduceRequest.model_fields["compression"].annotation))


def plain_columns(doc: Any) -> tuple[list[bytes | None], list[bytes | None], str] | None:
    """The keys, values and compression of a parsed produce body that holds only records of
    a string-or-null ``key`` and ``value`` (and at most ``"encoding": "utf-8"`` and a
    ``compression``): exactly what :class:`ProduceRequest` accepts and :func:`_append` decodes
    for such a body, without the model (about 20 us less per 100 records). None for every
    other body, which the model then checks (tests/service/test_parsed_produce_request.py)."""
    if type(doc) is not dict or not doc.keys() <= _PLAIN_BODY:
        return None
    records = doc.get("records")
    compression = doc.get("compression", "none")
    if (type(records) is not list or doc.get("encoding", "utf-8") != "utf-8" or type(compression) is not str
            or compression not in _COMPRESSIONS):
        return None
    keys: list[bytes | None] = []
    values: list[bytes | None] = []
    add_key, add_value = keys.append, values.append
    for r in records:
        if type(r) is not dict or not r.keys() <= _PLAIN_RECORD:
            return None
        k = r.get("key")
        v = r.get("value")
        if k is None:
            add_key(None)
        elif type(k) is str:
            add_key(k.encode())
        else:
            return None
        if v is None:
            add_value(None)
        elif type(v) is str:
            add_value(v.encode())
        else:
            return None
    return keys, values, compression


@router.post("/records", response_model=ProduceResponse, dependencies=WRITE)
async def produce(topic: TopicPath, partition: PartitionPath, body: ProduceRequest, node: NodeDep) -> Response:
    # async with one hop to the threadpool for the whole append: the body was parsed and
    # checked by pydantic on the event loop (records as plain dicts, see schemas.RecordIn)
    return await run_in_threadpool(_append, node, topic, partition, body)


@router.post("/markers", response_model=MarkerResponse, dependencies=WRITE)
def append_marker(topic: TopicPath, partition: PartitionPath, body: MarkerRequest, node: NodeDep) -> dict:
    check_writable(node, topic, partition)
    return {"offset": node.append_marker(topic, partition, body.producer_id, body.producer_epoch, body.type)}


#: the ``headers`` of every record without any (orjson only reads it)
_NO_HEADERS: list[Any] = []


def _headers_out(headers: tuple[tuple[str, bytes | None], ...], o: int, encoding: str) -> list[dict[str, Any]]:
    return [{"key": k, "value": encode_field(v, encoding, f"header {k!r} at offset {o}")} for k, v in headers]


def _read_page(node: Node, topic: str, partition: int, offset: int, max_records: int, isolation: str,
               encoding: str) -> Response:
    """One page of records, read and encoded on a threadpool thread."""
    res = node.read(topic, partition, offset, max_records=max_records, isolation=isolation)
    # the records' fields (offset, timestamp, key, value, headers, sequence): no Record objects
    fields = res.fields
    out: list[dict[str, Any]] | None = None
    if encoding == "utf-8":
        try:
            # the common case in one comprehension; bytes that are not UTF-8 are found again
            # below, record by record, with encode_field's message
            out = [{"offset": o, "key": None if k is None else k.decode(), "value": None if v is None else v.decode(),
                    "timestamp": ts, "headers": _headers_out(h, o, encoding) if h else _NO_HEADERS}
                   for o, ts, k, v, h, _seq in fields]
        except UnicodeDecodeError:
            out = None
    if out is None:
        out = [{"offset": o, "key": encode_field(k, encoding, f"the key at offset {o}"),
                "value": encode_field(v, encoding, f"the value at offset {o}"), "timestamp": ts,
                "headers": _headers_out(h, o, encoding) if h else _NO_HEADERS}
               for o, ts, k, v, h, _seq in fields]
    return _json({"records": out, "next_offset": res.next_offset, "log_start_offset": res.log_start_offset,
                  "high_watermark": res.high_watermark})


@router.get("/records", response_model=FetchResponse, dependencies=READ)
async def read_records(topic: TopicPath, partition: PartitionPath, node: NodeDep,
                       offset: Annotated[int, Query(description=f"First offset to read (0..{INT64_MAX}).",
                                                    json_schema_extra=range_schema(0, INT64_MAX)),
                                         in_range(0, INT64_MAX, "Kafka int64")] = 0,
                       max_records: Annotated[int, Query(description="Most records to return (the node's "
                                                                     "max_fetch_records bounds it further).",
                                                         json_schema_extra=range_schema(1, INT32_MAX)),
                                              in_range(1, INT32_MAX, "Kafka int32")] = 500,
                       isolation: Literal["read_uncommitted", "read_committed"] = "read_uncommitted",
                       encoding: Literal["utf-8", "base64"] = "utf-8") -> Response:
    # async with one hop to the threadpool for the read and the encoding of the page
    return await run_in_threadpool(_read_page, node, topic, partition, offset, max_records, isolation, encoding)


@router.get("", response_model=Partition, dependencies=READ)
def describe_partition(topic: TopicPath, partition: PartitionPath, node: NodeDep) -> dict:
    return node.partition_info(topic, partition)


@router.post("/roll", response_model=RollResponse, dependencies=WRITE)
def roll(topic: TopicPath, partition: PartitionPath, node: NodeDep) -> dict:
    return {"base_offset": node.roll(topic, partition)}


@router.post("/clean", dependencies=WRITE, status_code=200,
             responses={200: {"description": "cleaner stats"}, 202: {"model": JobAccepted}})
def clean(topic: TopicPath, partition: PartitionPath, node: NodeDep, wait: bool = True,
          timeout_s: Annotated[float, Query(gt=0, le=86_400)] = DEFAULT_CLEAN_WAIT_S, dry_run: bool = False) -> Any:
    """One cleaning round now (ignores min.cleanable.dirty.ratio); wait=false runs it as a job; a waited round that
    takes longer than timeout_s goes on as a job, answered 202 with its id (GET /v1/jobs/{id}); dry_run=true answers
    the round's plan (a DryRunPlan) and changes nothing."""
    if dry_run:
        from cleaner.dry_run import dry_run as plan_round_now
        from service.schemas import DryRunPlan

        return DryRunPlan.model_validate(plan_round_now(node.cleaner, node.log(topic, partition).topic_partition))
    if not wait:
        return JSONResponse({"job_id": node.submit_clean(topic, partition)}, status_code=202)
    stats, job = node.clean_bounded(topic, partition, timeout_s)
    if job is not None:
        return JSONResponse({"job_id": job.job_id, "state": job.state, "timeout_s": timeout_s}, status_code=202)
    return stats


@router.post("/tier", response_model=TierResponse, dependencies=WRITE)
def tier(topic: TopicPath, partition: PartitionPath, node: NodeDep) -> dict:
    """Copy rolled segments to the object store now and apply local retention."""
    return node.tier(topic, partition)


@router.post("/delete-records", response_model=DeleteRecordsResponse, dependencies=WRITE)
def delete_records(topic: TopicPath, partition: PartitionPath, body: DeleteRecordsRequest, node: NodeDep) -> dict:
    """Kafka's DeleteRecords: the records below ``offset`` are deleted (reads below the new log start are out of
    range at once; retention removes the segments below it). Only for cleanup.policy containing delete."""
    return {"log_start_offset": node.delete_records(topic, partition, body.offset)}


@router.post("/leadership", response_model=Partition, dependencies=WRITE)
def leadership(topic: TopicPath, partition: PartitionPath, body: LeadershipRequest, node: NodeDep) -> dict:
    """Move leadership to ``broker_id`` at ``leader_epoch``; older epochs are fenced from then on."""
    return node.become_leader(topic, partition, body.leader_epoch, body.broker_id)


# ---- the fast lane for produce and read ------------------------------------------------------

_QUERY_INT = re.compile(rb"0|[1-9][0-9]{0,18}")
_JSON_TYPES = (b"application/json", b"application/json; charset=utf-8")


class RecordsFastLane:
    """Serve plain produce and read requests without FastAPI's per-request machinery.

    FastAPI's parameter and dependency handling costs about a quarter of a millisecond per
    request, as much as the read itself. This ASGI app, in front of the FastAPI app and its
    middlewares (service/app.py ``TiercompactAPI``), answers the two hot routes,
    ``POST`` and ``GET /v1/topics/{topic}/partitions/{p}/records``, with the same functions the
    routes above use (:func:`_append`, :func:`_read_page`), the same auth check and the same
    request model (:class:`ProduceRequest`, validated as FastAPI validates it; a body of plain
    utf-8 keys and values is decoded by :func:`plain_columns`, which accepts only what the model
    does), but only when the request is plainly valid: canonical in-range numbers, known query
    parameters once each, a JSON body the model accepts. Anything else (a bad number, an
    unknown parameter, a body the model refuses, a token it cannot check) falls through,
    untouched, to the FastAPI app, so every error keeps its exact status and message. Errors
    raised while serving (unknown topic, offset out of range, bad base64 ...) are answered by
    the app's own handler for TiercompactError. tests/service/test_fast_lane.py compares both
    ways request by request.
    """

    def __init__(self, app: ASGIApp, node: Node, handler: Any, threads: RequestThreads,
                 max_body_bytes: int) -> None:
        self.app = app
        self.node = node
        self.handler = handler  # the app's exception handler for TiercompactError
        self.threads = threads  # where each request's blocking work runs (one hop per request)
        # the lane runs in front of BodyLimitMiddleware: it reads only bodies that declare a
        # length within the limit (anything else goes to the app, whose middleware answers)
        self.max_body_bytes = max_body_bytes

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope.get("root_path"):
            return await self.app(scope, receive, send)
        method = scope["method"]
        parts = scope["path"].split("/")
        # ["", "v1", "topics", topic, "partitions", p, "records"]
        if (method not in ("GET", "POST") or len(parts) != 7 or parts[1] != "v1" or parts[2] != "topics"
                or parts[4] != "partitions" or parts[6] != "records" or not parts[3]):
            return await self.app(scope, receive, send)
        p = parts[5].encode()
        if not _QUERY_INT.fullmatch(p) or int(p) > INT32_MAX:
            return await self.app(scope, receive, send)
        topic, partition = parts[3], int(p)
        if method == "GET":
            return await self._read(scope, receive, send, topic, partition)
        return await self._produce(scope, receive, send, topic, partition)

    async def _read(self, scope: Scope, receive: Receive, send: Send, topic: str, partition: int) -> None:
        args: dict[str, Any] = {"offset": 0, "max_records": 500, "isolation": "read_uncommitted",
                                "encoding": "utf-8"}
        seen = set()
        qs = scope.get("query_string", b"")
        for item in qs.split(b"&") if qs else ():
            name, eq, value = item.partition(b"=")
            if not eq or name in seen:
                return await self.app(scope, receive, send)
            seen.add(name)
            if name in (b"offset", b"max_records"):
                if not _QUERY_INT.fullmatch(value):
                    return await self.app(scope, receive, send)
                n = int(value)
                if n > (INT64_MAX if name == b"offset" else INT32_MAX) or (name == b"max_records" and n < 1):
                    return await self.app(scope, receive, send)
                args[name.decode()] = n
            elif name == b"isolation" and value in (b"read_uncommitted", b"read_committed"):
                args["isolation"] = value.decode()
            elif name == b"encoding" and value in (b"utf-8", b"base64"):
                args["encoding"] = value.decode()
            else:
                return await self.app(scope, receive, send)
        request = Request(scope)
        try:
            cfg = self.node.config
            if cfg.auth_reads:
                check_token(request, cfg.token)
            response = await self.threads.run(_read_page, self.node, topic, partition, args["offset"],
                                              args["max_records"], args["isolation"], args["encoding"])
        except TiercompactError as e:
            response = self.handler(request, e)
        await response(scope, receive, send)

    async def _produce(self, scope: Scope, receive: Receive, send: Send, topic: str, partition: int) -> None:
        ctype = length = None
        lengths = 0
        for k, v in scope["headers"]:
            if k == b"content-type":
                if ctype is None:
                    ctype = v
            elif k == b"content-length":
                length = v
                lengths += 1
            elif k == b"transfer-encoding":
                return await self.app(scope, receive, send)
        # a JSON body of one canonical Content-Length within max_request_bytes, or the app's
        # own answer (BodyLimitMiddleware's 400/413, FastAPI's 415 ...)
        if (ctype is None or ctype.lower() not in _JSON_TYPES or lengths != 1 or length is None
                or not _QUERY_INT.fullmatch(length) or int(length) > self.max_body_bytes):
            return await self.app(scope, receive, send)
        chunks: list[bytes] = []
        while True:
            message = await receive()
            if message["type"] != "http.request":  # a disconnect: let the app see it as it would
                return await self.app(scope, _replay(chunks, message, receive), send)
            chunks.append(message.get("body", b""))
            if not message.get("more_body", False):
                break
        replay = _replay(chunks, None, receive)
        request = Request(scope)
        try:
            check_token(request, self.node.config.token)
        except TiercompactError as e:
            return await self.handler(request, e)(scope, receive, send)
        try:
            # orjson accepts a subset of what FastAPI's json.loads accepts (no NaN, no lone
            # surrogates, no integers beyond 64 bits) and yields the same objects for it; the
            # model then validates them exactly as FastAPI would (ParsedProduceRequest: the
            # request model without the per-string Unicode check, which orjson already made),
            # unless the body is plain utf-8 keys and values (plain_columns, the same verdict)
            doc = orjson.loads(b"".join(chunks))
            plain = plain_columns(doc)
            body = ParsedProduceRequest.model_validate(doc) if plain is None else None
        except (orjson.JSONDecodeError, ValidationError):
            return await self.app(scope, replay, send)
        try:
            if plain is not None:
                response = await self.threads.run(_append_columns, self.node, topic, partition, *plain)
            else:
                response = await self.threads.run(_append, self.node, topic, partition, body)
        except TiercompactError as e:
            response = self.handler(request, e)
        await response(scope, receive, send)


def _replay(chunks: list[bytes], last: Message | None, receive: Receive) -> Receive:
    """A receive that gives the app the body already read, then whatever follows."""
    pending: list[Message] = [{"type": "http.request", "body": b"".join(chunks), "more_body": False}]
    if last is not None:
        pending = [last] if not chunks else [{"type": "http.request", "body": b"".join(chunks),
                                              "more_body": True}, last]

    async def replay() -> Message:
        if pending:
            return pending.pop(0)
        return await receive()

    return replay
