"""The cleaner's two passes over a :class:`~cleaner.offset_map.CompactOffsetMap`, with the
record kernels (``log/record/fastpath.py``) doing the per-record work.

Same decisions, in the same order, as :func:`cleaner.cleaner._build_for_segment` and
:func:`cleaner.cleaner.clean_into` (the reference, used with any other OffsetMap): batch-level
decisions stay here in Python, once per batch, because they drive the transaction state; every
per-record step (decode the key span, hash, probe the map, decide, write) runs in the kernels.

Per pass, each batch's records section is decompressed once and each record decoded once;
no Record objects are made. A batch that loses nothing and needs no delete horizon is copied
byte for byte; a rebuilt batch is written from the retained records' own bytes (only the length
and timestampDelta are re-encoded where the new baseTimestamp moves them), then compressed
with the batch's codec, as RecordBatchBuilder would. Whatever the kernels decline (headers,
non-canonical varints, records the reader or builder would refuse) goes through the reference
code, so the output is byte-identical to :func:`cleaner.cleaner.clean_into` or that code's error.
"""

from __future__ import annotations

from collections.abc import Callable

from cleaner.cleaner import (
    BatchRetention,
    CleanContext,
    _chunks,
    _Pending,
    _rebuild,
    decide_batch,
)
from cleaner.offset_map import CompactOffsetMap
from cleaner.stats import CleanerStats
from cleaner.throttler import Throttler
from cleaner.transactions import CleanedTransactionMetadata
from log.errors import CorruptRecordError
from log.record import RecordBatch, build_empty_header
from log.record.batch import RECORDS_OFFSET, TIMESTAMP_TYPE_MASK
from log.record.builder import _write_header_and_crc
from log.record.compression import CompressionType, compress
from log.record.decode import iter_key_offsets
from log.record.fastpath import pure_kernels
from log.segment import LogSegment

_HORIZON_FLAG = 0x40
_TXN_FLAG = 0x10
_CONTROL_FLAG = 0x20
_CODEC_MASK = 0x07


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


def build_for_segment_fast(seg: LogSegment, start: int, offset_map: CompactOffsetMap,
                           txn: CleanedTransactionMetadata, max_entries: int, stats: CleanerStats | None,
                           throttler: Throttler | None, check_done: Callable[[], None],
                           io_buffer_size: int) -> bool:
    """:func:`cleaner.cleaner._build_for_segment` over the kernels; True if the map filled."""
    k = offset_map.kernels
    table = offset_map.table
    map_records = k.map_records
    ok = k.OK
    zero_copy = k is not pure_kernels()
    position = seg.offset_index.lookup(start)[1]
    for chunk, size in _chunks(seg, position, io_buffer_size):
        check_done()
        if throttler is not None:
            throttler.maybe_throttle(size)
        if stats is not None:
            stats.index_bytes_read(size)
        messages = 0
        latest = offset_map.latest_offset
        for b in chunk:
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
                    if st == k.CORRUPT:
                        _raise_corrupt(b)
                    if st != ok:
                        # full (or past the 32-bit delta) at record ``index``: the round stops there;
                        # Kafka counts the records read before it
                        if stats is not None:
                            stats.index_messages_read(messages + index)
                        offset_map.update_latest_offset(latest)
                        return True
                messages += b.records_count
            if b.last_offset >= start and b.last_offset > latest:
                latest = b.last_offset
        if stats is not None:
            stats.index_messages_read(messages)
        offset_map.update_latest_offset(latest)
    return False


def _rebuild_fast(b: RecordBatch, data: bytes | memoryview, keep: bytearray, count: int, horizon: int | None,
                  offset_map: CompactOffsetMap,
                  rebuilt: tuple[bytes, int, int, int] | None = None) -> bytes:
    """The batch RecordBatchBuilder would write for the kept records (``_rebuild``'s output);
    ``rebuilt``: the kept records already written by ``retain_and_rebuild`` in its scan."""
    log_append = bool(b.attributes & TIMESTAMP_TYPE_MASK)
    out = rebuilt if rebuilt is not None else offset_map.kernels.rebuild_records(
        data, count, b.base_offset, b.base_timestamp, bytes(keep), horizon is not None,
        horizon if horizon is not None else 0, log_append, b.max_timestamp, b.last_offset_delta)
    if out is None:
        return _rebuild(b, [bool(x) for x in keep], horizon)
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


