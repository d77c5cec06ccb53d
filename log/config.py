"""Topic (log) configuration: one table, Kafka's names, validated on every write.

Each key is declared exactly once in :data:`CONFIG_DEF` with its type, default,
validator and documentation (Kafka's ``ConfigDef.define``). Cross-field rules live
in :func:`validate_values` (Kafka's ``LogConfig.validateValues``). Errors name the
key, the value and what is allowed, so a person can fix the request.

The README's configuration reference is generated from this table
(``tiercompact config-docs``), so the two cannot drift.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any

from log.errors import InvalidConfigError
from log.types import CleanupPolicy, TimestampType

LONG_MAX = 2**63 - 1
INT_MAX = 2**31 - 1

Validator = Callable[[str, Any], None]


def at_least(lo: float) -> Validator:
    def check(key: str, v: Any) -> None:
        if v < lo:
            raise InvalidConfigError(f"{key}={v!r} is invalid: must be at least {lo}")

    check.__doc__ = f"[{lo},...]"
    return check


def between(lo: float, hi: float) -> Validator:
    def check(key: str, v: Any) -> None:
        if not lo <= v <= hi:
            raise InvalidConfigError(f"{key}={v!r} is invalid: must be between {lo} and {hi}")

    check.__doc__ = f"[{lo},...,{hi}]"
    return check


def one_of(*allowed: str) -> Validator:
    def check(key: str, v: Any) -> None:
        if v not in allowed:
            raise InvalidConfigError(f"{key}={v!r} is invalid: must be one of {', '.join(allowed)}")

    check.__doc__ = "[" + ", ".join(allowed) + "]"
    return check


def _cleanup_policy(key: str, v: Any) -> None:
    parts = [p.strip() for p in v.split(",")] if isinstance(v, str) else []
    if not parts or any(p not in ("compact", "delete") for p in parts) or len(set(parts)) != len(parts):
        raise InvalidConfigError(
            f"{key}={v!r} is invalid: must be 'compact', 'delete' or 'compact,delete'"
        )


_cleanup_policy.__doc__ = "[compact, delete, compact,delete]"


def _bad(key: str, v: Any, allowed: str) -> None:
    raise InvalidConfigError(f"{key}={v!r} is invalid: must be {allowed}")


def _replica_list(key: str, v: Any) -> None:
    """Kafka's ThrottledReplicaListValidator: '*', or a list of partition:broker pairs."""
    items = [x.strip() for x in str(v).split(",") if x.strip()]
    if items == ["*"] or all(len(p := x.split(":")) == 2 and p[0].isdigit() and p[1].isdigit() for x in items):
        return
    _bad(key, v, "'*' or a list of partition:broker (e.g. 0:1,1:1)")


_replica_list.__doc__ = "[partitionId]:[brokerId],[partitionId]:[brokerId],... or *"


def _gzip_level(key: str, v: Any) -> None:
    if v != -1 and not 1 <= v <= 9:
        _bad(key, v, "[1,...,9] or -1")


_gzip_level.__doc__ = "[1,...,9] or -1"


@dataclass(frozen=True, slots=True)
class ConfigKey:
    name: str
    type: type
    default: Any
    validator: Validator | None
    doc: str

    @property
    def allowed(self) -> str:
        return (self.validator.__doc__ or "") if self.validator else ""


CONFIG_DEF: dict[str, ConfigKey] = {}


def define(name: str, type_: type, default: Any, validator: Validator | None, doc: str) -> None:
    if name in CONFIG_DEF:  # pragma: no cover - programming error
        raise AssertionError(f"config key {name} defined twice")
    CONFIG_DEF[name] = ConfigKey(name, type_, default, validator, doc)


define("cleanup.policy", str, "compact", _cleanup_policy,
       "'compact' keeps the newest record per key, 'delete' drops old segments by retention.ms/bytes, "
       "'compact,delete' does both.")
define("segment.bytes", int, 1024 * 1024 * 1024, at_least(14),
       "Roll the active segment when it reaches this size; also the size limit of a cleaned segment group.")
define("segment.ms", int, 7 * 24 * 3600 * 1000, at_least(1),
       "Roll the active segment after this time even if it is not full.")
define("segment.index.bytes", int, 10 * 1024 * 1024, at_least(8),
       "Maximum size of a segment's offset/time index; also limits cleaned segment groups.")
define("index.interval.bytes", int, 4096, at_least(0),
       "Bytes between two offset-index entries.")
