"""RemoteSegmentReader: record batches and aborted transactions out of one remote segment.

The remote half of the RemoteLogManager's read path (Kafka's RemoteLogReader /
RemoteLogManager.read): look the target offset up in the segment's remote offset index
(``IndexType.OFFSET``, Kafka's 8-byte ``relativeOffset, position`` entries, relative to the
segment's start offset), fetch from that byte position through the
:class:`~remote.read_cache.RemoteReadCache` in windows of ``max(max_bytes, 64 KiB)``, and
walk whole batches. A batch larger than the window is fetched whole (its length is in the
first 12 bytes). Every batch read from the object store has its CRC checked, since it left
our disk. Thread-safe (stateless apart from the thread-safe cache and counters).
"""

from __future__ import annotations

import bisect
import logging
import mmap
import struct
from collections.abc import Iterable

from log.errors import CorruptRecordError
from log.index.txn_index import AbortedTxn, collect_aborted_txns
from log.locks import RANK_LEAF, ordered_lock
from log.record import LOG_OVERHEAD, RecordBatch, iter_batches
from metadata.types import RemoteLogSegmentMetadata
from remote.errors import RemoteStorageIOError
from remote.read_cache import RemoteReadCache
from remote.storage_manager import IndexType, RemoteStorageManager

logger = logging.getLogger(__name__)

MIN_WINDOW = 64 * 1024
_INDEX_READ_ATTEMPTS = 3
_OFFSET_ENTRY = struct.Struct(">ii")
_TXN_ENTRY = struct.Struct(">hqqqq")
_TIME_ENTRY = struct.Struct(">qi")


