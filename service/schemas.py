"""Request and response models of the HTTP API (shared/API.md), the only pydantic besides config.

Requests forbid unknown fields, so a typo (``"partition"`` for ``"partitions"``) is a 422
naming the field instead of a silently ignored setting. Keys, values and header values
are strings in the request's ``encoding`` (``utf-8`` or ``base64``); decoding them is the
route's job, so a bad base64 string is reported with the record it belongs to.

Every integer a request carries is bounded by the Kafka type it ends up in on disk or in
the metadata store (leader epoch and broker id int32, producer id int64, producer epoch
int16, base sequence int32, timestamps int64): an out-of-range value is a 422 that names
the field and its range, never an overflow deep in the write path (``struct.error``) or a
value that makes the partition unwritable for good. The bounds are also in the OpenAPI
schema (``minimum``/``maximum``).
"""

from __future__ import annotations

from typing import Annotated, Any, Literal, NotRequired

from pydantic import AfterValidator, BaseModel, ConfigDict, Field, model_validator, with_config
from typing_extensions import TypedDict  # pydantic needs typing_extensions' TypedDict on 3.11

from log.log_manager import MAX_PARTITIONS
from service.errors import NOT_UNICODE, OUT_OF_RANGE

Encoding = Literal["utf-8", "base64"]

INT16_MAX = 2**15 - 1
INT32_MAX = 2**31 - 1
INT64_MAX = 2**63 - 1
#: Kafka's RecordBatch.NO_TIMESTAMP
NO_TIMESTAMP = -1


def in_range(lo: int, hi: int, kafka_type: str) -> AfterValidator:
    """Bound an int to ``lo..hi`` with an error naming the range and the Kafka type.

    pydantic's own ``ge``/``le`` would say only "less than or equal to 2147483647"; this
    says ``must be 0..2147483647 (Kafka int32)``. :func:`_doc` puts the same bounds in the
    OpenAPI schema.
    """

    def check(v: int) -> int:
        if not lo <= v <= hi:
            raise ValueError(f"{v} {OUT_OF_RANGE}: must be {lo}..{hi} ({kafka_type})")
        return v

    return AfterValidator(check)


def range_schema(lo: int, hi: int) -> dict[str, Any]:
    """OpenAPI bounds: ``format`` int32/int64 names the width, and ``maximum`` is given only
    where a float holds it exactly (FastAPI's OpenAPI model stores bounds as floats, and
    2^63-1 would round up to 2^63, a value the API refuses)."""
    out: dict[str, Any] = {"minimum": lo, "format": "int32" if -(2**31) <= lo and hi <= INT32_MAX else "int64"}
    if hi < 2**53:
        out["maximum"] = hi
    return out


def _doc(lo: int, hi: int, kafka_type: str, description: str) -> Any:
    return Field(description=f"{description} ({lo}..{hi}, {kafka_type}).", json_schema_extra=range_schema(lo, hi))


LeaderEpoch = Annotated[int, in_range(0, INT32_MAX, "Kafka int32"),
                        _doc(0, INT32_MAX, "Kafka int32", "Leader epoch")]
BrokerId = Annotated[int, in_range(0, INT32_MAX, "Kafka int32"), _doc(0, INT32_MAX, "Kafka int32", "Broker id")]
ProducerId = Annotated[int, in_range(0, INT64_MAX, "Kafka int64"), _doc(0, INT64_MAX, "Kafka int64", "Producer id")]
ProducerEpoch = Annotated[int, in_range(0, INT16_MAX, "Kafka int16"),
                          _doc(0, INT16_MAX, "Kafka int16", "Producer epoch")]
BaseSequence = Annotated[int, in_range(0, INT32_MAX, "Kafka int32"),
                         _doc(0, INT32_MAX, "Kafka int32", "Sequence number of the first record")]
Timestamp = Annotated[int, in_range(NO_TIMESTAMP, INT64_MAX, "Kafka int64, -1 = no timestamp"),
                      _doc(NO_TIMESTAMP, INT64_MAX, "Kafka int64", "Epoch ms; default: the append time")]
PartitionCount = Annotated[int, in_range(1, MAX_PARTITIONS, "partitions per topic"),
                           _doc(1, MAX_PARTITIONS, "partitions per topic", "Number of partitions")]


class _Request(BaseModel):
    model_config = ConfigDict(extra="forbid")


class TopicCreate(_Request):
    name: str = Field(description="Topic name: 1-249 characters from [a-zA-Z0-9._-], not '.' or '..'.")
    partitions: PartitionCount | None = Field(None, description="Number of partitions (default: the node's "
                                                                "num_partitions option, 1 unless set).")
    config: dict[str, Any] = Field(default_factory=dict, description="Topic config overrides (Kafka names).")


