"""The cleaner's two passes over a :class:`~cleaner.offset_map.CompactOffsetMap`, with the
record kernels (``cleaner/kernels/fastpath.py``) doing the per-record work.

Same decisions, in the same order, as :func:`cleaner.cleaner._build_for_segment` and
:func:`cleaner.cleaner.clean_into` (the reference, used with any other OffsetMap).

A segment is read into one reusable buffer and framed into the reference's chunks, each batch
checked (length, magic, CRC-32C, counts) before any batch of its chunk is used
(:class:`~cleaner.fast_reader.ChunkReader`). Runs of plain batches (uncompressed, neither
transactional nor control, and in the rewriting pass neither their producer's last batch nor
the one ending at the round's upper bound) are then handled by one kernel call per run:
``map_batches`` maps them, ``clean_batches`` decides them and writes what stays into one output
buffer. Every other batch, and any batch a kernel declines, goes through the per-batch code
below, whose batch-level decisions are the reference cleaner's own (they drive the transaction
state); the kernels report where the transaction state must catch up
(``on_plain_batches_read``), so it advances exactly as it would batch by batch.

Per pass, each batch's records section is decompressed once and each record decoded once;
no Record objects are made. A batch that loses nothing and needs no delete horizon is copied
byte for byte; a rebuilt batch is written from the retained records' own bytes (only the length
and timestampDelta are re-encoded where the new baseTimestamp moves them), then compressed
with the batch's codec, as RecordBatchBuilder would. Whatever the kernels decline (headers,
non-canonical varints, records the reader or builder would refuse) goes through the reference
code, so the output is byte-identical to :func:`cleaner.cleaner.clean_into` or that code's error.

The rewriting pass decides records of batches the map pass read with the key table's
supersession bitmap instead of hashing their keys again (``KeyTable._known``): the same answer
(a later put of the same digest exists iff ``offset < map[key]``) without the second hash.

It does not even read runs of such batches whose every record is superseded: the map pass
notes the plain batches (of at least :data:`NOTE_MIN_BYTES`) it maps whole, and once the map is
complete the kernels' ``superseded_runs`` picks from the bitmap the ones ``clean_batches`` would
delete whole (no record left, not a producer's last batch, not the one at the round's upper
bound); runs of at least :data:`MIN_HOLE_BYTES` are holes the chunk reader skips (keeping the
reference's chunks), and the round counts their records as read and superseded, their batches
as deleted, their bytes as read (the I/O throttle sees only the bytes really read). The map
pass read and checked these very bytes this round, so the trust that lets the rewriting pass
skip their CRC applies (``ChunkReader``'s docstring). The output is written 1 MiB at a time
(``LogSegment.append_chunks``), each chunk still one append of the reference (the same index
entries).
"""

from __future__ import annotations

from array import array
from collections.abc import Callable
from typing import Any

from cleaner.fast_reader import ChunkReader
from cleaner.kernels.fastpath import pure_kernels
from cleaner.offset_map import CompactOffsetMap
from cleaner.retention import (
    CleanContext,
    RecordsKept,
    decide_batch,
    rebuild_batch,
    retain_batch,
    retains_tombstones,
)
from cleaner.stats import CleanerStats
from cleaner.throttler import Throttler
from cleaner.transactions import CleanedTransactionMetadata
from log.errors import CorruptRecordError
from log.record import RecordBatch
from log.record.batch import RECORDS_OFFSET, TIMESTAMP_TYPE_MASK
from log.record.builder import _write_header_and_crc
from log.record.compression import CompressionType, compress
from log.record.decode import iter_key_offsets
from log.segment import LogSegment

_HORIZON_FLAG = 0x40
_TXN_FLAG = 0x10
_CONTROL_FLAG = 0x20
_CODEC_MASK = 0x07
_NO_BATCH = -(2**63)  # the kernels' "no plain batch passed"


