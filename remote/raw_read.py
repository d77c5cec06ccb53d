"""Kafka Fetch and ListOffsets over both tiers of a partition: stored batch bytes, offsets, aborted transactions.

A fetch at or above the local log start returns the local segments' bytes
(:func:`log.fetch_raw.read_raw`); below it, the bytes of the remote segment holding the offset,
read through the :class:`~remote.tiered_read.TieredReadPath`'s reader and its cache (Kafka's
RemoteLogManager.read: one remote segment per fetch, at least one whole batch). read_committed
is bounded by the last stable offset and carries the aborted transactions of the range read,
from the local or remote transaction indexes. Timestamp look-ups search the remote segments'
time indexes below the local log start, then the local ones (Kafka's findOffsetByTimestamp).
Blocking (disk, metadata store, object store): call from a worker thread.
"""

from __future__ import annotations

from dataclasses import dataclass

from log.errors import OffsetOutOfRangeError
from log.fetch_raw import join_chunks, read_raw
from log.index.txn_index import AbortedTxn
from log.local_log import LocalLog
from log.offset_lookup import (
    TimestampAndOffset,
    epoch_for_offset,
    first_at_or_after,
    local_max_timestamp,
    local_offset_for_timestamp,
    record_of_max_timestamp,
)
from metadata.types import RemoteLogSegmentMetadata
from remote.errors import ObjectNotFoundError
from remote.tiered_read import TieredReadPath

_READ_ATTEMPTS = 3
_SCAN_BYTES = 1 << 20


@dataclass(frozen=True, slots=True)
class PartitionFetch:
    """One partition's Fetch answer: the stored bytes and the offsets a FetchResponse carries."""

    #: the stored batches as the buffers read (log/fetch_raw.py's RawBatches.chunks); ``data`` joins them
    chunks: tuple[bytes | memoryview, ...]
    high_watermark: int
    last_stable_offset: int
    log_start_offset: int
    #: read_committed only (None for read_uncommitted): transactions aborted within the range read
    aborted: list[AbortedTxn] | None

    @property
    def data(self) -> bytes | memoryview:
        return join_chunks(self.chunks)


