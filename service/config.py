"""ServiceConfig: the settings of one ``tiercompact serve`` node, and where they come from.

Every option can be given four ways; the first that sets it wins:

1. a command-line flag (``--data-dir DIR``),
2. an environment variable ``TIERCOMPACT_<OPTION>`` (``TIERCOMPACT_DATA_DIR``),
3. the config file (``--config FILE`` or ``TIERCOMPACT_CONFIG``; TOML, or JSON when the
   name ends in ``.json``), whose keys are the option names (``data_dir`` or ``data-dir``),
4. the defaults below.

The merged values are validated once, at load; an invalid value raises
:class:`ServiceConfigError` naming the option, the value and where it came from, so a
person can fix the right place. pydantic is used here and in ``schemas.py`` only.
"""

from __future__ import annotations

import json
import os
import tomllib
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from log.errors import InvalidConfigError
from log.log_manager import MAX_PARTITIONS
from log.page_cache import DEFAULT_WINDOW_BYTES

ENV_PREFIX = "TIERCOMPACT_"
CONFIG_FILE_ENV = ENV_PREFIX + "CONFIG"


class ServiceConfigError(InvalidConfigError):
    """A service option is invalid; the message names the option, the value and its source."""


class ServiceConfig(BaseModel):
    """Validated, immutable settings of a node (see the module docstring for the sources)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    data_dir: Path = Field(Path("./data"), description="Directory holding partition logs and checkpoints.")
    remote: str | None = Field(None, description="Object store URL: file:///dir or s3://bucket/prefix "
                                                 "(default file://<data dir>/remote).")
    metadata: str | None = Field(None, description="Metadata store URL: sqlite:///path or postgresql://... "
                                                   "(default sqlite:///<data dir>/metadata.db).")
    s3_endpoint: str | None = Field(None, description="S3 endpoint URL (MinIO); default: AWS environment.")
    s3_region: str | None = Field(None, description="S3 region name.")
    s3_verify_etag: bool = Field(True, description="Check that each S3 upload's ETag is the MD5 of the bytes sent "
                                                   "(turn off for SSE-KMS/SSE-C buckets, whose ETags are not MD5s; "
                                                   "Content-MD5 and CRC-32C are still sent).")
    remote_retry_attempts: int = Field(3, ge=1, le=20,
                                       description="Attempts per object-store call before it fails (retries of "
                                                   "throttling, 5xx, connection errors, timeouts).")
    remote_timeout_ms: int = Field(20_000, ge=100, le=3_600_000,
                                   description="Longest time one object-store operation may spend retrying.")
    remote_connect_timeout_ms: int = Field(3_000, ge=100, le=600_000,
                                           description="S3 connect timeout of one attempt.")
    remote_read_timeout_ms: int = Field(30_000, ge=100, le=3_600_000,
                                        description="S3 read timeout of one attempt.")
    remote_min_transfer_rate_bytes: int = Field(256 * 1024, ge=1, le=1 << 40,
                                                description="S3 uploads and downloads must move this fast (bytes a "
                                                            "second): one of n bytes fails, and is retried, after "
                                                            "the read timeout plus n / this.")
    remote_breaker_failures: int = Field(3, ge=1, le=1000,
                                         description="Consecutive failures after which the object store is "
                                                     "treated as down: calls fail at once (503 with Retry-After) "
                                                     "for remote_breaker_cooldown_ms.")
    remote_breaker_cooldown_ms: int = Field(10_000, ge=100, le=3_600_000,
                                            description="How long calls fail fast once the object store is "
                                                        "treated as down.")
    host: str = Field("127.0.0.1", description="Address the HTTP API listens on.")
    port: int = Field(8080, ge=0, le=65535, description="Port of the HTTP API (0 = any free port).")
    token: str | None = Field(None, description="Bearer token required by mutating endpoints (none = open); "
                                                "at least 8 characters, not blank.")
    auth_reads: bool = Field(False, description="Require the token for reads too, and for /metrics, /docs and "
                                                "/openapi.json (/healthz stays open); needs a token.")
    broker_id: int = Field(0, ge=0, le=2**31 - 1,
                           description="This node's broker id (Kafka int32, 0..2147483647), recorded with the "
                                       "leader epochs it registers: a node resumes only epochs registered to its "
                                       "own id. Nodes sharing a metadata store need distinct ids.")
    request_timeout_ms: int = Field(30_000, ge=1, le=3_600_000,
                                    description="Longest wait of a request (HTTP or Kafka) for a partition that "
                                                "background work holds (Kafka's request.timeout.ms); past it the "
                                                "request answers 503 with Retry-After (REQUEST_TIMED_OUT on the "
                                                "Kafka port) and did nothing.")
    metadata_lock_timeout_ms: int = Field(5_000, ge=1, le=2**31 - 1,
                                          description="Longest wait for a metadata-store lock (PostgreSQL "
                                                      "lock_timeout, SQLite busy timeout); past it the request "
                                                      "answers 503 with Retry-After.")
    metadata_statement_timeout_ms: int = Field(30_000, ge=1, le=2**31 - 1,
                                               description="Longest metadata statement or idle transaction on "
                                                           "PostgreSQL (statement_timeout, "
                                                           "idle_in_transaction_session_timeout); a round trip "
                                                           "the server answers nothing to is given up client-side "
                                                           "after as much again, at most 5 s more.")
    cleaner_threads: int = Field(1, ge=0, le=64, description="Background cleaner threads (0 = clean on request only).")
    tiered_cleaner_threads: int = Field(1, ge=0, le=64,
                                        description="Background threads cleaning tiered (remote.storage.enable) "
                                                    "partitions: download, clean, upload.")
    dedupe_buffer_size: int = Field(32 * 1024 * 1024, ge=1024,
                                    description="Bytes of offset map shared by the cleaner threads (16-byte slots, "
                                                "about 18 B per key at the map's load factor).")
    io_max_bytes_per_second: float | None = Field(None, gt=0,
                                                  description="Cleaner I/O throttle in bytes/s (none = unlimited).")
    cleaner_backoff_ms: int = Field(15_000, ge=1, description="Cleaner thread sleep when nothing is cleanable.")
    tiering_interval_ms: int = Field(30_000, ge=10,
                                     description="How often rolled segments are tiered and retention applied.")
    roll_check_interval_ms: int = Field(5_000, ge=10,
                                        description="How often active segments are checked for a forced roll "
                                                    "(segment.ms, max.compaction.lag.ms).")
    erasure_check_interval_ms: int = Field(1_000, ge=10,
                                           description="How often pending key erasures are driven (tombstones "
                                                       "tiered, erasure rounds, replaced objects deleted, receipts "
                                                       "verified); a new erasure starts at once.")
    metadata_sync_interval_ms: int = Field(2_000, ge=10, le=3_600_000,
                                           description="How often the node follows what other writers published "
                                                       "about the tiered partitions it holds (one query: leader "
                                                       "moves, cleaner checkpoints, segments, erasures); within it a "
                                                       "deposed leader refuses writes and stale local copies are "
                                                       "dropped.")
    remote_cache_bytes: int = Field(1024 * 1024 * 1024, ge=0,
                                    description="Disk budget for downloaded remote segment chunks.")
    page_cache_window_bytes: int = Field(DEFAULT_WINDOW_BYTES, ge=-1,
                                         description="The newest bytes of each partition's local log kept in the page "
                                                     "cache; older ones are dropped behind the writer and behind "
                                                     "Kafka fetches that read them (-1: leave all of it to the "
                                                     "kernel, as Kafka does). See docs/operations.md.")
    malloc_mmap_threshold_bytes: int = Field(64 * 1024 * 1024, ge=0, le=2**31 - 1,
                                             description="glibc malloc's mmap and trim thresholds: buffers below it "
                                                         "come from malloc's heaps and are reused, not mapped and "
                                                         "unmapped each time (0: glibc's defaults; MALLOC_* or "
                                                         "GLIBC_TUNABLES in the environment win). See "
                                                         "docs/operations.md.")
    max_request_bytes: int = Field(16 * 1024 * 1024, ge=1024, description="Largest accepted HTTP request body.")
    max_records_per_request: int = Field(10_000, ge=1, description="Most records one produce request may carry.")
    max_fetch_records: int = Field(10_000, ge=1, description="Largest max_records a read may ask for.")
    max_fetch_bytes: int = Field(8 * 1024 * 1024, ge=1024, description="Batch bytes one read scans at most.")
    spark_master: str | None = Field(None, description="Spark master the node offloads tiered cleaning to "
                                                       "(spark://host:7077, local-cluster[2,1,1024], local[2]); none: "
                                                       "no offload (remote.compaction.engine=spark cleans in process).")
    spark_conf: str = Field("", description="Extra Spark deploy settings for the offload, comma-separated "
                                            "key=value (spark.executor.memory=2g,spark.cores.max=8).")
    spark_ship_packages: bool = Field(True, description="Ship tiercompact's Python packages (a zip of the .py "
                                                        "files) to a non-local Spark master's executors; turn off "
                                                        "when the executors run the tiercompact image (it has the "
                                                        "compiled record kernels, which a zip cannot carry).")
    spark_split_partition_bytes: int = Field(1 << 30, ge=0, le=2**62,
                                             description="A partition whose Spark round may read more than this "
                                                         "many bytes is split across tasks (offset map shuffled, "
                                                         "groups rewritten in parallel); smaller partitions run "
                                                         "whole, one task each (the in-process round's code on an "
                                                         "executor). 0 splits every partition.")
    spark_max_concurrent_jobs: int = Field(1, ge=1, le=64,
                                           description="Spark offload jobs the node runs at once (each one "
                                                       "cleans one partition; the rest wait, the node serves).")
    kafka_port: int = Field(9092, ge=0, le=65535, description="Port of the Kafka listener (0 = no Kafka listener).")
    kafka_host: str | None = Field(None, description="Address the Kafka listener binds (default: host).")
    advertised_listener: str | None = Field(None, description="HOST:PORT Kafka clients are told to connect to "
                                                              "(advertised.listeners; default: the bound address).")
    auto_create_topics_enable: bool = Field(True, description="A Kafka Metadata request that names a topic the "
                                                              "cluster does not have creates it, as Kafka's broker "
                                                              "does, when the client allows it "
                                                              "(auto.create.topics.enable), with num_partitions "
                                                              "partitions and the default topic configs "
                                                              "(cleanup.policy compact: keyless records need a "
                                                              "topic created with cleanup.policy delete).")
    num_partitions: int = Field(1, ge=1, le=MAX_PARTITIONS,
                                description="Partitions of a topic created without a count: auto-created, by "
                                            "CreateTopics with num_partitions -1, or by POST /v1/topics without "
                                            "partitions (num.partitions).")
    socket_request_max_bytes: int = Field(104857600, ge=1024, le=2**31 - 1,
                                          description="Largest Kafka request (socket.request.max.bytes); a larger "
                                                      "size closes the connection before its body is read.")
    max_connections: int = Field(2**31 - 1, ge=1, le=2**31 - 1,
                                 description="Most open Kafka connections (max.connections); more are refused.")
    connections_max_idle_ms: int = Field(600_000, ge=100, le=2**31 - 1,
                                         description="A Kafka connection idle this long, or this slow to send one "
                                                     "request, is closed (connections.max.idle.ms).")
    num_io_threads: int = Field(8, ge=1, le=256, description="Worker threads of the Kafka listener (num.io.threads); "
                                                           "as many again run the connections' produce appends and "
                                                           "acks=-1 syncs, so producers waiting on a sync never hold "
                                                           "up other requests.")
    ack_sync_method: str = Field("syncfs", description="How acks=-1 makes the partitions a Kafka request job "
                                                       "appended to durable: 'syncfs', one syncfs(2) of their "
                                                       "file system for two or more (best with the data dir on a "
                                                       "volume of its own: it also writes back whatever else is "
                                                       "dirty there, so while more than 8 MiB of the machine's "
                                                       "page cache is dirty each partition is fsynced instead), "
                                                       "or 'fsync', one fsync per partition. "
                                                       "Partitions on a file system other than ext4, xfs, btrfs, "
                                                       "f2fs and tmpfs, or without syncfs(2) (not Linux), are "
                                                       "always fsynced.")
    sasl_users: Path | None = Field(None, description="SCRAM/PLAIN users file for the Kafka listener (lines "
                                                      "'user:password'); with it, or with a token, Kafka clients "
                                                      "must authenticate with SASL.")
    kafka_tls_cert: Path | None = Field(None, description="PEM certificate chain of the Kafka listener (TLS).")
    kafka_tls_key: Path | None = Field(None, description="PEM private key of the Kafka listener (TLS).")
    broker_heartbeat_interval_ms: int = Field(2_000, ge=10, le=3_600_000,
                                              description="How often the node renews its entry in the cluster "
                                                          "registry (broker.heartbeat.interval.ms).")
    broker_session_timeout_ms: int = Field(9_000, ge=20, le=3_600_000,
                                           description="A node whose heartbeat is older than this is dead: its "
                                                       "partitions show LEADER_NOT_AVAILABLE "
                                                       "(broker.session.timeout.ms).")
    group_initial_rebalance_delay_ms: int = Field(3_000, ge=0, le=3_600_000,
                                                  description="How long the first rebalance of an empty consumer "
                                                              "group waits for more members "
                                                              "(group.initial.rebalance.delay.ms).")
    group_min_session_timeout_ms: int = Field(6_000, ge=1, le=2**31 - 1,
                                              description="Smallest session timeout a group member may ask for "
                                                          "(group.min.session.timeout.ms).")
    group_max_session_timeout_ms: int = Field(1_800_000, ge=1, le=2**31 - 1,
                                              description="Largest session timeout a group member may ask for "
                                                          "(group.max.session.timeout.ms).")
    offsets_retention_minutes: int = Field(10_080, ge=1, le=2**31 - 1,
                                           description="A consumer group without members loses its committed "
                                                       "offsets this long after it became empty; a group without "
                                                       "members or offsets is deleted (offsets.retention.minutes).")
    offsets_topic_num_partitions: int = Field(50, ge=1, le=10_000,
                                              description="Group coordinator slots: a group id's coordinator is "
                                                          "slot abs(hash) modulo this (offsets.topic.num.partitions); "
                                                          "the same on every node sharing the metadata store.")
    transaction_state_log_num_partitions: int = Field(50, ge=1, le=10_000,
                                                      description="Transaction coordinator slots "
                                                                  "(transaction.state.log.num.partitions); the same "
                                                                  "on every node sharing the metadata store.")
    transaction_max_timeout_ms: int = Field(900_000, ge=1, le=2**31 - 1,
                                            description="Largest transaction.timeout.ms a transactional producer "
                                                        "may ask for (transaction.max.timeout.ms); more answers "
                                                        "INVALID_TRANSACTION_TIMEOUT.")
    transaction_abort_timed_out_transaction_cleanup_interval_ms: int = Field(
        10_000, ge=10, le=2**31 - 1, description="How often the transaction coordinator aborts the transactions "
                                                 "open longer than their timeout (Kafka's name).")
    transactional_id_expiration_ms: int = Field(
        604_800_000, ge=1, le=2**31 - 1, description="A transactional id with no transaction open (Empty, "
                                                     "CompleteCommit or CompleteAbort) and no state change for "
                                                     "this long is removed; its next InitProducerId gets a new "
                                                     "producer id (transactional.id.expiration.ms).")
    transaction_remove_expired_transaction_cleanup_interval_ms: int = Field(
        3_600_000, ge=10, le=2**31 - 1, description="How often the transaction coordinator removes the "
                                                    "transactional ids past transactional.id.expiration.ms "
                                                    "(Kafka's name).")
    log_level: str = Field("info", description="Log level: debug, info, warning, error, critical.")

    @field_validator("log_level")
    @classmethod
    def _level(cls, v: str) -> str:
        v = v.lower()
        if v not in ("debug", "info", "warning", "error", "critical"):
            raise ValueError("must be one of debug, info, warning, error, critical")
        return v

    @field_validator("ack_sync_method")
    @classmethod
    def _ack_sync(cls, v: str) -> str:
        v = v.lower()
        if v not in ("syncfs", "fsync"):
            raise ValueError("must be syncfs or fsync")
        return v

    @field_validator("spark_conf")
    @classmethod
    def _spark_conf(cls, v: str) -> str:
        for item in (i.strip() for i in v.split(",") if i.strip()):
            key, eq, _value = item.partition("=")
            if not eq or not key.strip().startswith("spark."):
                raise ValueError(f"{item!r} is not spark.<key>=<value>; give comma-separated spark.* settings")
        return v

    def spark_conf_pairs(self) -> tuple[tuple[str, str], ...]:
        """``spark_conf`` as (key, value) pairs."""
        return tuple((k.strip(), val.strip()) for k, _eq, val in
                     (i.strip().partition("=") for i in self.spark_conf.split(",") if i.strip()))

    @field_validator("token")
    @classmethod
    def _token(cls, v: str | None) -> str | None:
        # Fail closed: a blank token (an empty --token, TIERCOMPACT_TOKEN=' ') used to mean
        # "no token", so a typo started a fully open node. Only leaving the option out does.
        if v is not None and not v.strip():
            raise ValueError("the token is blank; give a token of at least 8 characters, or leave the option "
                             "out entirely to run without authentication")
        if v is not None and v != v.strip():
            raise ValueError("the token has leading or trailing whitespace, which no Authorization header "
                             "can carry; remove it")
        if v is not None and len(v) < 8:
            raise ValueError("a token must have at least 8 characters")
        return v

    @model_validator(mode="after")
    def _auth_reads_needs_token(self) -> ServiceConfig:
        if self.auth_reads and self.token is None:
            raise ValueError("auth_reads is set but no token is: every endpoint would be open. Set token "
                             "(--token or TIERCOMPACT_TOKEN), or drop auth_reads")
        return self

    @field_validator("advertised_listener")
    @classmethod
    def _advertised(cls, v: str | None) -> str | None:
        if v is None:
            return v
        host, sep, port = v.rpartition(":")
        if not sep or not host or not port.isdigit() or not 0 < int(port) < 65536:
            raise ValueError("must be HOST:PORT (the address Kafka clients connect to), e.g. broker1.example:9092")
        return v

    @model_validator(mode="after")
    def _kafka_tls_pair(self) -> ServiceConfig:
        if (self.kafka_tls_cert is None) != (self.kafka_tls_key is None):
            raise ValueError("kafka_tls_cert and kafka_tls_key go together: give both (TLS) or neither")
        return self

    @model_validator(mode="after")
    def _derived_defaults(self) -> ServiceConfig:
        data = self.data_dir.expanduser().resolve()
        object.__setattr__(self, "data_dir", data)
        if self.remote is None:
            object.__setattr__(self, "remote", (data / "remote").as_uri())
        if self.metadata is None:
            object.__setattr__(self, "metadata", f"sqlite:///{data / 'metadata.db'}")
        return self

    @property
    def remote_url(self) -> str:
        assert self.remote is not None
        return self.remote

    @property
    def metadata_url(self) -> str:
        assert self.metadata is not None
        return self.metadata


OPTIONS: tuple[str, ...] = tuple(ServiceConfig.model_fields)


def store_options(config: ServiceConfig) -> dict[str, Any]:
    """The object store's client options, as the node and Spark executors open it: one attempt
    per call (the RemoteStorageManager is the one retry layer, bounded by remote_retry_attempts
    and remote_timeout_ms), each bounded by the connect and read timeouts."""
    if not config.remote_url.startswith("s3://"):
        return {}
    opts: dict[str, Any] = {"max_attempts": 1, "max_total_s": config.remote_timeout_ms / 1000,
                            "connect_timeout_s": config.remote_connect_timeout_ms / 1000,
                            "read_timeout_s": config.remote_read_timeout_ms / 1000,
                            "min_transfer_rate": config.remote_min_transfer_rate_bytes,
                            "verify_etag": config.s3_verify_etag}
    if config.s3_endpoint:
        opts["endpoint_url"] = config.s3_endpoint
    if config.s3_region:
        opts["region"] = config.s3_region
    return opts


def _normalise_key(key: str) -> str:
    return key.strip().replace("-", "_").replace(".", "_").lower()


def read_config_file(path: Path) -> dict[str, Any]:
    """Options from a TOML (or ``.json``) file; a ``[tiercompact]`` table is used when present."""
    try:
        raw = path.read_bytes()
    except OSError as e:
        raise ServiceConfigError(f"cannot read config file {path}: {e.strerror or e}") from None
    try:
        doc = json.loads(raw) if path.suffix.lower() == ".json" else tomllib.loads(raw.decode("utf-8"))
    except (ValueError, UnicodeDecodeError) as e:
        raise ServiceConfigError(f"config file {path} is not valid {'JSON' if path.suffix == '.json' else 'TOML'}: "
                                 f"{e}") from None
    if not isinstance(doc, dict):
        raise ServiceConfigError(f"config file {path} must hold a table of options")
    if isinstance(doc.get("tiercompact"), dict):
        doc = doc["tiercompact"]
    out: dict[str, Any] = {}
    for k, v in doc.items():
        name = _normalise_key(k)
        if name not in OPTIONS:
            raise ServiceConfigError(f"unknown option {k!r} in config file {path}; known options: "
                                     f"{', '.join(OPTIONS)}")
        out[name] = v
    return out


def load_config(flags: Mapping[str, Any] | None = None, *, env: Mapping[str, str] | None = None,
                config_file: str | os.PathLike[str] | None = None) -> ServiceConfig:
    """Merge flags > environment > config file > defaults and validate the result.

    ``flags`` maps option names to values; None values mean "not given". The config file
    is ``config_file``, else ``TIERCOMPACT_CONFIG`` from ``env``, else none.

    Raises:
        ServiceConfigError: an unknown option, an unreadable file or an invalid value.
    """
    env = os.environ if env is None else env
    values: dict[str, Any] = {}
    sources: dict[str, str] = {}

    path = config_file if config_file is not None else env.get(CONFIG_FILE_ENV)
    if path:
        for k, v in read_config_file(Path(path)).items():
            values[k], sources[k] = v, f"config file {path}"
    for name in OPTIONS:
        var = ENV_PREFIX + name.upper()
        if var in env:
            values[name], sources[name] = env[var], f"environment variable {var}"
    for k, v in (flags or {}).items():
        if v is None:
            continue
        name = _normalise_key(k)
        if name not in OPTIONS:
            raise ServiceConfigError(f"unknown option {k!r}; known options: {', '.join(OPTIONS)}")
        values[name], sources[name] = v, f"flag --{name.replace('_', '-')}"
    try:
        return ServiceConfig(**values)
    except ValidationError as e:
        problems = []
        for err in e.errors():
            msg = err["msg"].removeprefix("Value error, ")
            if not err["loc"]:  # a rule across options: say where each option it names came from
                named = [n for n in OPTIONS if n in msg and n in sources]
                where = ", ".join(f"{n} from {sources[n]}" for n in named)
                problems.append(f"{msg}{f' ({where})' if where else ''}")
                continue
            name = str(err["loc"][0])
            src = sources.get(name, "defaults")
            given = values.get(name, "<default>")
            if name == "token" and isinstance(given, str) and given.strip():
                given = "<hidden>"  # never print a secret, even a rejected one
            problems.append(f"option {name}={given!r} (from {src}) is invalid: {msg}")
        raise ServiceConfigError("; ".join(problems)) from None


def options_reference_markdown() -> str:
    """The service options table for the README (flag, environment variable, default, meaning)."""
    lines = ["| option | flag | environment | default | meaning |", "|---|---|---|---|---|"]
    for name, f in ServiceConfig.model_fields.items():
        default = f.default
        lines.append(f"| `{name}` | `--{name.replace('_', '-')}` | `{ENV_PREFIX}{name.upper()}` | "
                     f"`{default}` | {f.description or ''} |")
    return "\n".join(lines) + "\n"


def redact_url(url: str) -> str:
    """A URL without its password, for logs."""
    if "@" in url and "://" in url:
        scheme, rest = url.split("://", 1)
        creds, host = rest.rsplit("@", 1)
        return f"{scheme}://{creds.split(':', 1)[0]}:***@{host}"
    return url