def _records(b: RecordBatch, zero_copy: bool) -> bytes | memoryview:
    """The batch's records section, decompressed once; the compiled kernels read an uncompressed
    one in place (a read-only memoryview of the segment bytes), the pure ones need bytes."""
    if zero_copy and not b.attributes & _CODEC_MASK:
        return b.raw[RECORDS_OFFSET:]
    return b._records_section()


def _raise_corrupt(b: RecordBatch) -> None:
    """Re-run the reference decoder on a batch the kernel refused: it raises the exact error."""
    for _ in iter_key_offsets(b._records_section(), b.records_count, b.base_offset):
        pass
    raise CorruptRecordError(f"records of batch at base offset {b.base_offset} do not decode")


def _batch_at(buf: bytearray, p: int) -> RecordBatch:
    """The (framed, checked) batch at ``buf[p:]``."""
    size = int.from_bytes(buf[p + 8 : p + 12], "big") + 12
    return RecordBatch(memoryview(buf)[p : p + size])


# ---- 1. the map pass ------------------------------------------------------------------------

def _map_full(offset_map: CompactOffsetMap, seg: LogSegment, position: int, end: int, stats: CleanerStats | None,
              messages: int, latest: int) -> bool:
    """The map filled inside the batch ending at file position ``end``, after ``messages``
    records of its chunk: note what was mapped of ``seg`` and stop the pass (True)."""
    offset_map.note_mapped(seg, position, end)
    if stats is not None:
        stats.index_messages_read(messages)
    offset_map.update_latest_offset(latest)
    return True


def build_for_segment_fast(seg: LogSegment, start: int, offset_map: CompactOffsetMap,
                           txn: CleanedTransactionMetadata, max_entries: int, stats: CleanerStats | None,
                           throttler: Throttler | None, check_done: Callable[[], None],
                           io_buffer_size: int) -> bool:
    """:func:`cleaner.cleaner._build_for_segment` over the kernels; True if the map filled."""
    k = offset_map.kernels
    table = offset_map.table
    map_records, map_batches = k.map_records, k.map_batches
    ok, stop, corrupt = k.OK, k.STOP, k.CORRUPT
    zero_copy = k is not pure_kernels()
    position = seg.offset_index.lookup(start)[1]
    reader = ChunkReader(seg, position, k, io_buffer_size)
    # notes of the plain batches mapped whole, for the rewriting pass's superseded_runs
    notes = offset_map.new_batch_notes(seg)
    for buf, lo, hi in reader.chunks():
        check_done()
        size = hi - lo
        if throttler is not None:
            throttler.maybe_throttle(size)
        if stats is not None:
            stats.index_bytes_read(size)
        messages = 0
        latest = offset_map.latest_offset
        p = lo
        while p < hi:
            st, p, n, latest, index, plain_last = map_batches(table, buf, p, hi, start, max_entries, latest,
                                                              notes, reader.file_base, NOTE_MIN_BYTES)
            messages += n
            if plain_last != _NO_BATCH:
                txn.on_plain_batches_read(plain_last)
            if st == ok:
                break
            b = _batch_at(buf, p)
            if st == corrupt:
                _raise_corrupt(b)
            if st != stop:
                # full (or past the 32-bit delta) inside this plain batch at record ``index``
                return _map_full(offset_map, seg, position, reader.file_base + p + b.size_in_bytes, stats,
                                 messages + index, latest)
            # a batch the kernel left to this code: as the reference, batch by batch
            table.note_batch(b.base_offset, b.last_offset)
            if b.is_control:
                txn.on_control_batch_read(b)
                messages += 1
            elif not txn.on_batch_read(b):
                if b.last_offset >= start:
                    data = _records(b, zero_copy)
                    st, index, last_put = map_records(table, data, b.records_count, b.base_offset, start,
                                                      max_entries)
                    if last_put > latest:
                        latest = last_put
                    if st == corrupt:
                        _raise_corrupt(b)
                    if st != ok:
                        # full (or past the 32-bit delta) at record ``index``: the round stops there;
                        # Kafka counts the records read before it
                        return _map_full(offset_map, seg, position, reader.file_base + p + b.size_in_bytes,
                                         stats, messages + index, latest)
                messages += b.records_count
            if b.last_offset >= start and b.last_offset > latest:
                latest = b.last_offset
            p += b.size_in_bytes
        if stats is not None:
            stats.index_messages_read(messages)
        offset_map.update_latest_offset(latest)
    offset_map.note_mapped(seg, position, reader.end)
    return False