define("max.message.bytes", int, 1048588, at_least(0),
       "Largest record batch accepted on append.")
define("message.timestamp.type", str, "CreateTime", one_of("CreateTime", "LogAppendTime"),
       "Whether record timestamps are the producer's (CreateTime) or the append time (LogAppendTime).")
define("compression.type", str, "producer", one_of("producer", "none", "gzip", "snappy", "lz4", "zstd"),
       "Codec of batches the log writes: 'producer' keeps the producer's codec.")
define("min.cleanable.dirty.ratio", float, 0.5, between(0.0, 1.0),
       "A compacted log is cleaned once dirty bytes / total bytes exceed this ratio.")
define("min.compaction.lag.ms", int, 0, at_least(0),
       "A record stays uncompacted (readable by a caught-up consumer) for at least this long.")
define("max.compaction.lag.ms", int, LONG_MAX, at_least(1),
       "A record becomes eligible for compaction at most this long after it is written (KIP-354); "
       "the active segment is force-rolled to honour it.")
define("delete.retention.ms", int, 24 * 3600 * 1000, at_least(0),
       "How long tombstones and transaction markers survive after the cleaner first sees them.")
define("retention.ms", int, 7 * 24 * 3600 * 1000, at_least(-1),
       "For cleanup.policy containing 'delete': drop segments older than this (-1 = no limit). "
       "For tiered partitions this is the remote (total) retention.")
define("retention.bytes", int, -1, at_least(-1),
       "For cleanup.policy containing 'delete': drop the oldest segments while the log exceeds this (-1 = no limit).")
define("file.delete.delay.ms", int, 60000, at_least(0),
       "Delay before a replaced segment's '.deleted' files are removed. After a delay of 1 s or more, files over "
       "8 MiB are truncated 8 MiB at a time before the unlink, so their removal does not stall the syncs on the same "
       "disk (docs/internals.md); after a shorter one they are unlinked whole.")
define("producer.id.expiration.ms", int, 86400000, at_least(1),
       "Forget an idle producer (no open transaction) this long after its last batch's timestamp; the "
       "cleaner then no longer keeps its last batch. Kafka's broker-level setting, per topic here.")
define("remote.storage.enable", bool, False, None,
       "Copy rolled segments to the object store and let local copies expire (tiered storage).")
define("local.retention.ms", int, -2, at_least(-2),
       "Tiered partitions: how long a copied segment stays on local disk (-2 = retention.ms, -1 = no limit).")
define("local.retention.bytes", int, -2, at_least(-2),
       "Tiered partitions: local bytes to keep (-2 = retention.bytes, -1 = no limit).")
define("remote.compaction.bloom.fpp", float, 0.01, between(1e-6, 0.5),
       "False-positive rate of each remote segment's key bloom filter (tiercompact; 1%, the default of the "
       "KIP draft for compacted topics in tiered storage).")
define("remote.compaction.min.reclaimable.ratio", float, 0.0, between(0.0, 1.0),
       "Tiered cost gate (tiercompact; 0 = off): a clean remote segment whose superseded records are a smaller "
       "share of its keyed records than this is carried forward instead of rewritten, unless "
       "max.compaction.lag.ms or a tombstone's delete horizon requires the rewrite.")
define("remote.compaction.engine", str, "local", one_of("local", "spark", "auto"),
       "Tiered partitions (tiercompact): which engine the background tiered pool cleans them with: local (in "
       "process), spark (a job on the node's spark_master, the node keeps serving) or auto (spark when the round's "
       "dirty remote bytes reach remote.compaction.spark.min.dirty.bytes). Without spark_master: local.")
define("remote.compaction.spark.min.dirty.bytes", int, 1024 * 1024 * 1024, at_least(0),
       "With remote.compaction.engine=auto: the dirty remote bytes from which a round goes to Spark (tiercompact; "
       "below it the per-task and start-up overhead of a job outweighs its parallelism).")
define("message.timestamp.difference.max.ms", int, LONG_MAX, at_least(0),
       "Reject records whose CreateTime differs from the broker clock by more than this (deprecated in Kafka 3.6 "
       "for the two below, which take precedence where set).")
define("message.timestamp.before.max.ms", int, LONG_MAX, at_least(0),
       "Reject records whose CreateTime is more than this before the broker clock (KIP-937; unset: "
       "message.timestamp.difference.max.ms).")
