"""What a cleaning round keeps of each batch and record, and how a kept batch is written out.

Kafka's ``LogCleaner`` decides in two steps (``RecordFilter.checkBatchRetention`` then
``shouldRetainRecord``) and writes each batch's survivors (``MemoryRecords.filterTo``); this
module is that rule, once, in readable Python:

* :func:`decide_batch`, the batch-level decision (:class:`BatchRetention`): a live producer's
  last batch and the batch ending at the round's upper bound are kept even if emptied; an
  aborted transaction's data and a marker past its delete horizon go whole; any other batch
  goes if all its records do. It also advances the transaction state.
* :func:`decide_records`, the keep rule for a data batch's records: a record past the map's
  last offset stays (this round did not map it); a keyless record stays (tiercompact's promise,
  where Kafka drops it); a record whose key has a later offset in the map goes (superseded); a
  tombstone goes once its batch's delete horizon (KIP-534) has passed; anything else stays.
* :func:`retain_batch` and :func:`emit_batch`, the write step: nothing left is an empty 61-byte header (kept batches)
  or nothing; everything left and no new horizon is the batch byte for byte; otherwise the
  batch is rebuilt (same base offset, lastOffsetDelta, producer fields and codec).

The reference cleaner (``cleaner/cleaner.py``) and the pure-Python kernels
(``cleaner/kernels/_fastpath_py.py``) run this code; the compiled kernels
(``cleaner/kernels/_fastpath.pyx``) repeat its record rule and its plain-batch case in C, held
to the same bytes by tests/cleaner/test_fastpath_differential.py.
"""

from __future__ import annotations

import enum
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from functools import partial
from typing import Protocol

from cleaner.stats import CleanerStats
from cleaner.throttler import Throttler
from cleaner.transactions import CleanedTransactionMetadata
from log.record import RecordBatch, RecordBatchBuilder, build_empty_header
from log.types import TimestampType

LONG_MAX = 2**63 - 1


class ProducerInfo(Protocol):
    """What the cleaner reads of a producer's state (log.producer_state.ProducerStateEntry fits)."""

    last_data_offset: int  # -1 when the producer has no data batch
    producer_epoch: int


def no_check() -> None:
    return None


@dataclass(frozen=True, slots=True)
class CleanContext:
    """Everything ``clean_into`` needs besides the map and the segments (one per round).

    ``txn_metadata`` is shared (and mutated) by every segment of the round, in log order.
    ``check_done`` raises LogCleaningAbortedError when the round must stop.
    """

    now_ms: int
    delete_retention_ms: int
    upper_bound_of_round: int
    active_producers: Mapping[int, ProducerInfo]
    txn_metadata: CleanedTransactionMetadata
    legacy_delete_horizon_ms: int = 0
    throttler: Throttler | None = None
    check_done: Callable[[], None] = no_check
    io_buffer_size: int = 256 * 1024

    def __post_init__(self) -> None:
        if self.delete_retention_ms < 0:
            raise ValueError(f"delete_retention_ms must be >= 0, got {self.delete_retention_ms}")
        if self.io_buffer_size <= 0:
            raise ValueError(f"io_buffer_size must be > 0, got {self.io_buffer_size}")

    @property
    def new_delete_horizon_ms(self) -> int:
        return min(self.now_ms + self.delete_retention_ms, LONG_MAX)


# ---- the batch ----------------------------------------------------------------------------------

class BatchRetention(enum.Enum):
    """Kafka's RecordFilter.BatchRetention."""

    DELETE = "delete"              # drop the batch without looking at its records
    DELETE_EMPTY = "delete_empty"  # keep retained records; drop the batch if none remain
    RETAIN_EMPTY = "retain_empty"  # keep at least an empty header


def _is_last_of_producer(batch: RecordBatch, producers: Mapping[int, ProducerInfo]) -> bool:
    p = producers.get(batch.producer_id)
    if p is None:
        return False
    if p.last_data_offset >= 0:
        return batch.last_offset == p.last_data_offset
    return batch.is_control and batch.producer_epoch == p.producer_epoch