# ---- 2. the rewriting pass ------------------------------------------------------------------

def _rebuild_fast(b: RecordBatch, data: bytes | memoryview, keep: bytearray, count: int, horizon: int | None,
                  offset_map: CompactOffsetMap,
                  rebuilt: tuple[bytes, int, int, int] | None = None) -> bytes:
    """The batch RecordBatchBuilder would write for the kept records (``rebuild_batch``'s output);
    ``rebuilt``: the kept records already written by ``retain_and_rebuild`` in its scan."""
    log_append = bool(b.attributes & TIMESTAMP_TYPE_MASK)
    out = rebuilt if rebuilt is not None else offset_map.kernels.rebuild_records(
        data, count, b.base_offset, b.base_timestamp, bytes(keep), horizon is not None,
        horizon if horizon is not None else 0, log_append, b.max_timestamp, b.last_offset_delta)
    if out is None:
        return rebuild_batch(b, [bool(x) for x in keep], horizon)
    records, n, base_ts, max_ts = out
    codec = b.attributes & _CODEC_MASK
    if codec:
        records = compress(CompressionType(codec), records)
    attributes = codec | (b.attributes & (TIMESTAMP_TYPE_MASK | _TXN_FLAG | _CONTROL_FLAG))
    if horizon is not None:
        attributes |= _HORIZON_FLAG
    buf = bytearray(61)
    buf += records
    return _write_header_and_crc(
        buf, base_offset=b.base_offset, partition_leader_epoch=b.partition_leader_epoch, attributes=attributes,
        last_offset_delta=b.last_offset_delta, base_timestamp=base_ts,
        max_timestamp=b.max_timestamp if log_append else max_ts, producer_id=b.producer_id,
        producer_epoch=b.producer_epoch, base_sequence=b.base_sequence, records_count=n)


#: the rewriting pass writes its output in writes of at least this many bytes (each holding
#: many of the chunks that are one append, i.e. at most one index entry, each)
WRITE_BYTES = 1 << 20


class _Output:
    """The rewriting pass's pending output (``cleaner._Pending``'s rule) in one reusable buffer
    that the kernel writes into too: ``pend`` = (bytes in the buffer, largest offset, max
    timestamp, offset of the max timestamp, where the pending chunk starts in the buffer).

    A flush ends the pending chunk where the reference appends it to the destination; the
    chunks are then written together once the buffer holds :data:`WRITE_BYTES`, and at the end
    (``LogSegment.append_chunks``: the same file bytes and index entries as one append each,
    without a write and the Python of an append per chunk)."""

    __slots__ = ("buf", "pend", "dest", "throttler", "flush_at", "chunks")

    def __init__(self, dest: Any, throttler: Throttler | None) -> None:
        self.dest = dest
        self.throttler = throttler
        self.flush_at = max(dest.index_interval_bytes, 1)
        self.buf = bytearray(1 << 16)
        self.pend = array("q", [0, -1, -1, -1, 0])
        #: the ended chunks in the buffer: (end, largest offset, max timestamp, its offset)
        self.chunks: list[tuple[int, int, int, int]] = []

    def add(self, data: bytes, last_offset: int, max_timestamp: int, may_flush: bool = True) -> None:
        pend = self.pend
        n = pend[0]
        self.buf[n : n + len(data)] = data
        pend[0] = n + len(data)
        pend[1] = last_offset
        if max_timestamp > pend[2] or pend[3] < 0:
            pend[2] = max_timestamp
            pend[3] = last_offset
        if may_flush and pend[0] - pend[4] > self.flush_at:
            self.flush()

    def flush(self) -> None:
        """End the pending chunk (one append of the reference: one index entry at most)."""
        pend = self.pend
        n, start = pend[0], pend[4]
        if n == start:
            return
        if not self.dest.can_hold(pend[1]):
            # as the reference: what precedes is written, then this append raises
            self.write()
            n, start = pend[0], pend[4]
            with memoryview(self.buf) as mv, mv[start:n] as data:
                self.dest.append(data, largest_offset=pend[1], largest_timestamp=pend[2],
                                 offset_of_largest_timestamp=pend[3])
        self.chunks.append((n, pend[1], pend[2], pend[3]))
        pend[4] = n
        pend[2] = pend[3] = -1
        if n >= WRITE_BYTES:
            self.write()

    def write(self) -> None:
        """Write the ended chunks to the destination (nothing may be pending: call after flush)."""
        chunks = self.chunks
        if not chunks:
            return
        end = chunks[-1][0]
        # the pending chunk, if any, moves to the front
        pend = self.pend
        with memoryview(self.buf) as mv:
            with mv[:end] as data:
                self.dest.append_chunks(data, chunks)
            if pend[0] > end:
                mv[: pend[0] - end] = mv[end : pend[0]]
        if self.throttler is not None:
            self.throttler.maybe_throttle(end)
        pend[0] -= end
        pend[4] -= end
        chunks.clear()


