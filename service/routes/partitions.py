"""/v1/topics/{topic}/partitions/{p}: produce, markers, read, describe, roll, tier, clean, leadership."""

from __future__ import annotations

from typing import Annotated, Any, Literal

import orjson
from fastapi import APIRouter, Query
from fastapi.responses import JSONResponse, Response
from starlette.concurrency import run_in_threadpool

from log.local_log import RecordSpec
from service.errors import PartitionUnwritableError
from service.node import Node, decode_field, encode_field
from service.routes.deps import READ, WRITE, NodeDep, PartitionPath, TopicPath
from service.schemas import (
    INT32_MAX,
    INT64_MAX,
    Error,
    FetchResponse,
    JobAccepted,
    LeadershipRequest,
    MarkerRequest,
    MarkerResponse,
    Partition,
    ProduceRequest,
    ProduceResponse,
    RollResponse,
    TierResponse,
    in_range,
    range_schema,
)

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


def _append(node: Node, topic: str, partition: int, body: ProduceRequest) -> Response:
    """The produce request's work, on a threadpool thread: decode the keys, values and
    headers (a 400 names the record of bad base64), append one batch, encode the answer."""
    check_writable(node, topic, partition)
    enc = body.encoding
    specs: list[RecordSpec] = []
    append = specs.append
    for i, r in enumerate(body.records):
        key, value, headers = r.get("key"), r.get("value"), r.get("headers")
        if enc == "utf-8":  # the common case, inline: Text already checked the strings encode
            kb = None if key is None else key.encode("utf-8")
            vb = None if value is None else value.encode("utf-8")
        else:
            kb = decode_field(key, enc, f"records[{i}].key")
            vb = decode_field(value, enc, f"records[{i}].value")
        hs: tuple[tuple[str, bytes | None], ...] = ()
        if headers:
            hs = tuple((h["key"], decode_field(h.get("value"), enc, f"records[{i}].headers[{j}].value"))
                       for j, h in enumerate(headers))
        append(RecordSpec(kb, vb, r.get("timestamp"), hs))
    p = body.producer
    res = node.produce(topic, partition, specs, compression=body.compression,
                       producer_id=p.id if p else -1, producer_epoch=p.epoch if p else -1,
                       base_sequence=p.base_sequence if p else -1, transactional=p.transactional if p else False)
    return _json({"base_offset": res.base_offset, "last_offset": res.last_offset, "duplicate": res.duplicate})


@router.post("/records", response_model=ProduceResponse, dependencies=WRITE)
async def produce(topic: TopicPath, partition: PartitionPath, body: ProduceRequest, node: NodeDep) -> Response:
    # async with one hop to the threadpool for the whole append: the body was parsed and
    # checked by pydantic on the event loop (records as plain dicts, see schemas.RecordIn)
    return await run_in_threadpool(_append, node, topic, partition, body)


@router.post("/markers", response_model=MarkerResponse, dependencies=WRITE)
def append_marker(topic: TopicPath, partition: PartitionPath, body: MarkerRequest, node: NodeDep) -> dict:
    check_writable(node, topic, partition)
    return {"offset": node.append_marker(topic, partition, body.producer_id, body.producer_epoch, body.type)}


def _read_page(node: Node, topic: str, partition: int, offset: int, max_records: int, isolation: str,
               encoding: str) -> Response:
    """One page of records, read and encoded on a threadpool thread."""
    res = node.read(topic, partition, offset, max_records=max_records, isolation=isolation)
    out: list[dict[str, Any]] = []
    append = out.append
    utf8 = encoding == "utf-8"
    for r in res.records:
        o, key, value = r.offset, r.key, r.value
        if utf8:
            # the common case, inline; bytes that are not UTF-8 get encode_field's message
            try:
                ks = None if key is None else key.decode("utf-8")
                vs = None if value is None else value.decode("utf-8")
            except UnicodeDecodeError:
                ks = encode_field(key, encoding, f"the key at offset {o}")
                vs = encode_field(value, encoding, f"the value at offset {o}")
        else:
            ks = encode_field(key, encoding, f"the key at offset {o}")
            vs = encode_field(value, encoding, f"the value at offset {o}")
        append({"offset": o, "key": ks, "value": vs, "timestamp": r.timestamp,
                "headers": [{"key": k, "value": encode_field(v, encoding, f"header {k!r} at offset {o}")}
                            for k, v in r.headers] if r.headers else []})
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
          dry_run: bool = False) -> Any:
    """One cleaning round now (ignores min.cleanable.dirty.ratio); wait=false runs it as a job;
    dry_run=true answers the round's plan (a DryRunPlan) and changes nothing."""
    if dry_run:
        from cleaner.dry_run import dry_run as plan_round_now
        from service.schemas import DryRunPlan

        return DryRunPlan.model_validate(plan_round_now(node.cleaner, node.log(topic, partition).topic_partition))
    if not wait:
        return JSONResponse({"job_id": node.submit_clean(topic, partition)}, status_code=202)
    return node.clean(topic, partition)


@router.post("/tier", response_model=TierResponse, dependencies=WRITE)
def tier(topic: TopicPath, partition: PartitionPath, node: NodeDep) -> dict:
    """Copy rolled segments to the object store now and apply local retention."""
    return node.tier(topic, partition)


@router.post("/leadership", response_model=Partition, dependencies=WRITE)
def leadership(topic: TopicPath, partition: PartitionPath, body: LeadershipRequest, node: NodeDep) -> dict:
    """Move leadership to ``broker_id`` at ``leader_epoch``; older epochs are fenced from then on."""
    return node.become_leader(topic, partition, body.leader_epoch, body.broker_id)
