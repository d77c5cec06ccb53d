"""TieredReadPath: one read path over a partition's local and remote segments.

Offsets at or above the local log start are read locally (bounded by the last stable offset
for ``read_committed``); offsets below it are served from the referenced remote segment that
holds them (or the next one, when compaction left a gap) through the
:class:`~remote.remote_reader.RemoteSegmentReader`. For ``read_committed`` the aborted
transactions come from the remote TRANSACTION indexes, walking forward to later remote and
local segments until the search is complete (Kafka's collectAbortedTransactions: an ABORT
marker's entry lives in the segment holding the marker, possibly after the fetched range).

Thread-safe: it takes no lock of its own; the LocalLog, the metadata store and the reader
are thread-safe, and a segment that disappears between lookup and read (retention,
compaction) makes the read start over, up to three times.
"""

from __future__ import annotations

from dataclasses import dataclass

from log.errors import OffsetOutOfRangeError
from log.fetch import READ_COMMITTED, check_isolation, read_local, records_from_batches
from log.index.txn_index import AbortedTxn
from log.local_log import LocalLog
from log.log_manager import LogManager
from log.record import Record
from log.record.batch import make_record
from log.record.decode import RecordFields
from log.types import TopicPartition
from metadata.manager import RemoteLogMetadataManager
from metadata.types import RemoteLogSegmentMetadata
from remote.errors import ObjectNotFoundError, SegmentReplacedError
from remote.read_cache import MiB
from remote.remote_reader import RemoteSegmentReader, collect_aborted


@dataclass(frozen=True, slots=True)
class ReadResult:
    """A page of records from either tier; ``fields`` and :attr:`records` as in
    :class:`~log.fetch.FetchResult` (Records made on each access of ``records``)."""

    fields: list[RecordFields]
    next_offset: int
    log_start_offset: int
    high_watermark: int

    @property
    def records(self) -> list[Record]:
        make = make_record
        return [make(*f) for f in self.fields]


def read_local_page(log: LocalLog, offset: int, *, max_bytes: int, max_records: int, isolation: str) -> ReadResult:
    """A page of a partition without remote storage, from ``offset``.

    A page of only control batches or aborted records holds no record but moves the offset;
    reading goes on, so an empty page always means "nothing more below the upper bound" (the
    last stable offset for ``read_committed``, else the high watermark)."""
    hw = log.high_watermark
    upper = log.last_stable_offset if isolation == READ_COMMITTED else hw
    start = log.log_start_offset
    nxt = offset
    while nxt < upper:
        res = read_local(log, nxt, max_bytes=max_bytes, isolation=isolation, max_records=max_records)
        if res.fields or res.next_offset <= nxt:
            return ReadResult(res.fields, max(res.next_offset, nxt), start, hw)
        nxt = res.next_offset
    if offset > hw:
        log.read(offset)  # raises OffsetOutOfRangeError with the log's own message
    return ReadResult([], max(nxt, offset) if offset <= upper else offset, start, hw)


def log_start_over_tiers(log: LocalLog, first_remote: RemoteLogSegmentMetadata | None) -> int:
    """A tiered partition's log start offset: the start of its earliest remote segment (``first_remote``) or its
    local log start, whichever is lower, and never below the log start offset DeleteRecords set."""
    local = log.log_start_offset
    if first_remote is None:
        return local
    return max(min(first_remote.start_offset, local), log.deleted_records_offset)