class _BatchCleaner:
    """``clean_into``'s per-batch code for the batches the kernel leaves to Python."""

    def __init__(self, offset_map: CompactOffsetMap, ctx: CleanContext, stats: CleanerStats) -> None:
        self.offset_map = offset_map
        self.ctx = ctx
        self.stats = stats
        self.table = offset_map.table
        self.retain_and_rebuild = offset_map.kernels.retain_and_rebuild
        self.corrupt = offset_map.kernels.CORRUPT
        self.zero_copy = offset_map.kernels is not pure_kernels()
        self.latest = offset_map.latest_offset
        self.keep = bytearray()

    def clean(self, b: RecordBatch, known: bool) -> tuple[bytes, int, bool] | None:
        """What stays of ``b`` (:func:`~cleaner.retention.retain_batch`'s answer): the reference's
        decisions, with the kernel deciding a data batch's records (and writing a rebuilt one)."""
        ctx = self.ctx
        # batch-level decisions, in log order (they advance the transaction state)
        decision = decide_batch(b, ctx.txn_metadata, ctx.now_ms, ctx.upper_bound_of_round, ctx.active_producers)
        data: bytes | memoryview | None = None
        rebuilt = None

        def records() -> RecordsKept:
            nonlocal data, rebuilt
            data = _records(b, self.zero_copy)
            # decided and, when the batch must be rebuilt, written in one scan of its records
            st, retained, tombstone_kept, keyless, superseded, rebuilt = self.retain_and_rebuild(
                self.table, data, b.records_count, b.base_offset, self.latest, retains_tombstones(b, ctx.now_ms),
                self.keep, b.base_timestamp, b.has_delete_horizon, b.delete_horizon_ms or 0,
                ctx.new_delete_horizon_ms, bool(b.attributes & TIMESTAMP_TYPE_MASK), b.max_timestamp,
                b.last_offset_delta, known)
            if st == self.corrupt:
                _raise_corrupt(b)
            return RecordsKept(self.keep, retained, tombstone_kept, keyless, superseded)

        def rebuild(keep: Any, horizon: int | None) -> bytes:
            if keep is None or data is None:  # a marker
                return rebuild_batch(b, None, horizon)
            # a data batch: the kernel picked the same horizon (no marker flag on data batches)
            return _rebuild_fast(b, data, keep, b.records_count, horizon, self.offset_map, rebuilt)

        return retain_batch(b, decision, self.stats, ctx.new_delete_horizon_ms, records, rebuild)


_C_MESSAGES_READ, _C_SUPERSEDED, _C_DELETED = 0, 2, 4  # indexes of the kernel's counters (C_* order)
#: the map pass notes the plain batches of at least this size it maps whole (40 bytes each: at
#: most 1% of the bytes mapped), for the rewriting pass's superseded_runs
NOTE_MIN_BYTES = 4096
#: a run of superseded batches is skipped from this size on (a hole costs the reader a seek and
#: a piece; below this, reading and deciding the batches costs about as much)
MIN_HOLE_BYTES = 64 * 1024


