"""/v1/topics/{topic}/partitions/{p}: produce, markers, read, describe, roll, tier, clean, leadership."""

from __future__ import annotations

from typing import Annotated, Any, Literal

from fastapi import APIRouter, Query
from fastapi.responses import JSONResponse

from log.local_log import RecordSpec
from service.node import decode_field, encode_field
from service.routes.deps import READ, WRITE, NodeDep, PartitionPath, TopicPath
from service.schemas import (
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
)

router = APIRouter(prefix="/v1/topics/{topic}/partitions/{partition}", tags=["partitions"],
                   responses={400: {"model": Error}, 401: {"model": Error}, 403: {"model": Error},
                              404: {"model": Error}, 409: {"model": Error}, 413: {"model": Error}})


@router.post("/records", response_model=ProduceResponse, dependencies=WRITE)
def produce(topic: TopicPath, partition: PartitionPath, body: ProduceRequest, node: NodeDep) -> dict:
    enc = body.encoding
    specs = []
    for i, r in enumerate(body.records):
        headers = tuple((h.key, decode_field(h.value, enc, f"records[{i}].headers[{j}].value"))
                        for j, h in enumerate(r.headers))
        specs.append(RecordSpec(decode_field(r.key, enc, f"records[{i}].key"),
                                decode_field(r.value, enc, f"records[{i}].value"), r.timestamp, headers))
    p = body.producer
    res = node.produce(topic, partition, specs, compression=body.compression,
                       producer_id=p.id if p else -1, producer_epoch=p.epoch if p else -1,
                       base_sequence=p.base_sequence if p else -1, transactional=p.transactional if p else False)
    return {"base_offset": res.base_offset, "last_offset": res.last_offset, "duplicate": res.duplicate}


@router.post("/markers", response_model=MarkerResponse, dependencies=WRITE)
def append_marker(topic: TopicPath, partition: PartitionPath, body: MarkerRequest, node: NodeDep) -> dict:
    return {"offset": node.append_marker(topic, partition, body.producer_id, body.producer_epoch, body.type)}


@router.get("/records", response_model=FetchResponse, dependencies=READ)
def read_records(topic: TopicPath, partition: PartitionPath, node: NodeDep,
                 offset: Annotated[int, Query(ge=0)] = 0,
                 max_records: Annotated[int, Query(ge=1)] = 500,
                 isolation: Literal["read_uncommitted", "read_committed"] = "read_uncommitted",
                 encoding: Literal["utf-8", "base64"] = "utf-8") -> dict:
    res = node.read(topic, partition, offset, max_records=max_records, isolation=isolation)
    out = []
    for r in res.records:
        out.append({
            "offset": r.offset,
            "key": encode_field(r.key, encoding, f"the key at offset {r.offset}"),
            "value": encode_field(r.value, encoding, f"the value at offset {r.offset}"),
            "timestamp": r.timestamp,
            "headers": [{"key": k, "value": encode_field(v, encoding, f"header {k!r} at offset {r.offset}")}
                        for k, v in r.headers],
        })
    return {"records": out, "next_offset": res.next_offset, "log_start_offset": res.log_start_offset,
            "high_watermark": res.high_watermark}


@router.get("", response_model=Partition, dependencies=READ)
def describe_partition(topic: TopicPath, partition: PartitionPath, node: NodeDep) -> dict:
    return node.partition_info(topic, partition)


@router.post("/roll", response_model=RollResponse, dependencies=WRITE)
def roll(topic: TopicPath, partition: PartitionPath, node: NodeDep) -> dict:
    return {"base_offset": node.roll(topic, partition)}


@router.post("/clean", dependencies=WRITE, status_code=200,
             responses={200: {"description": "cleaner stats"}, 202: {"model": JobAccepted}})
def clean(topic: TopicPath, partition: PartitionPath, node: NodeDep, wait: bool = True) -> Any:
    """One cleaning round now (ignores min.cleanable.dirty.ratio); wait=false runs it as a job."""
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