class TopicConfigPatch(_Request):
    config: dict[str, Any] = Field(description="Keys to set; a null value resets a key to its default.")


class Topic(BaseModel):
    name: str
    partitions: int
    config: dict[str, Any]


def _unicode_text(v: str) -> str:
    """JSON can carry lone surrogates (``"\ud800"``) that no UTF-8 encoder accepts; say so
    here instead of failing with UnicodeEncodeError (a 500) when the record is built."""
    try:
        v.encode("utf-8")
    except UnicodeEncodeError as e:
        raise ValueError(f"{NOT_UNICODE}: it holds a lone surrogate \\u{ord(v[e.start]):04x} at position "
                         f"{e.start}; send valid UTF-8 text, or bytes with \"encoding\": \"base64\"") from None
    return v


#: a key, value or header string: valid Unicode (UTF-8 encodable), or base64 with encoding=base64
Text = Annotated[str, AfterValidator(_unicode_text)]


# A produce request's records and headers are TypedDicts, not models: pydantic checks them
# just as strictly (unknown fields refused, the same error locations) but hands back plain
# dicts, so a request of many records builds no model object per record. A missing
# optional field is simply absent (read it with .get).
@with_config(ConfigDict(extra="forbid"))
class Header(TypedDict):
    key: Text
    value: NotRequired[Text | None]


@with_config(ConfigDict(extra="forbid"))
class RecordIn(TypedDict):
    key: NotRequired[Text | None]
    value: NotRequired[Text | None]
    timestamp: NotRequired[Timestamp | None]
    headers: NotRequired[list[Header]]


class Producer(_Request):
    id: ProducerId
    epoch: ProducerEpoch
    base_sequence: BaseSequence
    transactional: bool = False


class ProduceRequest(_Request):
    records: list[RecordIn]
    encoding: Encoding = "utf-8"
    compression: Literal["none", "gzip", "snappy", "lz4", "zstd"] = "none"
    producer: Producer | None = None

    @model_validator(mode="after")
    def _timestamp_deltas_fit(self) -> ProduceRequest:
        # a batch stores each record's timestamp as a delta from the first one (varlong): the
        # spread of one request's timestamps must fit in an int64 too
        given = [t for r in self.records if (t := r.get("timestamp")) is not None]
        if given and max(given) - min(given) > INT64_MAX:
            raise ValueError(f"records' timestamps span {min(given)}..{max(given)}: their difference is out "
                             f"of range for one batch (must be at most {INT64_MAX}, Kafka int64); send them "
                             f"in separate requests")
        return self


# The same request for a body orjson parsed (service/routes/partitions.py RecordsFastLane):
# orjson refuses lone surrogates (escaped or raw), so every string it returns is valid
# Unicode and Text's check, a Python call per key and value, cannot fail; these types are
# Text-free copies of the ones above (same fields, bounds and titles) and accept exactly what
# ProduceRequest accepts from such input (tests/service/test_parsed_produce_request.py).
@with_config(ConfigDict(extra="forbid", title="Header"))
class ParsedHeader(TypedDict):
    key: str
    value: NotRequired[str | None]


@with_config(ConfigDict(extra="forbid", title="RecordIn"))
class ParsedRecordIn(TypedDict):
    key: NotRequired[str | None]
    value: NotRequired[str | None]
    timestamp: NotRequired[Timestamp | None]
    headers: NotRequired[list[ParsedHeader]]


class ParsedProduceRequest(ProduceRequest):
    """:class:`ProduceRequest` for a body parsed by orjson (strings known to be valid Unicode)."""

    model_config = ConfigDict(title="ProduceRequest")

    records: list[ParsedRecordIn]  # type: ignore[assignment]


class ProduceResponse(BaseModel):
    base_offset: int
    last_offset: int
    duplicate: bool = False


class MarkerRequest(_Request):
    producer_id: ProducerId
    producer_epoch: ProducerEpoch
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


class DeleteRecordsRequest(_Request):
    offset: Annotated[int, in_range(-1, INT64_MAX, "Kafka int64, -1 = the high watermark"),
                      _doc(-1, INT64_MAX, "Kafka int64",
                           "Records below this offset are deleted; -1: every record below the high watermark")]


class DeleteRecordsResponse(BaseModel):
    log_start_offset: int


class LeadershipRequest(_Request):
    leader_epoch: LeaderEpoch
    broker_id: BrokerId