def clean_into_fast(source: LogSegment, dest: LogSegment, offset_map: CompactOffsetMap, ctx: CleanContext,
                    stats: CleanerStats | None = None) -> None:
    """:func:`cleaner.cleaner.clean_into` over the kernels (same contract)."""
    stats = stats if stats is not None else CleanerStats()
    k = offset_map.kernels
    table = offset_map.table
    retain_and_rebuild = k.retain_and_rebuild
    new_horizon = ctx.new_delete_horizon_ms
    corrupt = k.CORRUPT
    zero_copy = k is not pure_kernels()
    txn = ctx.txn_metadata
    now = ctx.now_ms
    upper = ctx.upper_bound_of_round
    producers = ctx.active_producers
    latest = offset_map.latest_offset
    throttler = ctx.throttler
    pending = _Pending()
    flush_at = max(dest.index_interval_bytes, 1)
    keep = bytearray()
    DELETE, RETAIN_EMPTY = BatchRetention.DELETE, BatchRetention.RETAIN_EMPTY
    decide = decide_batch

    for chunk, size in _chunks(source, 0, ctx.io_buffer_size):
        ctx.check_done()
        if throttler is not None:
            throttler.maybe_throttle(size)
        stats.bytes_read += size
        for b in chunk:
            # batch-level decisions, in log order (they advance the transaction state): the
            # reference cleaner's own function
            is_control = b.is_control
            decision = decide(b, txn, now, upper, producers)
            retention, discard_records = decision.retention, decision.discard_records
            if retention is DELETE:
                stats.batches_deleted += 1
                stats.removed_discarded_batch(is_control, b.records_count)
                continue
            count = b.records_count
            data = None
            rebuilt = None
            tombstone_kept = False
            if discard_records:
                retained = 0
                stats.removed_discarded_batch(is_control, count)
            elif is_control:
                retained = count
            else:
                data = _records(b, zero_copy)
                retain_deletes = not b.has_delete_horizon or now < (b.delete_horizon_ms or 0)
                # decided and, when the batch must be rebuilt, written in one scan of its records
                st, retained, tombstone_kept, invalid, superseded, rebuilt = retain_and_rebuild(
                    table, data, count, b.base_offset, latest, retain_deletes, keep, b.base_timestamp,
                    b.has_delete_horizon, b.delete_horizon_ms or 0, new_horizon,
                    bool(b.attributes & TIMESTAMP_TYPE_MASK), b.max_timestamp, b.last_offset_delta)
                if st == corrupt:
                    _raise_corrupt(b)
                stats.invalid_messages_read += invalid
                # the removals' reasons, for the round report, from the same scan
                stats.removed_superseded += superseded
                stats.removed_tombstone += count - retained - superseded
            stats.messages_read += count
            if retained == 0:
                if retention is RETAIN_EMPTY:
                    out = build_empty_header(b)
                    stats.batches_emptied += 1
                    stats.recopy_messages(0, len(out))
                    pending.add(out, b.last_offset, b.max_timestamp)
                else:
                    stats.batches_deleted += 1
                continue
            need_horizon = (tombstone_kept or decision.marker_for_empty_txn) and not b.has_delete_horizon
            if retained == count and not need_horizon:
                out = bytes(b.raw)
                max_ts = b.max_timestamp
                stats.batches_copied += 1
            else:
                horizon = ctx.new_delete_horizon_ms if need_horizon else b.delete_horizon_ms
                if is_control or data is None:
                    out = _rebuild(b, [True] * count, horizon)
                else:
                    # a data batch: the kernel picked the same horizon (no marker flag on data batches)
                    out = _rebuild_fast(b, data, keep, count, horizon, offset_map, rebuilt)
                max_ts = RecordBatch(out).max_timestamp
                stats.batches_rebuilt += 1
            stats.recopy_messages(retained, len(out))
            pending.add(out, b.last_offset, max_ts)
            if pending.size > flush_at:
                pending.flush_to(dest, throttler)
    pending.flush_to(dest, throttler)