define("message.timestamp.after.max.ms", int, LONG_MAX, at_least(0),
       "Reject records whose CreateTime is more than this after the broker clock (KIP-937; unset: "
       "message.timestamp.difference.max.ms; Kafka 3.x's default, which Kafka 4.0 lowered to one hour).")
define("min.insync.replicas", int, 1, at_least(1),
       "acks=all produce needs this many in-sync replicas, else NOT_ENOUGH_REPLICAS, as Kafka: a partition has one "
       "copy here, so above 1 every acks=all produce is refused (acks 0 and 1 are not affected).")
define("segment.jitter.ms", int, 0, at_least(0),
       "Roll by time up to this much before segment.ms (an amount of each segment's own, a hash of its partition "
       "and base offset where Kafka draws it at random), so that partitions created together do not all roll at "
       "once.")
define("compression.gzip.level", int, -1, _gzip_level,
       "The gzip level of batches the log compresses (compression.type=gzip; -1: zlib's default).")
define("compression.lz4.level", int, 9, between(1, 17),
       "The lz4 level of batches the log compresses (compression.type=lz4; 9 is lz4's fast mode, as Kafka's default; "
       "others are lz4's high-compression levels).")
define("compression.zstd.level", int, 3, between(-131072, 22),
       "The zstd level of batches the log compresses (compression.type=zstd).")
define("preallocate", bool, False, None,
       "Accepted for Kafka's tools; no effect: segment files grow as they are written (preallocating them did not "
       "shorten acks=all syncs here, docs/operations.md).")
define("unclean.leader.election.enable", bool, False, None,
       "Accepted for Kafka's tools; no effect: a partition has one copy, its leader (leadership moves with POST "
       ".../leadership, never by election).")
define("leader.replication.throttled.replicas", str, "", _replica_list,
       "Accepted for Kafka's tools; no effect: there is no replication to throttle.")
define("follower.replication.throttled.replicas", str, "", _replica_list,
       "Accepted for Kafka's tools; no effect: there is no replication to throttle.")
define("message.downconversion.enable", bool, True, None,
       "Accepted for Kafka's tools; no effect: Fetch v4+ is served, which never down-converts.")
define("flush.messages", int, LONG_MAX, at_least(1),
       "fsync the partition once this many records were appended since the last fsync (Kafka's default: never; "
       "acks=all produce requests fsync before they are answered in any case).")
define("flush.ms", int, LONG_MAX, at_least(0),
       "fsync the partition when records appended this long ago are not on disk yet (Kafka's default: never).")


#: Kafka topic configs refused on purpose, and why (the error says so instead of "unknown config key")
KAFKA_UNSUPPORTED = {
    "remote.log.copy.disable": "copying to the object store cannot be paused (KIP-950); a tiered topic stays tiered",
    "remote.log.delete.on.disable": "remote.storage.enable cannot be turned off, so there is nothing to delete on it",
    "message.format.version": "removed in Kafka 4.0; batches are always record batch v2 (magic 2)",
}


#: keys Kafka declares as INT (int32); every other int key is a LONG (int64). A value past
#: its Kafka type is refused here, before it can reach a struct or an index size.
INT32_KEYS = frozenset({"segment.bytes", "segment.index.bytes", "index.interval.bytes", "max.message.bytes",
                        "producer.id.expiration.ms", "min.insync.replicas", "compression.gzip.level",
                        "compression.lz4.level", "compression.zstd.level"})


def _show(value: Any, limit: int = 60) -> str:
    """repr() for an error message, cut short: a value can be as long as a request body."""
    text = repr(value) if not isinstance(value, int) or abs(value) < 10**limit else f"<{value.bit_length()}-bit int>"
    return text if len(text) <= limit else text[:limit] + "..."


def _check_width(key: ConfigKey, v: int) -> int:
    lo, hi, kafka = (-INT_MAX - 1, INT_MAX, "int32") if key.name in INT32_KEYS else (-LONG_MAX - 1, LONG_MAX, "int64")
    if not lo <= v <= hi:
        raise InvalidConfigError(f"{key.name}={_show(v)} is invalid: out of range for Kafka's {kafka} "
                                 f"({lo}..{hi})")
    return v


