"""Compaction round reports: what one cleaning round did, kept in the metadata store.

Every round (local, tiered in-process, Spark) leaves one :class:`CompactionReport`, also when
it failed, was aborted or was fenced (``outcome`` says which; ``checkpoint_after`` is then
None). Per segment it records the action taken, the records removed by reason, the bytes
read and written, and the object-store traffic. The shapes are API.md's
``GET .../compactions``; :meth:`CompactionReport.as_dict` renders them.

The value types live here, below the cleaner, because the metadata store keeps them
(:class:`RoundReportStore`); the cleaner builds them (:mod:`cleaner.report`).
"""

from __future__ import annotations

import uuid
from dataclasses import FrozenInstanceError, dataclass, field, fields
from typing import Any, Protocol

from log.errors import InvalidRequestError
from log.types import TopicPartition

#: why a record was removed (API.md's ``removed`` keys)
REMOVED_SUPERSEDED = "superseded"  # a later record of the same key was mapped
REMOVED_TOMBSTONE = "tombstone"    # a tombstone whose delete horizon (delete.retention.ms) had passed
REMOVED_ABORTED = "aborted"        # a record of an aborted transaction
REMOVED_MARKER = "marker"          # a COMMIT/ABORT marker whose horizon had passed
REMOVAL_REASONS: tuple[str, ...] = (REMOVED_SUPERSEDED, REMOVED_TOMBSTONE, REMOVED_ABORTED, REMOVED_MARKER)

#: the action a round took on one segment
ACTION_CLEANED_LOCAL = "cleaned-local"              # a local segment recopied into a cleaned one
ACTION_REWRITTEN = "rewritten"                      # a remote segment cleaned into a new upload
ACTION_SKIPPED_BY_BLOOM = "skipped-by-bloom"        # carried forward: its bloom filter matched no dirty key
ACTION_SKIPPED_BY_KEY_INDEX = "skipped-by-key-index"  # carried forward: its exact key index holds no dirty key
ACTION_CARRIED_FORWARD = "carried-forward"          # carried forward for another reason (nothing to change)
ACTION_UPLOADED = "uploaded"                        # the new segment a rewrite produced
ACTIONS: tuple[str, ...] = (ACTION_CLEANED_LOCAL, ACTION_REWRITTEN, ACTION_SKIPPED_BY_BLOOM,
                            ACTION_SKIPPED_BY_KEY_INDEX, ACTION_CARRIED_FORWARD, ACTION_UPLOADED)

#: how a round ended
OUTCOME_COMPLETED = "completed"
OUTCOME_FAILED = "failed"
OUTCOME_FENCED = "fenced"
OUTCOME_ABORTED = "aborted"
OUTCOMES: tuple[str, ...] = (OUTCOME_COMPLETED, OUTCOME_FAILED, OUTCOME_FENCED, OUTCOME_ABORTED)

ENGINE_LOCAL = "local"
ENGINE_TIERED = "tiered"
ENGINE_SPARK = "spark"
ENGINES: tuple[str, ...] = (ENGINE_LOCAL, ENGINE_TIERED, ENGINE_SPARK)

#: most rounds kept per partition; older reports are pruned when a new one is recorded
DEFAULT_REPORTS_KEPT = 1000


def new_round_id() -> str:
    return uuid.uuid4().hex


@dataclass(slots=True)
class SegmentCounts:
    """What a round did to one segment: the one definition of the per-segment fields, shared
    by the cleaner's running account (:class:`cleaner.stats.SegmentAccount`, mutable, added
    to as the round goes) and the :class:`SegmentReport` kept in the metadata store.

    ``segment_id`` is the remote segment id, or the local segment's 20-digit base offset
    (its file name). ``superseded`` ... ``marker`` are the records removed by reason
    (:data:`REMOVAL_REASONS`, one field each). ``bytes_in``/``bytes_out`` are the bytes the
    round read from the segment and wrote for it; ``downloaded``/``uploaded`` the object-store
    bytes moved for it and ``requests`` the object-store calls made for it (one per object
    fetched or written).
    """

    segment_id: str
    action: str
    base_offset: int = -1
    end_offset: int = -1
    superseded: int = 0
    tombstone: int = 0
    aborted: int = 0
    marker: int = 0
    bytes_in: int = 0
    bytes_out: int = 0
    downloaded: int = 0
    uploaded: int = 0
    requests: int = 0

    @property
    def removed(self) -> dict[str, int]:
        """Records removed by reason (API.md's ``removed``)."""
        return {reason: getattr(self, reason) for reason in REMOVAL_REASONS}


#: the counters of a segment (every SegmentCounts field but its identity and offsets)
SEGMENT_COUNTERS: tuple[str, ...] = tuple(f.name for f in fields(SegmentCounts)
                                          if f.name not in ("segment_id", "action", "base_offset", "end_offset"))
assert set(REMOVAL_REASONS) <= set(SEGMENT_COUNTERS), "every removal reason is a per-segment field"


