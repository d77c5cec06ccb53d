"""Request and response models of the HTTP API (shared/API.md), the only pydantic besides config.

Requests forbid unknown fields, so a typo (``"partition"`` for ``"partitions"``) is a 422
naming the field instead of a silently ignored setting. Keys, values and header values
are strings in the request's ``encoding`` (``utf-8`` or ``base64``); decoding them is the
route's job, so a bad base64 string is reported with the record it belongs to.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

Encoding = Literal["utf-8", "base64"]


class _Request(BaseModel):
    model_config = ConfigDict(extra="forbid")


class TopicCreate(_Request):
    name: str = Field(description="Topic name: 1-249 characters from [a-zA-Z0-9._-], not '.' or '..'.")
    partitions: int = Field(1, description="Number of partitions.")
    config: dict[str, Any] = Field(default_factory=dict, description="Topic config overrides (Kafka names).")


class TopicConfigPatch(_Request):
    config: dict[str, Any] = Field(description="Keys to set; a null value resets a key to its default.")


class Topic(BaseModel):
    name: str
    partitions: int
    config: dict[str, Any]


class Header(_Request):
    key: str
    value: str | None = None


class RecordIn(_Request):
    key: str | None = None
    value: str | None = None
    timestamp: int | None = Field(None, description="Epoch ms; default: the append time.")
    headers: list[Header] = Field(default_factory=list)


class Producer(_Request):
    id: int = Field(ge=0)
    epoch: int = Field(ge=0, le=32767)
    base_sequence: int = Field(ge=0, le=2**31 - 1)
    transactional: bool = False


class ProduceRequest(_Request):
    records: list[RecordIn]
    encoding: Encoding = "utf-8"
    compression: Literal["none", "gzip", "snappy", "lz4", "zstd"] = "none"
    producer: Producer | None = None


class ProduceResponse(BaseModel):
    base_offset: int
    last_offset: int
    duplicate: bool = False


class MarkerRequest(_Request):
    producer_id: int = Field(ge=0)
    producer_epoch: int = Field(ge=0, le=32767)
    type: Literal["commit", "abort"]


class MarkerResponse(BaseModel):
    offset: int


class HeaderOut(BaseModel):
    key: str
    value: str | None


class RecordOut(BaseModel):
    offset: int
    key: str | None
    value: str | None
    timestamp: int
    headers: list[HeaderOut]


class FetchResponse(BaseModel):
    records: list[RecordOut]
    next_offset: int
    log_start_offset: int
    high_watermark: int


class Segment(BaseModel):
    base_offset: int
    end_offset: int
    size_bytes: int
    tier: Literal["local", "remote", "both"]
    segment_id: str | None = None
    state: str | None = None
    max_timestamp: int


class Partition(BaseModel):
    """A partition. An offline one (its files could not be loaded) has ``state`` "offline",
    the reason and what to do in ``error``, and null offsets, ratios and sizes."""

    topic: str
    partition: int
    state: Literal["online", "offline"] = "online"
    error: str | None = None
    log_start_offset: int | None
    log_end_offset: int | None
    last_stable_offset: int | None
    high_watermark: int | None
    leader_epoch: int | None
    cleaner_checkpoint: int | None
    dirty_ratio: float | None
    must_clean_ratio: float | None
    local_size_bytes: int | None
    remote_size_bytes: int | None
    segments: list[Segment]


class RollResponse(BaseModel):
    base_offset: int


class TierResponse(BaseModel):
    copied: list[Any]
    deleted_local: list[Any]


class LeadershipRequest(_Request):
    leader_epoch: int = Field(ge=0)
    broker_id: int = Field(ge=0)


class JobAccepted(BaseModel):
    job_id: str


class Job(BaseModel):
    job_id: str
    state: Literal["pending", "running", "succeeded", "failed"]
    topic: str
    partition: int
    stats: dict[str, Any] | None = None
    error: str | None = None


class CleanerStatus(BaseModel):
    threads: int
    dead_threads: int
    uncleanable_partitions: list[str]
    uncleanable_reasons: dict[str, str] = Field(
        default_factory=dict, description="Why a partition was marked uncleanable, where known (for a corrupt "
                                          "batch: the file or object and the byte position).")
    last_runs: list[dict[str, Any]]


class Health(BaseModel):
    status: Literal["ok"]


class Error(BaseModel):
    error: str