@dataclass(frozen=True, slots=True)
class BatchDecision:
    """What :func:`decide_batch` concluded for one batch."""

    retention: BatchRetention
    #: drop every record (an aborted transaction's data, or a marker past its delete horizon)
    discard_records: bool
    #: a transaction marker the transaction state may discard: kept for now, it needs a
    #: delete horizon so a later round can remove it
    marker_for_empty_txn: bool


def decide_batch(b: RecordBatch, txn: CleanedTransactionMetadata, now_ms: int, upper_bound_of_round: int,
                 producers: Mapping[int, ProducerInfo]) -> BatchDecision:
    """The batch-level retention decision of one batch, for every cleaner.

    Call it for every batch of a segment, in log order: it advances ``txn``. Kafka's
    ``checkBatchRetention``: the last batch of a live producer and the batch ending at the
    round's upper bound are kept even if emptied (RETAIN_EMPTY: the producer state and the
    log end must survive); aborted data and expired markers are deleted whole (DELETE);
    otherwise the batch goes if all its records do (DELETE_EMPTY).
    """
    if b.is_control:
        can_discard = txn.on_control_batch_read(b)
        discard_records = can_discard and b.has_delete_horizon and (b.delete_horizon_ms or 0) <= now_ms
    else:
        can_discard = txn.on_batch_read(b)
        discard_records = can_discard
    if b.producer_id >= 0 and _is_last_of_producer(b, producers):
        retention = BatchRetention.RETAIN_EMPTY
    elif b.next_offset == upper_bound_of_round:
        retention = BatchRetention.RETAIN_EMPTY
    elif discard_records:
        retention = BatchRetention.DELETE
    else:
        retention = BatchRetention.DELETE_EMPTY
    return BatchDecision(retention, discard_records, can_discard and b.is_control)


def retains_tombstones(b: RecordBatch, now_ms: int) -> bool:
    """Whether ``b``'s tombstones stay this round: it has no delete horizon yet, or it has not passed."""
    return not b.has_delete_horizon or now_ms < (b.delete_horizon_ms or 0)


# ---- the records ----------------------------------------------------------------------------

@dataclass(slots=True)
class RecordsKept:
    """What :func:`decide_records` concluded for one data batch's records."""

    #: per record, whether it stays (bools, or 0/1 bytes from the kernels)
    keep: Sequence[int]
    retained: int
    #: a tombstone (keyed, no value) stays: the batch needs a delete horizon if it has none
    tombstone_kept: bool
    #: keyless records among the mapped ones (kept; Kafka counts them as invalid)
    keyless: int
    #: records dropped because the map holds a later offset of their key; the other dropped
    #: ones are tombstones past the delete horizon (the round report's two reasons)
    superseded: int


def decide_records(key_offsets: Iterable[tuple[int, bytes | None, bool]], latest: int,
                   mapped_offset: Callable[[bytes], int], retain_deletes: bool) -> RecordsKept:
    """The keep rule over one data batch's ``(offset, key, has value)``, in order.

    ``latest`` is the map's last offset (records after it were not mapped this round and stay);
    ``mapped_offset(key)`` is the map's offset for ``key`` (-1 if absent), asked only for keyed
    records up to ``latest``, in record order; ``retain_deletes`` is :func:`retains_tombstones`.
    """
    keep: list[bool] = []
    retained = keyless = superseded = 0
    tombstone_kept = False
    for off, key, has_value in key_offsets:
        if off > latest:
            k = True
        elif key is None:
            # tiercompact keeps keyless records (Kafka's shouldRetainRecord drops them)
            keyless += 1
            k = True
        elif off < mapped_offset(key):
            k = False
            superseded += 1
        else:
            k = has_value or retain_deletes
        if k:
            retained += 1
            if not has_value and key is not None:
                tombstone_kept = True
        keep.append(k)
    return RecordsKept(keep, retained, tombstone_kept, keyless, superseded)


# ---- writing what stays ---------------------------------------------------------------------------