@dataclass(slots=True)
class SegmentReport(SegmentCounts):
    """What a round did to one segment, as recorded: the :class:`SegmentCounts` fields, immutable
    and hashable like a frozen dataclass (assigning or deleting a field raises
    ``dataclasses.FrozenInstanceError``; a dataclass cannot be frozen over a mutable base, so
    it is enforced here). :meth:`of` copies a running account.
    """

    def __post_init__(self) -> None:
        if self.action not in ACTIONS:
            raise InvalidRequestError(f"segment action {self.action!r} is not one of {ACTIONS}")
        for name in SEGMENT_COUNTERS:
            if getattr(self, name) < 0:
                raise InvalidRequestError(f"segment report {name}={getattr(self, name)} must be >= 0")

    def __setattr__(self, name: str, value: Any) -> None:
        if hasattr(self, name):  # each field is set once, by __init__
            raise FrozenInstanceError(f"cannot assign to field {name!r}")
        object.__setattr__(self, name, value)

    def __delattr__(self, name: str) -> None:
        raise FrozenInstanceError(f"cannot delete field {name!r}")

    def __hash__(self) -> int:
        return hash(tuple(getattr(self, f.name) for f in fields(self)))

    @classmethod
    def of(cls, counts: SegmentCounts) -> SegmentReport:
        """The report of a round's account of one segment (its SegmentCounts fields)."""
        return cls(**{f.name: getattr(counts, f.name) for f in fields(SegmentCounts)})

    def as_dict(self) -> dict[str, Any]:
        return {"segment_id": self.segment_id, "action": self.action, "base_offset": self.base_offset,
                "end_offset": self.end_offset, "removed": self.removed, "bytes_in": self.bytes_in,
                "bytes_out": self.bytes_out, "downloaded": self.downloaded, "uploaded": self.uploaded,
                "requests": self.requests}


@dataclass(frozen=True, slots=True)
class CompactionReport:
    """One round of one partition (API.md's ``GET .../compactions`` item)."""

    round_id: str
    topic_partition: TopicPartition
    engine: str
    leader_epoch: int
    started_ms: int
    ended_ms: int
    checkpoint_before: int
    checkpoint_after: int | None
    outcome: str = OUTCOME_COMPLETED
    error: str | None = None
    segments: tuple[SegmentReport, ...] = field(default_factory=tuple)

    def __post_init__(self) -> None:
        if not self.round_id or len(self.round_id) > 64:
            raise InvalidRequestError(f"round id {self.round_id!r} must be 1..64 characters")
        if self.engine not in ENGINES:
            raise InvalidRequestError(f"engine {self.engine!r} is not one of {ENGINES}")
        if self.outcome not in OUTCOMES:
            raise InvalidRequestError(f"outcome {self.outcome!r} is not one of {OUTCOMES}")
        if self.ended_ms < self.started_ms:
            raise InvalidRequestError(f"round {self.round_id} ends ({self.ended_ms}) before it starts "
                                      f"({self.started_ms})")
        if self.outcome == OUTCOME_COMPLETED and self.checkpoint_after is None:
            raise InvalidRequestError(f"completed round {self.round_id} needs checkpoint_after")
        object.__setattr__(self, "segments", tuple(self.segments))

    @property
    def removed(self) -> dict[str, int]:
        """Records removed by reason over every segment."""
        out = dict.fromkeys(REMOVAL_REASONS, 0)
        for s in self.segments:
            for k, v in s.removed.items():
                out[k] += v
        return out

    def totals(self) -> dict[str, int]:
        return {name: sum(getattr(s, name) for s in self.segments)
                for name in ("bytes_in", "bytes_out", "downloaded", "uploaded", "requests")}

    def as_dict(self) -> dict[str, Any]:
        tp = self.topic_partition
        return {"round_id": self.round_id, "topic": tp.topic, "partition": tp.partition, "engine": self.engine,
                "leader_epoch": self.leader_epoch, "started_ms": self.started_ms, "ended_ms": self.ended_ms,
                "checkpoint_before": self.checkpoint_before, "checkpoint_after": self.checkpoint_after,
                "outcome": self.outcome, "error": self.error, "removed": self.removed, **self.totals(),
                "segments": [s.as_dict() for s in self.segments]}


class RoundReportStore(Protocol):
    """Where round reports are kept, per partition."""

    def record_compaction_report(self, report: CompactionReport, *, keep: int = DEFAULT_REPORTS_KEPT) -> None:
        """Store the report of one cleaning round (any engine, any outcome).

        Not fenced: a round rejected because its epoch was superseded still leaves its report.
        Recording the same ``round_id`` again replaces the earlier report. Only the newest
        ``keep`` reports of the partition are kept.
        """

    def list_compaction_reports(self, tp: TopicPartition, *, limit: int = 20,
                                before: str | None = None) -> list[CompactionReport]:
        """The partition's round reports, newest recorded first, at most ``limit``; with
        ``before`` (a round id) only those recorded before that round (paging).

        Raises:
            InvalidRequestError: ``before`` names no round of ``tp``, or ``limit`` is not positive.
        """