class RemoteSegmentReader:
    def __init__(self, rsm: RemoteStorageManager, cache: RemoteReadCache) -> None:
        self.rsm = rsm
        self.cache = cache
        self._lock = ordered_lock("remote.reader", RANK_LEAF)
        self.bytes_downloaded = 0

    def _count(self, n: int) -> None:
        with self._lock:
            self.bytes_downloaded += n

    # ---- indexes -----------------------------------------------------------------------------
    def _index_bytes(self, md: RemoteLogSegmentMetadata, index: IndexType) -> bytes:
        def load() -> bytes:
            data = self.rsm.fetch_index(md, index)
            self._count(len(data))
            if not data and index is IndexType.TRANSACTION:
                return data  # copied without a txn index
            # a short whole-object read would silently drop index entries (for the txn index:
            # aborted records shown to read_committed consumers), so check it against the size
            key = self.rsm.object_key(md, index)
            for _ in range(_INDEX_READ_ATTEMPTS):
                expected = self.rsm.store.size(key)
                if len(data) == expected:
                    return data
                data = self.rsm.fetch_index(md, index)
                self._count(len(data))
            raise RemoteStorageIOError(f"index read returned {len(data)} of {expected} bytes after "
                                       f"{_INDEX_READ_ATTEMPTS} attempts", key=key)

        return self.cache.get(f"{md.id}{index.value}", load)

    def offset_index(self, md: RemoteLogSegmentMetadata) -> list[tuple[int, int]]:
        """The remote offset index as ``[(absolute offset, position)]``."""
        data = self._index_bytes(md, IndexType.OFFSET)
        key = self.rsm.object_key(md, IndexType.OFFSET)
        if len(data) % _OFFSET_ENTRY.size:
            raise CorruptRecordError(f"offset index of {len(data)} bytes is not a multiple of 8", source=key)
        return [(md.start_offset + rel, pos) for rel, pos in _OFFSET_ENTRY.iter_unpack(data)]

    def position_for(self, md: RemoteLogSegmentMetadata, offset: int) -> int:
        """Byte position of the batch to start scanning at for ``offset`` (Kafka's lookup)."""
        entries = self.offset_index(md)
        i = bisect.bisect_right(entries, (offset, 2**62)) - 1
        if i < 0:
            return 0
        pos = entries[i][1]
        return pos if 0 <= pos < md.segment_size_in_bytes else 0

    def time_index(self, md: RemoteLogSegmentMetadata) -> list[tuple[int, int]]:
        """The remote time index as ``[(timestamp, absolute offset)]`` (Kafka's 12-byte entries)."""
        data = self._index_bytes(md, IndexType.TIMESTAMP)
        if len(data) % _TIME_ENTRY.size:
            raise CorruptRecordError(f"time index of {len(data)} bytes is not a multiple of 12",
                                     source=self.rsm.object_key(md, IndexType.TIMESTAMP))
        return [(ts, md.start_offset + rel) for ts, rel in _TIME_ENTRY.iter_unpack(data)]

    def aborted_transactions(self, md: RemoteLogSegmentMetadata) -> list[AbortedTxn]:
        data = self._index_bytes(md, IndexType.TRANSACTION)
        key = self.rsm.object_key(md, IndexType.TRANSACTION)
        if len(data) % _TXN_ENTRY.size:
            raise CorruptRecordError(f"transaction index of {len(data)} bytes is not a multiple of 34", source=key)
        out = []
        for version, pid, first, last, lso in _TXN_ENTRY.iter_unpack(data):
            if version != 0 or last < first:
                raise CorruptRecordError("transaction index entry invalid", source=key)
            out.append(AbortedTxn(pid, first, last, lso))
        return out

    # ---- data --------------------------------------------------------------------------------
    def _range(self, md: RemoteLogSegmentMetadata, start: int, end: int) -> bytes:
        def fetch(lo: int, hi: int) -> bytes:
            data = self.rsm.fetch_log_segment(md, lo, hi)
            self._count(len(data))
            return data

        return self.cache.read_range(md.id, md.segment_size_in_bytes, start, end, fetch)

    def read(self, md: RemoteLogSegmentMetadata, offset: int, max_bytes: int,
             max_records: int | None = None) -> list[RecordBatch]:
        """Batches of the segment holding offsets >= ``offset``, up to ``max_bytes`` (at least
        one batch if any remains). An empty list means the segment holds nothing at or after
        ``offset`` (compaction removed its tail). With ``max_records`` the read also stops once
        the data batches read may hold that many records from ``offset`` on (as LocalLog.read
        does), instead of checking and returning batches a page will not use.

        Bytes that fail a check (CRC, or offsets outside the segment's range, which the CRC does
        not cover) may have been damaged on the way: the cached ranges are dropped and the
        segment is fetched once more before the corruption is reported.
        """
        try:
            return self._read(md, offset, max_bytes, max_records)
        except CorruptRecordError as e:
            logger.warning("%s: %s; fetching the segment again", md.id, e)
            self.cache.invalidate_segment(md.id)
            return self._read(md, offset, max_bytes, max_records)

    def _read(self, md: RemoteLogSegmentMetadata, offset: int, max_bytes: int,
              max_records: int | None = None) -> list[RecordBatch]:
        size = md.segment_size_in_bytes
        source = self.rsm.object_key(md)
        pos = self.position_for(md, offset)
        window = max(max_bytes, MIN_WINDOW)
        out: list[RecordBatch] = []
        total = 0
        records = 0
        first_checked = pos == 0
        while pos < size:
            data = self._range(md, pos, min(size, pos + window))
            consumed = 0
            rescan = False
            for p, batch in iter_batches(data, source=source, allow_truncated_tail=True):
                if not first_checked:
                    first_checked = True
                    if batch.base_offset > offset:
                        rescan = True  # the index pointed past the target: scan from the start
                        break
                consumed = p + batch.size_in_bytes
                if batch.last_offset < offset:
                    continue
                if out and total + batch.size_in_bytes > max_bytes:
                    return out
                batch.ensure_valid(source=source, position=pos + p)
                if batch.base_offset < md.start_offset or batch.last_offset > md.end_offset \
                        or (out and batch.base_offset <= out[-1].last_offset):
                    raise CorruptRecordError(
                        f"batch offsets [{batch.base_offset}, {batch.last_offset}] lie outside the segment's "
                        f"[{md.start_offset}, {md.end_offset}] or overlap the previous batch", source=source,
                        position=pos + p)
                out.append(batch)
                total += batch.size_in_bytes
                if max_records is not None and not batch.is_control:
                    # at most this many of the batch's records lie at or after offset
                    records += min(batch.records_count, batch.last_offset - max(offset, batch.base_offset) + 1)
                    if records >= max_records:
                        return out
            if rescan:
                pos = 0
                continue
            if consumed == 0:
                if len(data) < LOG_OVERHEAD:
                    raise CorruptRecordError(f"truncated batch header ({len(data)} bytes)", source=source,
                                             position=pos)
                length = int.from_bytes(data[8:12], "big", signed=True)
                if length <= 0 or pos + LOG_OVERHEAD + length > size:
                    raise CorruptRecordError(f"batch length {length} runs past the segment's {size} bytes",
                                             source=source, position=pos)
                window = LOG_OVERHEAD + length  # one batch bigger than the window: fetch it whole
                continue
            pos += consumed
            if total >= max_bytes:
                break
        return out


def verify_segment_bytes(buf: bytes | memoryview | mmap.mmap, md: RemoteLogSegmentMetadata, source: str) -> None:
    """Check a whole downloaded segment as :meth:`RemoteSegmentReader.read` checks a range: every
    batch's CRC, and offsets inside the segment's range and increasing (a base offset lies
    outside the CRC). Raises CorruptRecordError naming ``source`` and the byte position."""
    last = -1
    for pos, batch in iter_batches(memoryview(buf), source=source):
        batch.ensure_valid(source=source, position=pos)
        if batch.base_offset < md.start_offset or batch.last_offset > md.end_offset or batch.base_offset <= last:
            raise CorruptRecordError(
                f"batch offsets [{batch.base_offset}, {batch.last_offset}] lie outside the segment's "
                f"[{md.start_offset}, {md.end_offset}] or overlap the previous batch", source=source, position=pos)
        last = batch.last_offset


def collect_aborted(txns: Iterable[AbortedTxn], start: int, upper: int) -> tuple[list[AbortedTxn], bool]:
    """Kafka's TransactionIndex.collectAbortedTxns over entries: those overlapping
    ``[start, upper)``, and whether the search is complete (any entry's LSO >= upper, matching
    or not). The one rule every engine uses: :func:`log.index.txn_index.collect_aborted_txns`."""
    return collect_aborted_txns(txns, start, upper)
