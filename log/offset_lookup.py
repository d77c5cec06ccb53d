"""Kafka's offset look-ups over one local log: by timestamp (time indexes), max timestamp, and
the end offset of a leader epoch (LeaderEpochFileCache.endOffsetFor) for OffsetForLeaderEpoch."""

from __future__ import annotations

import bisect
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from log.record import RecordBatch
from log.types import EpochEntry

if TYPE_CHECKING:
    from log.local_log import LocalLog

UNDEFINED_EPOCH = -1
UNDEFINED_EPOCH_OFFSET = -1


@dataclass(frozen=True, slots=True)
class TimestampAndOffset:
    """Kafka's FileRecords.TimestampAndOffset: a record's timestamp, offset and batch leader epoch."""

    timestamp: int
    offset: int
    leader_epoch: int


def first_at_or_after(batches: Iterable[RecordBatch], timestamp: int,
                      start_offset: int = 0) -> TimestampAndOffset | None:
    """The first record at or after ``start_offset`` whose timestamp is >= ``timestamp`` (Kafka's
    LogSegment.findOffsetByTimestamp scan: the first batch whose max timestamp reaches it, then
    its first record that does)."""
    for batch in batches:
        if batch.is_control or batch.last_offset < start_offset or batch.max_timestamp < timestamp:
            continue
        for fields in batch.reader_fields():
            if fields[0] >= start_offset and fields[1] >= timestamp:
                return TimestampAndOffset(fields[1], fields[0], batch.partition_leader_epoch)
    return None


def epoch_for_offset(entries: Sequence[EpochEntry], offset: int) -> int:
    """The leader epoch under which ``offset`` was written (-1 if none is known)."""
    i = bisect.bisect_right([e.start_offset for e in entries], offset) - 1
    return entries[i].epoch if i >= 0 else UNDEFINED_EPOCH


def local_offset_for_timestamp(log: LocalLog, timestamp: int, start_offset: int = 0) -> TimestampAndOffset | None:
    """Kafka's UnifiedLog.fetchOffsetByTimestamp over the local segments: the first segment whose
    largest timestamp reaches ``timestamp``, looked up in its time and offset indexes."""
    for seg in log.all_segments():
        if seg.largest_timestamp < timestamp or seg.read_next_offset() <= start_offset:
            continue
        target = max(seg.time_index.lookup(timestamp), start_offset)
        pos = seg.offset_index.lookup(target)[1] if target > seg.base_offset else 0
        found = first_at_or_after((b for _p, b in seg.batches(pos)), timestamp, start_offset)
        if found is not None:
            return found
    return None


def record_of_max_timestamp(batches: Iterable[RecordBatch], timestamp: int, offset: int) -> TimestampAndOffset | None:
    """The record that holds ``timestamp``, a batch's max timestamp, where a segment or a time index gives only the
    batch (its last ``offset``): the first batch from ``offset`` on with that max timestamp, and in it the first
    record with that timestamp (Kafka's RecordBatch.offsetOfMaxTimestamp, KAFKA-16310), with the batch's leader epoch
    (-1 when it has none)."""
    for batch in batches:
        if batch.last_offset < offset or batch.max_timestamp != timestamp:
            continue
        record = next((f[0] for f in batch.reader_fields() if f[1] == timestamp), batch.last_offset)
        return TimestampAndOffset(timestamp, record, max(batch.partition_leader_epoch, UNDEFINED_EPOCH))
    return None


def local_max_timestamp(log: LocalLog) -> TimestampAndOffset | None:
    """KIP-734's MAX_TIMESTAMP over the local segments: the record with the largest timestamp (the first such in the
    first segment that has it, as Kafka's UnifiedLog.fetchOffsetByTimestamp)."""
    best = None
    for seg in log.all_segments():
        if seg.max_timestamp_so_far >= 0 and (best is None or seg.max_timestamp_so_far > best.max_timestamp_so_far):
            best = seg
    if best is None:
        return None
    ts, off = best.max_timestamp_so_far, best.offset_of_max_timestamp_so_far
    pos = best.offset_index.lookup(off)[1] if off > best.base_offset else 0
    found = record_of_max_timestamp((b for _p, b in best.batches(pos)), ts, off)
    # a segment's max is always one of its batches'; should the scan not find it, the batch's offset is the answer
    return found or TimestampAndOffset(ts, off, epoch_for_offset(log.epoch_entries, off))


def end_offset_for_epoch(entries: Sequence[EpochEntry], requested: int, log_end_offset: int) -> tuple[int, int]:
    """Kafka's LeaderEpochFileCache.endOffsetFor: ``(epoch, end offset)`` of ``requested``, the
    start offset of the first later epoch (the log end offset for the latest one), with the
    largest known epoch <= ``requested``; ``(-1, -1)`` for an unknown or future epoch."""
    if requested == UNDEFINED_EPOCH or not entries:
        return UNDEFINED_EPOCH, UNDEFINED_EPOCH_OFFSET
    if entries[-1].epoch == requested:
        return requested, log_end_offset
    higher = next((e for e in entries if e.epoch > requested), None)
    if higher is None:
        return UNDEFINED_EPOCH, UNDEFINED_EPOCH_OFFSET
    floor = [e for e in entries if e.epoch <= requested]
    return (floor[-1].epoch if floor else requested), higher.start_offset