class JobAccepted(BaseModel):
    job_id: str
    #: a waited clean past its timeout_s: the job's state then ("running") and the bound it waited
    state: str | None = None
    timeout_s: float | None = None


class Job(BaseModel):
    job_id: str
    state: Literal["pending", "running", "succeeded", "failed"]
    topic: str
    partition: int
    stats: dict[str, Any] | None = None
    error: str | None = None
    kind: Literal["clean", "spark-clean"] = "clean"
    engine: str = Field("in-process", description="in-process, or spark (an offload job on the node's spark_master)")
    partitions: list[int] = Field(default_factory=list, description="Every partition of the job.")
    origin: Literal["api", "tiered-pool"] = "api"
    spark_application_id: str | None = Field(None, description="The Spark application the job ran in.")
    attempts: int = Field(0, description="Spark jobs run (a job fenced by a leadership change is retried once "
                                         "under the node's new epoch).")
    created_ms: int = 0
    ended_ms: int | None = None


class CleanerPool(BaseModel):
    configured: int = Field(description="Threads the options ask for (cleaner_threads / tiered_cleaner_threads).")
    live: int = Field(description="Threads running now.")
    dead: int = Field(description="Threads that died (Kafka's dead-thread-count).")


class CleanerStatus(BaseModel):
    threads: int = Field(description="Configured threads of the local pool (cleaner_threads; 0 = clean on "
                                     "request only).")
    tiered_threads: int = Field(description="Configured threads of the tiered pool (tiered_cleaner_threads).")
    live_threads: int = Field(description="Cleaner threads running now, both pools.")
    background_cleaning: bool = Field(description="Whether background threads run at all (cleaner_threads > 0); "
                                                  "without them partitions are cleaned only on request.")
    pools: dict[Literal["local", "tiered"], CleanerPool]
    dead_threads: int
    uncleanable_partitions: list[str]
    uncleanable_reasons: dict[str, str] = Field(
        default_factory=dict, description="Why a partition was marked uncleanable, where known (for a corrupt "
                                          "batch: the file or object and the byte position).")
    last_runs: list[dict[str, Any]]
    erasures_at_risk: list[dict[str, Any]] = Field(
        default_factory=list, description="Pending key erasures with less than a tenth of their window left "
                                          "or overdue: id, topic, deadline_ms, time_left_ms, overdue, partitions.")
    partitions_at_risk: list[str] = Field(default_factory=list,
                                          description="Partitions of the erasures at risk (topic-partition).")


class Health(BaseModel):
    status: Literal["ok"]


class Error(BaseModel):
    error: str


# ---- round reports and dry runs -----------------------------------------------------------

class RemovedByReason(BaseModel):
    superseded: int = Field(description="Records dropped because a later record of the same key was mapped.")
    tombstone: int = Field(description="Tombstones dropped after their delete horizon (delete.retention.ms).")
    aborted: int = Field(description="Records of aborted transactions.")
    marker: int = Field(description="Transaction markers dropped after their horizon.")


class CompactionSegment(BaseModel):
    segment_id: str = Field(description="Remote segment id, or a local segment's 20-digit base offset.")
    action: str = Field(description="rewritten, cleaned-local, skipped-by-bloom, skipped-by-key-index, "
                                    "carried-forward, or uploaded (the new segment of a rewrite).")
    base_offset: int
    end_offset: int
    removed: RemovedByReason
    bytes_in: int = Field(description="Bytes the round read from the segment.")
    bytes_out: int = Field(description="Bytes the round wrote for it.")
    downloaded: int = Field(description="Object-store bytes fetched for it.")
    uploaded: int = Field(description="Object-store bytes written for it.")
    requests: int = Field(description="Object-store calls made for it (one per object fetched or written).")


class CompactionRound(BaseModel):
    round_id: str
    topic: str
    partition: int
    engine: Literal["local", "tiered", "spark"]
    leader_epoch: int
    started_ms: int
    ended_ms: int
    checkpoint_before: int
    checkpoint_after: int | None = Field(description="The new cleaner checkpoint; null unless completed.")
    outcome: Literal["completed", "failed", "fenced", "aborted"]
    error: str | None = None
    removed: RemovedByReason
    bytes_in: int
    bytes_out: int
    downloaded: int
    uploaded: int
    requests: int
    segments: list[CompactionSegment]