def _add_counts(stats: CleanerStats, c: Any) -> None:
    """The kernel's counters (``_fastpath_batches.pxi``'s C_* order) into ``stats``; zeroes them."""
    stats.messages_read += c[0]
    stats.invalid_messages_read += c[1]
    stats.removed_superseded += c[2]
    stats.removed_tombstone += c[3]
    stats.batches_deleted += c[4]
    stats.batches_copied += c[5]
    stats.batches_rebuilt += c[6]
    stats.recopy_messages(c[7], c[8])
    for i in range(len(c)):
        c[i] = 0


def clean_into_fast(source: LogSegment, dest: LogSegment, offset_map: CompactOffsetMap, ctx: CleanContext,
                    stats: CleanerStats | None = None) -> None:
    """:func:`cleaner.cleaner.clean_into` over the kernels (same contract)."""
    stats = stats if stats is not None else CleanerStats()
    k = offset_map.kernels
    table = offset_map.table
    clean_batches = k.clean_batches
    ok, flush, stop = k.OK, k.FLUSH, k.STOP
    txn = ctx.txn_metadata
    now, upper, new_horizon = ctx.now_ms, ctx.upper_bound_of_round, ctx.new_delete_horizon_ms
    latest = offset_map.latest_offset
    throttler = ctx.throttler
    output = _Output(dest, throttler)
    pend, flush_at = output.pend, output.flush_at
    counts = array("q", bytes(8 * k.N_COUNTS))
    # the batches whose batch-level decision may be RETAIN_EMPTY because they are their
    # producer's last one: the kernel leaves them to decide_batch
    specials = array("q", sorted({p.last_data_offset for p in ctx.active_producers.values()
                                  if p.last_data_offset >= 0}))
    known_lo, known_hi = offset_map.mapped_range(source)
    one = _BatchCleaner(offset_map, ctx, stats)
    # runs of batches the map pass read whose every record is superseded: deleted whole without
    # being read again (superseded_runs says when; the kernel would decide them the same way)
    notes = offset_map.batch_notes(source)
    holes = [] if notes is None else k.superseded_runs(table, notes, latest, upper, specials, MIN_HOLE_BYTES)
    # the bytes the map pass read and checked this round are not CRC-checked again (why that is
    # safe: ChunkReader's docstring)
    reader = ChunkReader(source, 0, k, ctx.io_buffer_size, checked=(known_lo, known_hi), holes=holes, notes=notes)
    try:
        for buf, pieces in reader.pieces():
            ctx.check_done()
            for lo, hi, base, hole in pieces:
                if hole >= 0:
                    h_start, h_end, _first, n_batches, records, h_last = reader.holes[hole]
                    stats.bytes_read += h_end - h_start
                    counts[_C_MESSAGES_READ] += records
                    counts[_C_SUPERSEDED] += records
                    counts[_C_DELETED] += n_batches
                    txn.on_plain_batches_read(h_last)
                    continue
                if throttler is not None:
                    throttler.maybe_throttle(hi - lo)
                stats.bytes_read += hi - lo
                p = lo
                while p < hi:
                    st, p, plain_last = clean_batches(table, buf, p, hi, known_lo - base, known_hi - base, latest,
                                                      now, new_horizon, upper, specials, output.buf, pend, counts,
                                                      flush_at)
                    if plain_last != _NO_BATCH:
                        txn.on_plain_batches_read(plain_last)
                    if st == ok:
                        break
                    if st == flush:
                        output.flush()
                        continue
                    assert st == stop
                    b = _batch_at(buf, p)
                    size = b.size_in_bytes
                    kept = one.clean(b, known_lo <= base + p and base + p + size <= known_hi)
                    if kept is not None:
                        output.add(kept[0], b.last_offset, kept[1], kept[2])
                    p += size
        output.flush()
        output.write()
    finally:
        _add_counts(stats, counts)