def rebuild_batch(batch: RecordBatch, keep: Sequence[int] | None, delete_horizon_ms: int | None) -> bytes:
    """``batch`` with only the records ``keep`` marks (None: all), written by RecordBatchBuilder
    (the reference encoder): same base offset, lastOffsetDelta, producer fields and codec."""
    builder = RecordBatchBuilder(
        batch.base_offset,
        compression=batch.compression,
        timestamp_type=batch.timestamp_type,
        producer_id=batch.producer_id,
        producer_epoch=batch.producer_epoch,
        base_sequence=batch.base_sequence,
        is_transactional=batch.is_transactional,
        is_control=batch.is_control,
        partition_leader_epoch=batch.partition_leader_epoch,
        delete_horizon_ms=delete_horizon_ms,
        log_append_time_ms=batch.max_timestamp if batch.timestamp_type is TimestampType.LOG_APPEND_TIME else None,
    )
    append = builder.append
    if keep is None:
        keep = [True] * batch.records_count
    for (offset, timestamp, key, value, headers, _seq), k in zip(batch.iter_record_fields(), keep, strict=True):
        if k:
            append(offset, timestamp, key, value, headers)
    return builder.build(last_offset_delta=batch.last_offset_delta)


def emit_batch(b: RecordBatch, decision: BatchDecision, retained: int, count: int, tombstone_kept: bool,
               new_delete_horizon_ms: int, stats: CleanerStats,
               rebuild: Callable[[int | None], bytes]) -> tuple[bytes, int, bool] | None:
    """What of ``b`` is written, once ``retained`` of its ``count`` records are known to stay:
    ``(bytes, max timestamp, whether the pending output may be flushed after it)`` or None.

    Nothing retained: an empty header if the batch is RETAIN_EMPTY (not followed by a flush,
    as Kafka's filterTo), else nothing. Everything retained and no delete horizon to add: the
    batch's own bytes. Otherwise ``rebuild(horizon)`` writes it, with a new delete horizon if a
    tombstone or a marker that may go later stays and the batch has none. Counts into ``stats``.
    """
    if retained == 0:
        if decision.retention is BatchRetention.RETAIN_EMPTY:
            data = build_empty_header(b)
            stats.batches_emptied += 1
            stats.recopy_messages(0, len(data))
            return data, b.max_timestamp, False
        stats.batches_deleted += 1
        return None
    need_horizon = (tombstone_kept or decision.marker_for_empty_txn) and not b.has_delete_horizon
    if retained == count and not need_horizon:
        data = bytes(b.raw)
        max_ts = b.max_timestamp
        stats.batches_copied += 1
    else:
        data = rebuild(new_delete_horizon_ms if need_horizon else b.delete_horizon_ms)
        max_ts = RecordBatch(data).max_timestamp
        stats.batches_rebuilt += 1
    stats.recopy_messages(retained, len(data))
    return data, max_ts, True


def retain_batch(b: RecordBatch, decision: BatchDecision, stats: CleanerStats, new_delete_horizon_ms: int,
                 records: Callable[[], RecordsKept],
                 rebuild: Callable[[Sequence[int] | None, int | None], bytes]) -> tuple[bytes, int, bool] | None:
    """What of ``b`` is written after ``decision`` (:func:`emit_batch`'s answer), counting what is
    read and removed into ``stats``.

    A DELETE batch goes unread; a batch whose records are discarded keeps none; a marker keeps
    its record; a data batch keeps what ``records()`` (:func:`decide_records`, or a kernel giving
    the same answer) says. ``rebuild(keep, horizon)`` writes a batch that changes (``keep`` None:
    every record, for a marker).
    """
    is_control = b.is_control
    count = b.records_count
    if decision.retention is BatchRetention.DELETE:
        stats.batches_deleted += 1
        stats.removed_discarded_batch(is_control, count)
        return None
    stats.messages_read += count
    kept: RecordsKept | None = None
    if decision.discard_records:
        retained = 0
        stats.removed_discarded_batch(is_control, count)
    elif is_control:
        retained = count
    else:
        kept = records()
        retained = kept.retained
        stats.invalid_messages_read += kept.keyless
        stats.removed_superseded += kept.superseded
        stats.removed_tombstone += count - retained - kept.superseded
    return emit_batch(b, decision, retained, count, kept is not None and kept.tombstone_kept,
                      new_delete_horizon_ms, stats, partial(rebuild, kept.keep if kept else None))