class TieredReadPath:
    def __init__(self, log_manager: LogManager, metadata: RemoteLogMetadataManager,
                 reader: RemoteSegmentReader) -> None:
        self.log_manager = log_manager
        self.metadata = metadata
        self.reader = reader

    def log_start_offset(self, tp: TopicPartition) -> int:
        """min(start of the earliest referenced remote segment, local log start), and never below
        the log start offset DeleteRecords set."""
        log = self.log_manager.get_log(tp)
        if log.log_start_offset == 0:
            return 0  # no offset is lower: the metadata store need not be asked (a query per read)
        return log_start_over_tiers(log, self.metadata.remote_log_segment_metadata(tp, 0))

    def read(self, tp: TopicPartition, offset: int, *, max_bytes: int = MiB, isolation: str = "read_uncommitted",
             max_records: int = 500) -> ReadResult:
        """Records from ``offset`` on, from whichever tier holds them (local preferred).

        Raises OffsetOutOfRangeError below the log start (either tier) or above the log end.
        """
        check_isolation(isolation)
        for attempt in range(3):
            try:
                return self._read(tp, offset, max_bytes, isolation, max_records)
            except (FileNotFoundError, ObjectNotFoundError):
                # retention or compaction removed a segment between the lookup and the read
                if attempt == 2:
                    raise
        raise AssertionError("unreachable")  # pragma: no cover

    def _read(self, tp: TopicPartition, offset: int, max_bytes: int, isolation: str,
              max_records: int) -> ReadResult:
        log = self.log_manager.get_log(tp)
        hw = log.high_watermark
        start = self.log_start_offset(tp)
        if offset < start or offset > log.log_end_offset:
            raise OffsetOutOfRangeError(
                f"offset {offset} is out of range for {tp}: valid offsets are [{start}, {log.log_end_offset}] "
                f"(log start offset to log end offset)")
        cur = offset
        scanned = 0
        while True:
            local_start = log.log_start_offset
            if cur >= local_start:
                return self._read_local(log, cur, max_bytes, isolation, max_records, start, hw)
            if scanned >= max_bytes:
                # only compacted-away, aborted or control data so far: report progress, a
                # consumer fetches again from next_offset (bounds the work of one call)
                return ReadResult([], cur, start, hw)
            md = self.metadata.remote_log_segment_metadata(tp, cur)
            if md is None or md.start_offset >= local_start:
                cur = local_start  # a gap up to the local log
                continue
            cur = max(cur, md.start_offset)
            batches = self.reader.read(md, cur, max_bytes, max_records=max_records)
            if not batches:
                cur = md.end_offset + 1  # compaction emptied the rest of this segment
                continue
            scanned += sum(b.size_in_bytes for b in batches)
            aborted: list[AbortedTxn] = []
            if isolation == READ_COMMITTED:
                aborted = self._remote_aborted(tp, log, md, cur, batches[-1].next_offset)
            res = records_from_batches(batches, cur, isolation=isolation, aborted=aborted, max_records=max_records)
            if res.fields:
                return ReadResult(res.fields, res.next_offset, start, hw)
            # a gap left by compaction (or only aborted/control batches): go on to the next offset present
            cur = res.next_offset if res.next_offset > cur else md.end_offset + 1

    def _read_local(self, log: LocalLog, offset: int, max_bytes: int, isolation: str, max_records: int,
                    start: int, hw: int) -> ReadResult:
        res = read_local(log, offset, max_bytes=max_bytes, isolation=isolation, max_records=max_records)
        return ReadResult(res.fields, res.next_offset, start, hw)

    def remote_aborted(self, tp: TopicPartition, log: LocalLog, md: RemoteLogSegmentMetadata, start: int,
                       upper: int) -> list[AbortedTxn]:
        """The aborted transactions overlapping ``[start, upper)`` of a read from remote segment ``md``
        (what a Kafka Fetch of that range answers read_committed consumers)."""
        return self._remote_aborted(tp, log, md, start, upper)

    def _remote_aborted(self, tp: TopicPartition, log: LocalLog, md: RemoteLogSegmentMetadata, start: int,
                        upper: int) -> list[AbortedTxn]:
        """Kafka's collectAbortedTransactions for a remote fetch: this segment's txn index,
        then later remote segments, then the local log, until an entry's LSO reaches ``upper``
        (an ABORT marker lives in the segment holding it, possibly after the fetched range).

        Raises SegmentReplacedError when ``md`` was replaced while this ran: a cleaner's publish replaces ``md`` and
        the segments after it with a segment that begins where ``md`` does, so the later segments listed here would
        no longer hold the ABORT markers of ``md``'s aborted records, and a read_committed reader would see those
        records. The read starts over from the replacement instead."""
        out = self._collect_remote_aborted(tp, log, md, start, upper)
        current = self.metadata.remote_log_segment_metadata(tp, start)
        if current is None or current.id != md.id:
            raise SegmentReplacedError(f"remote segment {md.id} of {tp} was replaced while read", key=md.id)
        return out

    def _collect_remote_aborted(self, tp: TopicPartition, log: LocalLog, md: RemoteLogSegmentMetadata, start: int,
                                upper: int) -> list[AbortedTxn]:
        out, complete = collect_aborted(self.reader.aborted_transactions(md), start, upper)
        if complete:
            return out
        for later in self.metadata.list_remote_log_segments(tp):
            if later.start_offset <= md.start_offset or later.id == md.id:
                continue
            found, complete = collect_aborted(self.reader.aborted_transactions(later), start, upper)
            out.extend(found)
            if complete:
                return out
        local_start = log.log_start_offset
        found, _ = collect_aborted(log.collect_aborted_transactions(local_start, log.log_end_offset + 1),
                                   start, upper)
        seen = {(t.producer_id, t.first_offset) for t in out}
        out.extend(t for t in found if (t.producer_id, t.first_offset) not in seen)
        return out

