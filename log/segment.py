"""One log segment: ``<base>.log`` with its ``.index``, ``.timeindex`` and ``.txnindex``.

Files are named by the 20-digit zero-padded base offset; a suffix (``.cleaned``,
``.swap``, ``.deleted``) is appended to every file name during the swap protocol,
exactly as Kafka's LogFileUtils does (``00000000000000000000.log.cleaned``).

A segment is **not thread-safe**: its LocalLog serialises writers. Readers read the
.log through their own file handles up to a size captured under the log's lock, so a
concurrent append never shows a torn batch.
"""

from __future__ import annotations

import os
from collections.abc import Iterator, Sequence
from pathlib import Path

from log.checkpoint import fsync_path
from log.errors import CorruptRecordError, LogSegmentOffsetOverflowError
from log.index.offset_index import INT32_MAX, OffsetIndex
from log.index.time_index import TimeIndex
from log.index.txn_index import AbortedTxn, TransactionIndex
from log.record import RecordBatch, iter_file_batches
from log.record.records import DEFAULT_BUFFER_SIZE
from log.writeback import start_writeback

#: read window of look-ups and fetch pages: a few batches, not the default MiB of the segment
SCAN_BUFFER_SIZE = 64 * 1024
#: appended bytes whose write-back a segment starts at once (log/writeback.py): what a roll's fsync has left at most
WRITEBACK_BYTES = 4 * 1024 * 1024

LOG_SUFFIX = ".log"
INDEX_SUFFIX = ".index"
TIME_INDEX_SUFFIX = ".timeindex"
TXN_INDEX_SUFFIX = ".txnindex"
SEGMENT_FILE_SUFFIXES = (LOG_SUFFIX, INDEX_SUFFIX, TIME_INDEX_SUFFIX, TXN_INDEX_SUFFIX)
CLEANED_SUFFIX = ".cleaned"
SWAP_SUFFIX = ".swap"
DELETED_SUFFIX = ".deleted"


def filename_prefix(offset: int) -> str:
    return f"{offset:020d}"


def offset_from_filename(name: str) -> int:
    return int(name.split(".", 1)[0])


