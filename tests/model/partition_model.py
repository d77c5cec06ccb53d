"""A reference model of ONE Kafka partition, written from the guarantees, not from the engine.

It works on plain Python values only (no import of log/, cleaner/, remote/ internals) and
answers two questions:

* **What must a consumer see?** Without compaction the answer is exact: ``read_uncommitted``
  shows every data record below the high watermark (= log end offset, one replica);
  ``read_committed`` shows the data records below the last stable offset (LSO = the first
  offset of the earliest open transaction, else the high watermark) that are plain or
  belong to a committed transaction. Control batches are never shown.
* **What may compaction remove, and what must it keep?** Compaction is *allowed*, never
  *required*, to remove a record, so a compacted observation is checked as

      produced (with the right visibility)  ⊇  observed  ⊇  must-keep

  where ``observed`` must also be in offset order with every record unchanged (offset, key,
  value, timestamp). A record is must-keep when any of these holds (Kafka's
  LogCleaner as in shared/reference A.3-A.8):

  1. no clean so far could touch it: it was at/after the clean's first uncleanable offset
     (the LSO or the active segment's base), or younger than ``min.compaction.lag.ms`` at
     that clean;
  2. it is keyless and not aborted (this project keeps keyless records; DESIGN.md);
  3. it is its key's newest committed record (plain, or in a committed transaction),
     unless it is a tombstone whose delete horizon may have passed: KIP-534 stamps the
     horizon ``now + delete.retention.ms`` in the first clean that covers the tombstone,
     and only a later clean at or after that horizon may drop it.

  Aborted records may be removed (read_uncommitted) and are never visible to
  read_committed; records of open transactions are always at/after the LSO, so rule 1
  keeps them.

``max.compaction.lag.ms`` (KIP-354) is a liveness promise: the model predicts when the active
segment must be force-rolled (:meth:`PartitionModel.roll_due`), and after a clean the range
below the cleaner checkpoint must hold each key at most once in read_committed
(:meth:`PartitionModel.duplicate_keys_below`).

Producers: plain (no producer id), idempotent (producer id, epoch, sequences; a retried last
batch is a duplicate and appends nothing) and transactional (data in a transaction closed by
a COMMIT or ABORT marker; a marker may bump the epoch, fencing the old one).
"""

from __future__ import annotations

import enum
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

INT32_MAX = 2**31 - 1

Key = bytes | None
Value = bytes | None
#: what a consumer sees of a record: (offset, key, value, timestamp)
Observed = tuple[int, Key, Value, int]


class ModelError(Exception):
    """The operation is invalid for a Kafka partition (the engine must reject it too)."""


class Fate(enum.Enum):
    PLAIN = "plain"          # non-transactional: committed when written
    OPEN = "open"            # in a transaction not yet decided
    COMMITTED = "committed"
    ABORTED = "aborted"


@dataclass(slots=True)
class ModelRecord:
    offset: int
    key: Key
    value: Value
    timestamp: int
    producer_id: int
    transactional: bool
    fate: Fate

    @property
    def committed(self) -> bool:
        return self.fate in (Fate.PLAIN, Fate.COMMITTED)

    @property
    def observed(self) -> Observed:
        return (self.offset, self.key, self.value, self.timestamp)


@dataclass(slots=True)
class ProducerState:
    producer_id: int
    epoch: int
    next_sequence: int = 0
    #: (base sequence, number of records, first offset, last offset, records) of the last data batch
    last_batch: tuple[int, int, int, int, tuple[tuple[Key, Value], ...]] | None = None
    open_txn: list[int] | None = None  # offsets of the open transaction's records


@dataclass(frozen=True, slots=True)
class Appended:
    base_offset: int
    last_offset: int
    duplicate: bool = False


@dataclass(frozen=True, slots=True)
class CleanEvent:
    """One cleaning round: when it ran and the first offset it could not touch."""

    now: int
    bound: int