class RawTieredRead:
    """Fetch and offset look-ups over a partition's local log and, when tiered, its remote segments."""

    def __init__(self, read_path: TieredReadPath | None) -> None:
        self.read_path = read_path

    def log_start_offset(self, log: LocalLog) -> int:
        """The log start offset over both tiers (the local one for a partition that is not tiered)."""
        if self.read_path is None or not log.config.remote_storage_enable:
            return log.log_start_offset
        return self.read_path.log_start_offset(log.topic_partition)

    def fetch(self, log: LocalLog, offset: int, max_bytes: int, *, committed: bool = False,
              min_one: bool = True) -> PartitionFetch:
        """Stored batches from the one holding ``offset``. Raises OffsetOutOfRangeError outside
        [log start offset, log end offset]."""
        for attempt in range(_READ_ATTEMPTS):
            try:
                return self._fetch(log, offset, max_bytes, committed, min_one)
            except (FileNotFoundError, ObjectNotFoundError):
                # retention or compaction removed a segment between the look-up and the read
                if attempt == _READ_ATTEMPTS - 1:
                    raise
        raise AssertionError("unreachable")  # pragma: no cover

    def _fetch(self, log: LocalLog, offset: int, max_bytes: int, committed: bool, min_one: bool) -> PartitionFetch:
        hw = log.high_watermark
        lso = log.last_stable_offset
        start = self.log_start_offset(log)
        if offset < start or offset > hw:
            raise OffsetOutOfRangeError(f"offset {offset} is out of range for {log.topic_partition}: valid offsets "
                                        f"are [{start}, {hw}]")
        upper = lso if committed else hw
        empty = PartitionFetch((), hw, lso, start, [] if committed else None)
        if offset >= upper:
            return empty
        local_start = log.log_start_offset
        if offset < local_start and self.read_path is not None:
            res = self._fetch_remote(log, offset, max_bytes, committed, min_one, lso, local_start)
            if res is not None:
                return PartitionFetch((res[0],) if res[0] else (), hw, lso, start, res[1])
            offset = local_start  # nothing remote at or after the offset: the next data is local
        raw = read_raw(log, offset, max_bytes, min_one=min_one, max_offset=lso if committed else None)
        aborted = None
        if committed:
            aborted = log.collect_aborted_transactions(offset, raw.next_offset) if raw.chunks else []
        return PartitionFetch(raw.chunks, hw, lso, start, aborted)

    def _fetch_remote(self, log: LocalLog, offset: int, max_bytes: int, committed: bool, min_one: bool, lso: int,
                      local_start: int) -> tuple[bytes, list[AbortedTxn] | None] | None:
        assert self.read_path is not None
        tp = log.topic_partition
        cur = offset
        while cur < local_start:
            md = self.read_path.metadata.remote_log_segment_metadata(tp, cur)
            if md is None or md.start_offset >= local_start:
                return None
            cur = max(cur, md.start_offset)
            batches = self.read_path.reader.read(md, cur, max(max_bytes, 1))
            if committed:
                batches = [b for b in batches if b.base_offset < lso]
            if not batches:
                cur = md.end_offset + 1  # compaction emptied the rest of this segment
                continue
            if not min_one and batches[0].size_in_bytes > max_bytes:
                return b"", ([] if committed else None)
            data = b"".join(b.raw for b in batches)
            aborted = None
            if committed:
                aborted = self.read_path.remote_aborted(tp, log, md, cur, batches[-1].next_offset)
            return data, aborted
        return None

    # ---- ListOffsets -------------------------------------------------------------------------
    def _remote_segments(self, log: LocalLog) -> list[RemoteLogSegmentMetadata]:
        if self.read_path is None or not log.config.remote_storage_enable:
            return []
        local_start, floor = log.log_start_offset, log.deleted_records_offset
        return [md for md in self.read_path.metadata.list_remote_log_segments(log.topic_partition)
                if md.start_offset < local_start and md.end_offset >= floor]

    def offset_for_timestamp(self, log: LocalLog, timestamp: int) -> TimestampAndOffset | None:
        """The first record whose timestamp is >= ``timestamp``, over both tiers; None if none."""
        start = self.log_start_offset(log)
        for md in self._remote_segments(log):
            if md.max_timestamp_ms < timestamp:
                continue
            found = self._remote_by_timestamp(md, timestamp, start)
            if found is not None:
                return found
        return local_offset_for_timestamp(log, timestamp, start)

    def _remote_by_timestamp(self, md: RemoteLogSegmentMetadata, timestamp: int,
                             start: int) -> TimestampAndOffset | None:
        assert self.read_path is not None
        reader = self.read_path.reader
        entries = reader.time_index(md)
        cur = max(md.start_offset, start)
        for ts, off in entries:  # the last entry below the target: records before it are older
            if ts >= timestamp:
                break
            cur = max(cur, off)
        while cur <= md.end_offset:
            batches = reader.read(md, cur, _SCAN_BYTES)
            if not batches:
                return None
            found = first_at_or_after(batches, timestamp, cur)
            if found is not None:
                return found
            cur = batches[-1].next_offset
        return None

    def max_timestamp(self, log: LocalLog) -> TimestampAndOffset | None:
        """KIP-734's MAX_TIMESTAMP over both tiers."""
        best = local_max_timestamp(log)
        remote = [md for md in self._remote_segments(log) if md.max_timestamp_ms >= 0]
        if remote:
            md = max(remote, key=lambda m: m.max_timestamp_ms)
            if best is None or md.max_timestamp_ms > best.timestamp:
                assert self.read_path is not None
                entries = self.read_path.reader.time_index(md)
                if entries:
                    ts, off = entries[-1]
                    batches = self.read_path.reader.read(md, off, _SCAN_BYTES)
                    best = record_of_max_timestamp(batches, ts, off) or \
                        TimestampAndOffset(ts, off, epoch_for_offset(log.epoch_entries, off))
        return best