class DryRunSegment(BaseModel):
    segment_id: str
    base_offset: int
    end_offset: int
    size_bytes: int
    tier: Literal["local", "remote"]
    action: Literal["rewrite", "skip"]
    skipped_by: str | None = Field(default=None, description="The test that ruled the rewrite out: bloom, "
                                   "key-index, cost-gate, or not-dirty (above the round's cleanable range).")
    download: bool = Field(description="Whether the round downloads the segment (its indexes may be fetched "
                                       "without it).")
    records_reclaimable: int
    bytes_reclaimable: int


class DryRunPlan(BaseModel):
    dry_run: Literal[True]
    topic: str
    partition: int
    engine: Literal["local", "tiered"]
    leader_epoch: int
    first_dirty_offset: int
    end_offset: int = Field(description="Where the round would stop (the new cleaner checkpoint).")
    map_full: bool
    segments: list[DryRunSegment]
    segments_to_download: list[str]
    segments_to_rewrite: list[str]
    segments_skipped: dict[str, str] = Field(description="segment id -> the test that skipped it.")
    estimated_bytes_down: int
    estimated_bytes_up: int
    records_reclaimable: int
    bytes_reclaimable: int
    records_removed: RemovedByReason


# ---- erasures --------------------------------------------------------------------------------

class ErasureRequest(_Request):
    keys: list[Text] = Field(min_length=1, max_length=1000, description="Keys to erase (in `encoding`).")
    encoding: Encoding = "utf-8"
    partitions: list[Annotated[int, in_range(0, INT32_MAX, "partition number")]] | None = Field(
        None, description="Partitions to erase the keys from (default: every partition of the topic).")
    deadline_ms: Annotated[int, in_range(0, INT64_MAX, "Kafka int64 epoch milliseconds")] | None = Field(
        None, description="When every older value must be gone (epoch ms); default now + max.compaction.lag.ms "
                          "(24 h when that is unlimited). Refused with 422 when min.compaction.lag.ms rules it out.")


class ErasureAccepted(BaseModel):
    erasure_id: str
    state: Literal["pending", "values_removed", "complete", "failed"]
    deadline_ms: int


class ErasureKey(BaseModel):
    key: str
    partition: int
    tombstone_offset: int
    segments: list[dict[str, Any]] = Field(description="Segments that held an older record of the key: tier "
                                                       "(local, remote, both), offsets, remote segment id, file.")
    rounds: list[str] = Field(description="Round ids (GET .../compactions) that rewrote them.")
    deleted: list[dict[str, Any]] = Field(description="Replaced objects (`object`) and local files (`file`) that "
                                                      "held the key, with the time each was deleted.")
    verified_ms: int | None = Field(None, description="When no remaining segment held an older record and every "
                                                      "deleted object answered 'not found'.")
    tombstone_verified_ms: int | None = None


class ErasurePartitionState(BaseModel):
    partition: int
    state: str
    updated_ms: int
    values_removed_ms: int | None = None
    complete_ms: int | None = None
    verification: dict[str, int] | None = Field(
        None, description="The final check of the values: live segments ruled out by their key index alone "
                          "(key_index), remote segments read and scanned (remote_scanned), local files scanned "
                          "(local_scanned), deleted objects that answered 'not found'.")
    rounds: list[str] = []
    notes: list[str] = []
    error: str | None = None
    leader_removed_ms: int | None = Field(None, description="When the leader had the values gone from what it "
                                                            "publishes (tiered partitions); values_removed waits "
                                                            "for every registered node's confirmation after it.")
    waiting_for_nodes: list[int] = Field([], description="Registered brokers that have not yet confirmed they hold "
                                                         "and serve no copy (down or not yet synced).")
    confirmations: list[dict[str, Any]] = Field([], description="Each node's confirmation under its own broker id: "
                                                                "broker_id, confirmed_ms, the local files it "
                                                                "dropped.")


class ErasureReceipt(BaseModel):
    erasure_id: str
    topic: str
    state: Literal["pending", "values_removed", "complete", "failed"]
    deadline_ms: int
    created_ms: int
    encoding: str
    time_left_ms: int
    deadline_missed: bool = Field(False, description="Some partition's older values were removed after "
                                                     "deadline_ms, or are still there past it (the erasure "
                                                     "continues; GET /v1/cleaner lists it as overdue).")
    partitions: list[ErasurePartitionState]
    keys: list[ErasureKey]
    error: str | None = None
    waiting_for_nodes: list[int] = Field([], description="Registered brokers whose confirmation a pending "
                                                         "partition still waits for.")


class ErasureSummary(BaseModel):
    erasure_id: str
    topic: str
    state: Literal["pending", "values_removed", "complete", "failed"]
    deadline_ms: int
    created_ms: int
    keys: int
    partitions: list[int]
    error: str | None = None