def _coerce(key: ConfigKey, value: Any) -> Any:
    """Turn a JSON/CLI value into the key's type, or raise a message naming key and value."""
    t = key.type
    if t is int and not isinstance(value, bool):
        try:
            as_int = int(value) if not isinstance(value, float) or value.is_integer() else None
        except (TypeError, ValueError, OverflowError):
            as_int = None
        if as_int is not None:
            _check_width(key, as_int)
    try:
        if t is bool:
            if isinstance(value, bool):
                return value
            if isinstance(value, str) and value.lower() in ("true", "false"):
                return value.lower() == "true"
            raise ValueError
        if t is int:
            if isinstance(value, bool):
                raise ValueError
            if isinstance(value, float):
                if not value.is_integer():
                    raise ValueError
                return int(value)
            return int(value)
        if t is float:
            if isinstance(value, bool):
                raise ValueError
            return float(value)  # an int too large for a float raises OverflowError, caught below
        if t is str:
            if not isinstance(value, str):
                raise ValueError
            return value.strip()
    except (TypeError, ValueError, OverflowError):
        pass
    raise InvalidConfigError(f"{key.name}={_show(value)} is invalid: expected {t.__name__}")


def validate_values(values: Mapping[str, Any]) -> None:
    """Cross-field rules (Kafka's LogConfig.validateValues)."""
    lo, hi = values["min.compaction.lag.ms"], values["max.compaction.lag.ms"]
    if lo > hi:
        raise InvalidConfigError(
            f"min.compaction.lag.ms ({lo}) > max.compaction.lag.ms ({hi}): "
            f"max.compaction.lag.ms must be at least min.compaction.lag.ms"
        )
    if values["local.retention.ms"] >= 0 and values["retention.ms"] >= 0 \
            and values["local.retention.ms"] > values["retention.ms"]:
        raise InvalidConfigError(
            f"local.retention.ms ({values['local.retention.ms']}) > retention.ms ({values['retention.ms']}): "
            f"local retention must not exceed total retention"
        )
    if values["local.retention.bytes"] >= 0 and values["retention.bytes"] >= 0 \
            and values["local.retention.bytes"] > values["retention.bytes"]:
        raise InvalidConfigError(
            f"local.retention.bytes ({values['local.retention.bytes']}) > retention.bytes "
            f"({values['retention.bytes']}): local retention must not exceed total retention"
        )
    if values["segment.index.bytes"] < 8:
        raise InvalidConfigError("segment.index.bytes must be at least 8")


def validate_change(old: LogConfig, new: LogConfig) -> None:
    """Rules about changing a topic's config, beyond the new values being valid on their own.

    Turning ``remote.storage.enable`` off on a tiered topic is refused, as Kafka refuses it
    (``ConfigAdminManager``: "It is invalid to disable remote storage without deleting
    remote data"): every segment that lives only in the object store would disappear from
    reads, and reads from the log start would answer 416.
    """
    if old.remote_storage_enable and not new.remote_storage_enable:
        raise InvalidConfigError(
            "remote.storage.enable cannot be turned off on a topic that has it on: its segments in the "
            "object store would become unreadable (Kafka refuses this too). Keep remote.storage.enable=true; "
            "to drop the remote data, delete the topic and create it again")