@dataclass(slots=True)
class PartitionModel:
    """See the module docstring. Not thread-safe; plain values in, plain values out."""

    delete_retention_ms: int = 86_400_000
    min_compaction_lag_ms: int = 0
    max_compaction_lag_ms: int | None = None
    records: list[ModelRecord] = field(default_factory=list)
    producers: dict[int, ProducerState] = field(default_factory=dict)
    cleans: list[CleanEvent] = field(default_factory=list)
    log_end_offset: int = 0
    #: offsets taken by control batches (markers)
    markers: dict[int, tuple[int, bool]] = field(default_factory=dict)
    #: whether cleanup.policy holds ``delete`` (DeleteRecords is allowed only then, as in Kafka)
    deletable: bool = False
    #: the log start offset DeleteRecords set: nothing below it may be read any more
    deleted_below: int = 0
    _by_offset: dict[int, ModelRecord] = field(default_factory=dict)

    # ---- producing ------------------------------------------------------------------------------
    def append(self, records: Sequence[tuple[Key, Value]], *, now: int, producer_id: int = -1,
               producer_epoch: int = -1, base_sequence: int = -1, transactional: bool = False) -> Appended:
        """A producer batch: offsets from the log end, one timestamp (``now``) for every record.

        Raises ModelError for what Kafka rejects: an empty batch, a transactional batch without a
        producer id, a fenced epoch, a sequence that is neither the next one nor a retry of the
        last batch.
        """
        if not records:
            raise ModelError("a batch holds at least one record")
        p: ProducerState | None = None
        if producer_id < 0:
            if transactional:
                raise ModelError("a transactional batch needs a producer id")
        else:
            p = self.producers.get(producer_id)
            if p is not None and producer_epoch < p.epoch:
                raise ModelError(f"producer {producer_id} epoch {producer_epoch} is fenced by {p.epoch}")
            if p is not None and producer_epoch == p.epoch and base_sequence >= 0 and p.last_batch is not None:
                seq, n, first, last, recs = p.last_batch
                if base_sequence == seq and len(records) == n:
                    if tuple(records) != recs:
                        raise ModelError("a retried batch must carry the same records")
                    return Appended(first, last, duplicate=True)
                if base_sequence != p.next_sequence:
                    raise ModelError(f"producer {producer_id}: sequence {base_sequence}, expected {p.next_sequence}")
            if p is None or producer_epoch > p.epoch:
                open_txn = p.open_txn if p is not None else None
                p = self.producers[producer_id] = ProducerState(producer_id, producer_epoch, open_txn=open_txn)
        base = self.log_end_offset
        fate = Fate.OPEN if transactional else Fate.PLAIN
        for i, (k, v) in enumerate(records):
            r = ModelRecord(base + i, k, v, now, producer_id, transactional, fate)
            self.records.append(r)
            self._by_offset[r.offset] = r
        last = base + len(records) - 1
        self.log_end_offset = last + 1
        if p is not None:
            if base_sequence >= 0:
                p.last_batch = (base_sequence, len(records), base, last, tuple(records))
                p.next_sequence = (base_sequence + len(records)) % (INT32_MAX + 1)
            if transactional:
                if p.open_txn is None:
                    p.open_txn = []
                p.open_txn.extend(range(base, last + 1))
        return Appended(base, last)

    def end_transaction(self, producer_id: int, producer_epoch: int, *, commit: bool) -> int:
        """A COMMIT/ABORT marker (one control batch, one offset); returns its offset. A marker at
        a higher epoch fences the producer's older epoch (its sequences restart)."""
        p = self.producers.get(producer_id)
        if p is not None and producer_epoch < p.epoch:
            raise ModelError(f"marker epoch {producer_epoch} is below producer {producer_id}'s epoch {p.epoch}")
        if p is None:
            p = self.producers[producer_id] = ProducerState(producer_id, producer_epoch)
        for off in p.open_txn or ():
            self._by_offset[off].fate = Fate.COMMITTED if commit else Fate.ABORTED
        p.open_txn = None
        if producer_epoch > p.epoch:
            p.epoch, p.next_sequence, p.last_batch = producer_epoch, 0, None
        offset = self.log_end_offset
        self.markers[offset] = (producer_id, commit)
        self.log_end_offset += 1
        return offset

    # ---- offsets ----------------------------------------------------------------------------------
    @property
    def high_watermark(self) -> int:
        return self.log_end_offset

    @property
    def last_stable_offset(self) -> int:
        firsts = [p.open_txn[0] for p in self.producers.values() if p.open_txn]
        return min(firsts) if firsts else self.high_watermark

    def open_transactions(self) -> dict[int, int]:
        return {pid: p.open_txn[0] for pid, p in self.producers.items() if p.open_txn}

    # ---- cleaning -----------------------------------------------------------------------------------
    def clean(self, now: int, *, active_segment_base: int | None = None) -> CleanEvent:
        """Record a cleaning round at ``now``. It can touch nothing at or after the LSO, nor the
        active segment (``active_segment_base``, when the caller knows it)."""
        bound = self.last_stable_offset
        if active_segment_base is not None:
            bound = min(bound, active_segment_base)
        ev = CleanEvent(now, bound)
        self.cleans.append(ev)
        return ev

    def touchable(self, r: ModelRecord, c: CleanEvent) -> bool:
        """Could clean ``c`` have removed (or stamped) ``r``?"""
        return r.offset < c.bound and r.timestamp <= c.now - self.min_compaction_lag_ms

    def untouched(self, r: ModelRecord) -> bool:
        return not any(self.touchable(r, c) for c in self.cleans)

    def horizon_may_have_passed(self, r: ModelRecord) -> bool:
        """KIP-534: a clean that covers the tombstone stamps now + delete.retention.ms; a later
        clean at/after that horizon may remove it."""
        first = next((c for c in self.cleans if self.touchable(r, c)), None)
        if first is None:
            return False
        horizon = first.now + self.delete_retention_ms
        later = self.cleans[self.cleans.index(first) + 1:]
        return any(c.now >= horizon and self.touchable(r, c) for c in later)

    def newest_committed(self) -> dict[bytes, ModelRecord]:
        out: dict[bytes, ModelRecord] = {}
        for r in self.records:
            if r.key is not None and r.committed:
                out[r.key] = r
        return out

    def must_keep(self, r: ModelRecord, newest: dict[bytes, ModelRecord]) -> str | None:
        """Why ``r`` must still be in the log (None: compaction may have removed it, or DeleteRecords did)."""
        if r.offset < self.deleted_below:
            return None
        if self.untouched(r):
            return "no clean could touch it yet (uncleanable range or min.compaction.lag.ms)"
        if r.key is None:
            return None if r.fate is Fate.ABORTED else "keyless records are always kept"
        if newest.get(r.key) is r:
            if r.value is None and self.horizon_may_have_passed(r):
                return None
            return "newest committed value of its key" if r.value is not None else \
                "tombstone before its delete horizon (delete.retention.ms after the clean that first saw it)"
        return None

    def delete_records(self, offset: int) -> int | None:
        """DeleteRecords: the new log start (-1: the high watermark; never backwards), or None when
        ``offset`` is out of range ([0, HW] or -1)."""
        target = self.high_watermark if offset == -1 else offset
        if target < 0 or target > self.high_watermark:
            return None
        self.deleted_below = max(self.deleted_below, target)
        return self.deleted_below

    # ---- predictions ------------------------------------------------------------------------------------
    def visible(self, r: ModelRecord, isolation: str) -> bool:
        if r.offset < self.deleted_below:
            return False
        if isolation == "read_committed":
            return r.committed and r.offset < self.last_stable_offset
        return r.offset < self.high_watermark

    def roll_due(self, active_first_offset: int | None, now: int) -> bool:
        """KIP-354: the active segment whose first record is older than max.compaction.lag.ms
        must be rolled (so it becomes cleanable)."""
        if self.max_compaction_lag_ms is None or active_first_offset is None:
            return False
        r = self._by_offset.get(active_first_offset)
        if r is None:
            return False  # a marker first: its time is not tracked here
        return now - r.timestamp > self.max_compaction_lag_ms

    # ---- checking observations ------------------------------------------------------------------------
    def check(self, observed: Sequence[Observed], isolation: str) -> list[str]:
        """Every way ``observed`` (one full read at ``isolation``) breaks the guarantees."""
        errors: list[str] = []
        last = -1
        for o in observed:
            off = o[0]
            if off <= last:
                errors.append(f"{isolation}: offset {off} after {last}: order not kept")
            last = off
            r = self._by_offset.get(off)
            if r is None:
                what = "a transaction marker" if off in self.markers else "nothing"
                errors.append(f"{isolation}: offset {off} holds {what} in the produced log, read {o}")
                continue
            if r.observed != tuple(o):
                errors.append(f"{isolation}: offset {off} changed: produced {r.observed}, read {tuple(o)}")
            if not self.visible(r, isolation):
                errors.append(f"{isolation}: offset {off} ({r.fate.value}) must not be visible "
                              f"(LSO {self.last_stable_offset}, HW {self.high_watermark}): {tuple(o)}")
        seen = {o[0] for o in observed}
        newest = self.newest_committed()
        for r in self.records:
            if r.offset in seen or not self.visible(r, isolation):
                continue
            why = self.must_keep(r, newest)
            if why is not None:
                errors.append(f"{isolation}: missing offset {r.offset} {r.observed} ({r.fate.value}): {why}")
        return errors

    def check_isolation_consistency(self, uncommitted: Sequence[Observed],
                                    committed: Sequence[Observed]) -> list[str]:
        """read_committed must be exactly read_uncommitted's committed records below the LSO."""
        lso = self.last_stable_offset
        want = [tuple(o) for o in uncommitted if o[0] < lso and (r := self._by_offset.get(o[0])) is not None
                and r.committed]
        got = [tuple(o) for o in committed]
        if want == got:
            return []
        return [f"read_committed {got} is not read_uncommitted's committed records below LSO {lso}: {want}"]

    def duplicate_keys_below(self, committed: Iterable[Observed], end: int) -> dict[bytes, list[int]]:
        """Keys read_committed shows more than once below ``end`` (a cleaner checkpoint):
        a completed round leaves at most one record per key below its end offset."""
        seen: dict[bytes, list[int]] = {}
        for off, k, _v, _ts in committed:
            if off < end and k is not None:
                seen.setdefault(k, []).append(off)
        return {k: offs for k, offs in seen.items() if len(offs) > 1}