class LogSegment:
    """A .log file plus indexes; appends go to the end, reads scan from an index hint."""

    def __init__(self, directory: Path, base_offset: int, *, index_interval_bytes: int = 4096,
                 suffix: str = "", create: bool = False) -> None:
        self.dir = Path(directory)
        self.base_offset = base_offset
        self.index_interval_bytes = index_interval_bytes
        self.suffix = suffix
        self.log_path = self._path(LOG_SUFFIX)
        if create:
            self.dir.mkdir(parents=True, exist_ok=True)
            with open(self.log_path, "xb"):
                pass
            for index_suffix in (INDEX_SUFFIX, TIME_INDEX_SUFFIX):  # Kafka creates both with the segment
                self._path(index_suffix).touch()
        elif not self.log_path.exists():
            raise FileNotFoundError(self.log_path)
        self.size = self.log_path.stat().st_size
        self.offset_index = OffsetIndex(self._path(INDEX_SUFFIX), base_offset)
        self.time_index = TimeIndex(self._path(TIME_INDEX_SUFFIX), base_offset)
        self.txn_index = TransactionIndex(self._path(TXN_INDEX_SUFFIX), base_offset)
        self._writer: object | None = None
        #: where the appended bytes whose write-back has not been started begin
        self._writeback_from = self.size
        #: the bytes below this were dropped from the page cache behind the log's window (log/page_cache.py)
        self.cache_dropped_to = 0
        self._bytes_since_last_index_entry = 0
        self.max_timestamp_so_far = -1
        self.offset_of_max_timestamp_so_far = base_offset
        self._first_batch_timestamp: int | None = None
        self._next_offset: int | None = None if self.size else base_offset
        if self.size:
            ts, off = self.time_index.last_entry
            self.max_timestamp_so_far, self.offset_of_max_timestamp_so_far = ts, off

    # ---- naming -------------------------------------------------------------------
    def _path(self, file_suffix: str, suffix: str | None = None) -> Path:
        return self.dir / f"{filename_prefix(self.base_offset)}{file_suffix}{self.suffix if suffix is None else suffix}"

    def files(self) -> list[Path]:
        return [self.log_path, self.offset_index.path, self.time_index.path, self.txn_index.path]

    def change_suffix(self, new_suffix: str) -> None:
        """Rename every file of the segment from its current suffix to ``new_suffix``."""
        self.close_writer()
        for idx in (self.offset_index, self.time_index, self.txn_index):
            name = idx.path.name
            base = name[: len(name) - len(self.suffix)] if self.suffix else name
            idx.rename_to(self.dir / (base + new_suffix))
        new_log = self._path(LOG_SUFFIX, new_suffix)
        os.replace(self.log_path, new_log)
        self.log_path = new_log
        self.suffix = new_suffix

    # ---- writing --------------------------------------------------------------------
    def _file(self):  # type: ignore[no-untyped-def]
        if self._writer is None:
            self._writer = open(self.log_path, "ab")  # noqa: SIM115 - owned by the segment
        return self._writer

    def can_hold(self, last_offset: int) -> bool:
        return 0 <= last_offset - self.base_offset <= INT32_MAX

    def has_overflow(self) -> bool:
        """True when the segment holds offsets beyond its base's 32-bit relative range (a
        segment written by an old Kafka; ours roll first). Kafka's LogSegment.hasOverflow."""
        return self.size > 0 and not self.can_hold(self.read_next_offset() - 1)

    def append(self, data: bytes | bytearray | memoryview, *, largest_offset: int, largest_timestamp: int,
               offset_of_largest_timestamp: int) -> int:
        """Append whole batches; returns the byte position they start at.

        Index entries are added after ``index.interval.bytes``, mapping the largest offset of
        this append to its start position, as Kafka's LogSegment.append does.
        """
        self._check_can_hold(largest_offset)
        if not data:
            return self.size
        position = self.size
        f = self._file()
        f.write(data)
        f.flush()
        self._appended(data, largest_offset, largest_timestamp, offset_of_largest_timestamp)
        self._start_writeback(f)
        return position

    def append_chunks(self, data: bytes | bytearray | memoryview,
                      chunks: Sequence[tuple[int, int, int, int]]) -> None:
        """:meth:`append` of consecutive chunks of ``data``, written with one write: the same
        file bytes, index entries and counters as one append per chunk. ``chunks`` holds per
        chunk ``(end, largest_offset, largest_timestamp, offset_of_largest_timestamp)``, ``end``
        being where it ends in ``data`` (ascending; the last one is ``len(data)``). Every chunk's
        offsets are checked before anything is written. For the cleaner, whose output is many
        small appends (one per ``index.interval.bytes``)."""
        for _end, largest_offset, _ts, _off in chunks:
            self._check_can_hold(largest_offset)
        with memoryview(data) as mv:
            if not len(mv):
                return
            f = self._file()
            f.write(mv)
            f.flush()
            start = 0
            for end, largest_offset, largest_timestamp, offset_of_largest_timestamp in chunks:
                if end > start:
                    with mv[start:end] as chunk:
                        self._appended(chunk, largest_offset, largest_timestamp, offset_of_largest_timestamp)
                start = end
            self._start_writeback(f)

    def _start_writeback(self, f) -> None:  # type: ignore[no-untyped-def]
        """Start the write-back of what was appended since the last start or sync, once that is WRITEBACK_BYTES or
        more, so the fsync at this segment's roll (or a sync) finds little left to write (log/writeback.py)."""
        if self.size - self._writeback_from >= WRITEBACK_BYTES:
            start_writeback(f.fileno(), self._writeback_from, self.size - self._writeback_from)
            self._writeback_from = self.size

    def note_synced(self, position: int) -> None:
        """(Under the log's lock.) An fsync made bytes [0, ``position``) durable: their write-back is not started
        again. A partition synced more often than every WRITEBACK_BYTES (acks=-1 produce, ``flush.messages``) then
        never pays for a ``sync_file_range`` on its append path: measured at half load on the Kafka bench, that
        call took 0.6 ms once every 4 MiB appended, for pages the next fsync writes anyway."""
        self._writeback_from = max(self._writeback_from, min(position, self.size))

    def _shrunk_to(self, size: int) -> None:
        """The file was truncated to ``size``: what is appended again is written back and dropped from there."""
        self.size = size
        self._writeback_from = min(self._writeback_from, size)
        self.cache_dropped_to = min(self.cache_dropped_to, size)

    def _check_can_hold(self, largest_offset: int) -> None:
        if not self.can_hold(largest_offset):
            raise LogSegmentOffsetOverflowError(
                f"offset {largest_offset} cannot be stored in segment {self.base_offset}")

    def _appended(self, data: bytes | bytearray | memoryview, largest_offset: int, largest_timestamp: int,
                  offset_of_largest_timestamp: int) -> None:
        """The bookkeeping of an append of ``data`` (already written at ``self.size``)."""
        position = self.size
        self.size += len(data)
        if largest_timestamp > self.max_timestamp_so_far:
            self.max_timestamp_so_far = largest_timestamp
            self.offset_of_max_timestamp_so_far = offset_of_largest_timestamp
        if position == 0:
            # maxTimestamp of the first batch sits at bytes 35..43 of its header (KIP-354's estimate)
            ts = int.from_bytes(bytes(data[35:43]), "big", signed=True)
            self._first_batch_timestamp = ts if ts >= 0 else 2**63 - 1
        # Kafka adds no entry for the first batch: a lookup below the first entry answers
        # (base offset, position 0) anyway, and a re-cleaned Kafka segment's .index stays
        # byte-identical to Kafka's (empty for a segment under index.interval.bytes).
        if self._bytes_since_last_index_entry > self.index_interval_bytes:
            if not self.offset_index.entries or largest_offset > self.offset_index.last_offset:
                self.offset_index.append(largest_offset, position)
            self.time_index.maybe_append(self.max_timestamp_so_far, self.offset_of_max_timestamp_so_far)
            self._bytes_since_last_index_entry = 0
        self._bytes_since_last_index_entry += len(data)
        self._next_offset = largest_offset + 1

    def append_aborted_txn(self, txn: AbortedTxn) -> None:
        self.txn_index.append(txn)

    def flush(self) -> None:
        if self._writer is not None:
            self._writer.flush()  # type: ignore[attr-defined]
            os.fsync(self._writer.fileno())  # type: ignore[attr-defined]
        for idx in (self.offset_index, self.time_index, self.txn_index):
            idx.flush()

    def close_writer(self) -> None:
        if self._writer is not None:
            self._writer.close()  # type: ignore[attr-defined]
            self._writer = None

    def close(self) -> None:
        self.close_writer()
        for idx in (self.offset_index, self.time_index, self.txn_index):
            idx.close()

    def on_become_inactive(self) -> None:
        """Final time-index entry (max timestamp so far), flush, close the writer."""
        self.hand_off_inactive()
        self.sync_files()

    def hand_off_inactive(self) -> None:
        """Final time-index entry (max timestamp so far); every buffered byte handed to the OS, the writer closed.
        Nothing is synced: a roll leaves that to :meth:`sync_files`, after the log's lock is released."""
        self.time_index.maybe_append(self.max_timestamp_so_far, self.offset_of_max_timestamp_so_far)
        self.close_writer()
        for idx in (self.offset_index, self.time_index, self.txn_index):
            idx.flush_buffer()

    def sync_files(self) -> None:
        """fsync the segment's files through their names, so from any thread: a file renamed or deleted meanwhile
        (the cleaner swapped the segment out, retention removed it) is skipped, its records being elsewhere or
        gone."""
        for path in self.files():
            fsync_path(path, missing_ok=True)

    # ---- reading --------------------------------------------------------------------
    def batches(self, start_position: int = 0, end_position: int | None = None, *,
                buffer_size: int = DEFAULT_BUFFER_SIZE) -> Iterator[tuple[int, RecordBatch]]:
        """(position, batch) for every batch from ``start_position`` up to the size captured now,
        read ``buffer_size`` bytes at a time (more for a larger batch): a caller that wants only
        a few batches (a fetch page, :meth:`find_position`) passes less than the default MiB."""
        end = self.size if end_position is None else end_position
        if start_position >= end:
            return iter(())
        return iter_file_batches(self.log_path, start_position, end, source=str(self.log_path),
                                 buffer_size=buffer_size)

    def find_position(self, offset: int, end_position: int | None = None) -> int | None:
        """Byte position of the first batch whose last offset >= ``offset``, or None if none."""
        _, pos = self.offset_index.lookup(offset)
        # the index entry lies at most index.interval.bytes (and a batch) before the target:
        # read a small window, not a MiB of the segment, per look-up
        for p, batch in self.batches(pos, end_position, buffer_size=SCAN_BUFFER_SIZE):
            if batch.last_offset >= offset:
                return p
        return None

    def read_next_offset(self) -> int:
        """The offset after the last batch in the segment (its base offset when empty)."""
        if self._next_offset is None:
            _, pos = self.offset_index.lookup(2**62)
            nxt = self.base_offset
            for _p, batch in self.batches(pos):
                nxt = batch.next_offset
            self._next_offset = nxt
        return self._next_offset

    @property
    def first_batch_timestamp(self) -> int:
        """maxTimestamp of the first batch (KIP-354's estimate of the earliest record); LONG_MAX if unknown."""
        if self._first_batch_timestamp is None:
            ts = 2**63 - 1
            for _p, batch in self.batches(0):
                ts = batch.max_timestamp if batch.max_timestamp >= 0 else ts
                break
            if self.size:
                self._first_batch_timestamp = ts
            return ts
        return self._first_batch_timestamp

    @property
    def largest_timestamp(self) -> int:
        """The largest record timestamp, else the file's modification time (Kafka's largestTimestamp)."""
        if self.max_timestamp_so_far >= 0:
            return self.max_timestamp_so_far
        return self.last_modified

    @property
    def last_modified(self) -> int:
        return int(self.log_path.stat().st_mtime * 1000)

    def set_last_modified(self, ms: int) -> None:
        os.utime(self.log_path, ns=(ms * 1_000_000, ms * 1_000_000))

    # ---- recovery -------------------------------------------------------------------
    def rebuild_indexes(self) -> None:
        """Rebuild .index and .timeindex from the .log (the .txnindex cannot be rebuilt alone)."""
        self.offset_index.reset()
        self.time_index.reset()
        self.max_timestamp_so_far, self.offset_of_max_timestamp_so_far = -1, self.base_offset
        since = 0
        nxt = self.base_offset
        for pos, batch in self.batches(0):
            if batch.max_timestamp > self.max_timestamp_so_far:
                self.max_timestamp_so_far, self.offset_of_max_timestamp_so_far = batch.max_timestamp, batch.last_offset
            # Kafka's LogSegment.recover rule; offsets past the base's 32-bit range (an overflowed
            # segment from an old Kafka) get no entry: the cleaner splits such a segment.
            if since > self.index_interval_bytes and self.can_hold(batch.last_offset):
                self.offset_index.append(batch.last_offset, pos)
                self.time_index.maybe_append(self.max_timestamp_so_far, self.offset_of_max_timestamp_so_far)
                since = 0
            since += batch.size_in_bytes
            nxt = batch.next_offset
        self.time_index.maybe_append(self.max_timestamp_so_far, self.offset_of_max_timestamp_so_far)
        self._next_offset = nxt
        self.offset_index.flush()
        self.time_index.flush()
        for idx in (self.offset_index, self.time_index):  # Kafka keeps an index file even when empty
            idx.path.touch()

    def index_needs_rebuild(self) -> bool:
        """An index file is missing (Kafka's LogLoader rebuilds then). An empty index is valid:
        a segment under index.interval.bytes has no entry, and a lookup then scans from 0."""
        return self.size > 0 and not (self.offset_index.path.exists() and self.time_index.path.exists())

    def recover(self) -> int:
        """Validate every batch; truncate a torn tail; rebuild the indexes. Returns bytes truncated.

        Only a torn *tail* is cut: an incomplete last batch, or invalid bytes after which no
        valid batch follows. An invalid batch followed by valid ones is corruption in the
        middle of the file, and dropping the valid batches after it would lose data, so it is
        reported (file and byte position) instead.
        """
        self.close_writer()
        valid_end = 0
        failure: CorruptRecordError | None = None
        try:
            for pos, batch in iter_file_batches(self.log_path, 0, self.size, source=str(self.log_path),
                                                allow_truncated_tail=True):
                batch.ensure_valid(source=str(self.log_path), position=pos)
                if not self.can_hold(batch.last_offset) or batch.base_offset < self.base_offset:
                    raise CorruptRecordError(f"batch offsets {batch.base_offset}..{batch.last_offset} do not "
                                             f"belong to segment {self.base_offset}",
                                             source=str(self.log_path), position=pos)
                valid_end = pos + batch.size_in_bytes
        except CorruptRecordError as e:
            failure = e
        truncated = self.size - valid_end
        if truncated and failure is not None and self._valid_batch_follows(valid_end):
            raise CorruptRecordError(
                f"corrupt batch in the middle of the segment ({failure}); valid batches follow it, so "
                f"recovery will not truncate. Inspect it with 'tiercompact dump-log {self.log_path}' and "
                f"restore the segment from a replica or the object store",
                source=str(self.log_path), position=valid_end)
        if truncated:
            with open(self.log_path, "r+b") as f:
                f.truncate(valid_end)
                os.fsync(f.fileno())
            self._shrunk_to(valid_end)
        self.rebuild_indexes()
        self.txn_index.truncate_to(self._next_offset if self._next_offset is not None else self.base_offset)
        return truncated

    def _valid_batch_follows(self, start: int) -> bool:
        """Whether some CRC-valid batch starts anywhere after ``start`` (a cheap resync scan)."""
        with open(self.log_path, "rb") as f:
            f.seek(start)
            data = f.read()
        from log.record.batch import RECORD_BATCH_OVERHEAD  # local: only needed on this rare path
        i = 1
        while i + RECORD_BATCH_OVERHEAD <= len(data):
            if data[i + 16] == 2:  # magic byte of a candidate batch
                length = int.from_bytes(data[i + 8:i + 12], "big", signed=True)
                if RECORD_BATCH_OVERHEAD - 12 <= length and i + 12 + length <= len(data):
                    try:
                        if RecordBatch(data[i:i + 12 + length]).is_valid():
                            return True
                    except CorruptRecordError:
                        pass
            i += 1
        return False

    def truncate_to(self, offset: int) -> int:
        """Remove every batch with base offset >= ``offset``; returns bytes removed."""
        pos = None
        for p, batch in self.batches(self.offset_index.lookup(offset)[1]):
            if batch.base_offset >= offset:
                pos = p
                break
        if pos is None:
            return 0
        self.close_writer()
        removed = self.size - pos
        with open(self.log_path, "r+b") as f:
            f.truncate(pos)
        self._shrunk_to(pos)
        self.offset_index.truncate_to(offset)
        self.time_index.truncate_to(offset)
        self.txn_index.truncate_to(offset)
        self._next_offset = None
        self._first_batch_timestamp = None if pos == 0 else self._first_batch_timestamp
        self.rebuild_indexes()
        return removed

    def delete_files(self) -> None:
        self.close()
        for p in self.files():
            p.unlink(missing_ok=True)

    def __repr__(self) -> str:
        return f"LogSegment(base={self.base_offset}, size={self.size}, suffix={self.suffix!r})"