@dataclass(frozen=True)
class LogConfig:
    """A validated, immutable topic configuration.

    ``overrides`` holds only the keys the user set (what the API shows and persists);
    attribute access is by Kafka name through :meth:`get` or the typed properties.
    """

    overrides: Mapping[str, Any] = field(default_factory=dict)
    _values: Mapping[str, Any] = field(default_factory=dict, repr=False, compare=False)

    @staticmethod
    def from_dict(props: Mapping[str, Any] | None = None) -> LogConfig:
        props = dict(props or {})
        overrides: dict[str, Any] = {}
        for k, v in props.items():
            key = CONFIG_DEF.get(k)
            if key is None:
                if k in KAFKA_UNSUPPORTED:
                    raise InvalidConfigError(f"{k} is a Kafka topic config tiercompact does not support: "
                                             f"{KAFKA_UNSUPPORTED[k]}")
                raise InvalidConfigError(
                    f"unknown config key {k!r}; known keys: {', '.join(sorted(CONFIG_DEF))}"
                )
            coerced = _coerce(key, v)
            if key.validator is not None:
                key.validator(k, coerced)
            overrides[k] = coerced
        values = {k: overrides.get(k, d.default) for k, d in CONFIG_DEF.items()}
        validate_values(values)
        return LogConfig(overrides=dict(overrides), _values=values)

    def with_overrides(self, props: Mapping[str, Any]) -> LogConfig:
        """A new config with ``props`` applied on top of this one's overrides (PATCH semantics).

        A value of None removes an override (back to the default).
        """
        merged = dict(self.overrides)
        for k, v in props.items():
            if v is None:
                merged.pop(k, None)
            else:
                merged[k] = v
        new = LogConfig.from_dict(merged)
        validate_change(self, new)
        return new

    def get(self, key: str) -> Any:
        if not self._values:
            object.__setattr__(self, "_values", LogConfig.from_dict(self.overrides)._values)
        return self._values[key]

    def as_dict(self) -> dict[str, Any]:
        """Every key with its effective value."""
        return {k: self.get(k) for k in CONFIG_DEF}

    # typed accessors for the hot paths, each computed once (the config never changes; a new value is a new
    # LogConfig): the produce path reads several per batch
    @cached_property
    def compact(self) -> bool:
        return CleanupPolicy.COMPACT.value in self.get("cleanup.policy").split(",")

    @cached_property
    def delete(self) -> bool:
        return CleanupPolicy.DELETE.value in self.get("cleanup.policy").split(",")

    @cached_property
    def segment_bytes(self) -> int:
        return int(self.get("segment.bytes"))

    @cached_property
    def max_segment_ms(self) -> int:
        """Kafka's LogConfig.maxSegmentMs: compacted logs roll by min(segment.ms, max.compaction.lag.ms)."""
        if self.compact:
            return min(int(self.get("segment.ms")), int(self.get("max.compaction.lag.ms")))
        return int(self.get("segment.ms"))

    @cached_property
    def roll_jitter_bound_ms(self) -> int:
        """The most a segment rolls before segment.ms: segment.jitter.ms, at most segment.ms (Kafka's bound)."""
        return min(int(self.get("segment.jitter.ms")), int(self.get("segment.ms")))

    @cached_property
    def min_insync_replicas(self) -> int:
        return int(self.get("min.insync.replicas"))

    @cached_property
    def timestamp_bounds(self) -> tuple[int, int]:
        """How far (ms) a CreateTime may lie before and after the broker clock: message.timestamp.before.max.ms and
        .after.max.ms where set, else message.timestamp.difference.max.ms (Kafka's LogConfig since KIP-937)."""
        diff = int(self.get("message.timestamp.difference.max.ms"))
        before, after = int(self.get("message.timestamp.before.max.ms")), int(self.get("message.timestamp.after.max.ms"))
        return (before if before != LONG_MAX else diff, after if after != LONG_MAX else diff)

    @cached_property
    def max_message_bytes(self) -> int:
        return int(self.get("max.message.bytes"))

    @cached_property
    def segment_index_bytes(self) -> int:
        return int(self.get("segment.index.bytes"))

    @cached_property
    def flush_policy(self) -> tuple[int, int] | None:
        """``(flush.messages, flush.ms)``, or None when both are off (Long.MAX_VALUE, the default)."""
        messages, interval = int(self.get("flush.messages")), int(self.get("flush.ms"))
        return None if messages == LONG_MAX and interval == LONG_MAX else (messages, interval)

    @cached_property
    def timestamp_type(self) -> TimestampType:
        return (TimestampType.LOG_APPEND_TIME if self.get("message.timestamp.type") == "LogAppendTime"
                else TimestampType.CREATE_TIME)

    @cached_property
    def remote_storage_enable(self) -> bool:
        return bool(self.get("remote.storage.enable"))

    @cached_property
    def local_retention_ms(self) -> int:
        v = int(self.get("local.retention.ms"))
        return int(self.get("retention.ms")) if v == -2 else v

    @cached_property
    def local_retention_bytes(self) -> int:
        v = int(self.get("local.retention.bytes"))
        return int(self.get("retention.bytes")) if v == -2 else v


DEFAULT_CONFIG = LogConfig.from_dict({})


def config_reference_markdown() -> str:
    """The configuration reference table for the README, generated from CONFIG_DEF."""
    lines = ["| key | type | default | allowed | meaning |", "|---|---|---|---|---|"]
    for k in CONFIG_DEF.values():
        default = k.default
        if default == LONG_MAX:
            default = "9223372036854775807 (Long.MAX)"
        lines.append(f"| `{k.name}` | {k.type.__name__} | `{default}` | {k.allowed} | {k.doc} |")
    return "\n".join(lines) + "\n"
