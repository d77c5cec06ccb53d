"""One cleaning round over one log (Kafka's ``Cleaner``), split into reusable steps.

The cleaner works the way Kafka's LogCleaner essay describes. A log is a clean head
``[log start, first dirty)`` followed by a dirty tail; a round:

1. **Maps the dirty section** (:func:`build_offset_map_from_segments`): it walks the
   cleanable segments ``[first dirty, first uncleanable)`` in order and records, for every
   key, the offset of its last occurrence, in a fixed-size :class:`~cleaner.offset_map.OffsetMap`.
   Records of aborted transactions are skipped. If the map holds ``slots * load factor``
   keys before the section ends, the round stops mapping there: it cleans only up to the
   last mapped offset and the next round continues from it ("multiple passes").
2. **Recopies the log** from its start to the end of what was mapped, in groups of segments
   that fit one segment (:func:`group_segments_by_size`). For each group a new ``.cleaned``
   segment receives, batch by batch (:func:`clean_into`), what must be retained, by the rule
   of :mod:`cleaner.retention`:

   * a record is dropped if a later record of the same key was mapped (``offset < map[key]``),
     or if it is a tombstone whose batch's delete horizon (KIP-534) has passed;
   * records of aborted transactions are dropped; COMMIT/ABORT markers are kept while a batch
     of their transaction is still read in the round, then stamped with a delete horizon and
     removed once it passes (:class:`~cleaner.transactions.CleanedTransactionMetadata`);
   * a batch whose records are all gone is still written as a 61-byte empty header if it is
     its producer's last batch (so idempotent sequence state survives) or if it ends exactly
     at the round's upper bound (KAFKA-17076, Kafka 4.0);
   * a batch that loses nothing and needs no new horizon is copied byte for byte; otherwise it
     is rebuilt with the same base offset, lastOffsetDelta, producer fields and codec.

   **Deliberate difference from Kafka:** Kafka drops unkeyed records found in the mapped range
   (``shouldRetainRecord`` counts them as invalid). tiercompact's product promise is "keyless
   records are always kept", so they are retained (and still counted in
   ``invalid_messages_read``).
3. **Swaps** each cleaned segment in (:func:`swap_cleaned_segment`, LocalLog's
   ``.cleaned -> .swap -> final`` protocol). The caller writes the cleaner checkpoint
   (the returned end offset) only after every swap succeeded.

Every step takes plain :class:`~log.segment.LogSegment` objects, so the tiered cleaner can map
and clean downloaded remote segments chunk by chunk with the same code: call
:func:`build_offset_map_from_segments` repeatedly with the same map, and :func:`clean_into`
with any source and destination segment and a :class:`CleanContext`.

Thread-safety: a :class:`Cleaner` (and its offset map) belongs to one thread. The functions
only read the source segments (which are immutable once rolled) and write the destination;
the swap takes the log's lock.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from functools import partial

from cleaner import retention
from cleaner.config import CleanerConfig
from cleaner.fast_cleaner import build_for_segment_fast, clean_into_fast
from cleaner.log_to_clean import LogToClean
from cleaner.offset_map import CompactOffsetMap, OffsetMap, max_map_entries
from cleaner.retention import CleanContext
from cleaner.retention import no_check as _no_check
from cleaner.stats import CleanerStats
from cleaner.throttler import Throttler
from cleaner.transactions import CleanedTransactionMetadata
from log.clock import SYSTEM_CLOCK, Clock
from log.errors import CorruptRecordError
from log.local_log import LocalLog, SimulatedCrash
from log.record import RecordBatch
from log.segment import CLEANED_SUFFIX, LogSegment
from log.types import TopicPartition

logger = logging.getLogger(__name__)

INT32_MAX = 2**31 - 1


def _chunks(segment: LogSegment, start_position: int, chunk_bytes: int) -> Iterator[tuple[list[RecordBatch], int]]:
    """Batches of ``segment`` from ``start_position``, grouped into chunks of about ``chunk_bytes``.

    Every batch's CRC (and header) is verified before the cleaner looks at it: a rebuilt batch
    gets a fresh, valid CRC, so filtering a corrupt batch would turn corruption into valid
    data. A mismatch raises CorruptRecordError naming the file and the batch's byte position;
    the round stops there and the partition is marked uncleanable with that reason.
    """
    chunk: list[RecordBatch] = []
    size = 0
    source = str(segment.log_path)
    for pos, batch in segment.batches(start_position, segment.size):
        batch.ensure_valid(source=source, position=pos)
        chunk.append(batch)
        size += batch.size_in_bytes
        if size >= chunk_bytes:
            yield chunk, size
            chunk, size = [], 0
    if chunk:
        yield chunk, size


# ---- 1. mapping ---------------------------------------------------------------------------

def renamed_corruption(e: CorruptRecordError, source: str) -> CorruptRecordError:
    """``e`` naming ``source`` (e.g. a remote segment's object key) instead of the temporary
    file the bytes were read from; the byte position is kept."""
    message = str(e)
    where = f" in {e.source}" if e.source is not None else ""
    if e.position is not None:
        where += f" at byte {e.position}"
    if where and message.endswith(where):
        message = message[: -len(where)]
    out = CorruptRecordError(message, source=source, position=e.position)
    out.__cause__ = e
    return out


def build_offset_map_from_segments(
    segments: Iterable[LogSegment],
    start: int,
    end: int,
    offset_map: OffsetMap,
    txn_metadata: CleanedTransactionMetadata,
    *,
    max_entries: int,
    stats: CleanerStats | None = None,
    throttler: Throttler | None = None,
    check_done: Callable[[], None] = _no_check,
    io_buffer_size: int = 256 * 1024,
) -> bool:
    """Map keys -> last offset for the records of ``segments`` in ``[start, end)`` (A.4.1).

    The caller clears the map and adds the aborted transactions of ``[start, end)`` to
    ``txn_metadata`` first. May be called several times with the same map and metadata over
    consecutive runs of segments (the tiered cleaner maps chunk by chunk); each segment whose
    base is above ``start`` first moves ``latest_offset`` to its base - 1, and a call that does
    not fill the map ends with ``latest_offset = end - 1`` (both jump over offset gaps).

    Returns True if the map filled up: ``offset_map.latest_offset`` is then the last offset
    mapped and the round must stop there.
    """
    for seg in segments:
        check_done()
        if seg.base_offset > start:
            offset_map.update_latest_offset(seg.base_offset - 1)
        if _build_for_segment(seg, start, offset_map, txn_metadata, max_entries, stats, throttler,
                              check_done, io_buffer_size):
            return True
    if end > start:
        offset_map.update_latest_offset(end - 1)
    return False


def _build_for_segment(seg: LogSegment, start: int, offset_map: OffsetMap, txn: CleanedTransactionMetadata,
                       max_entries: int, stats: CleanerStats | None, throttler: Throttler | None,
                       check_done: Callable[[], None], io_buffer_size: int) -> bool:
    if isinstance(offset_map, CompactOffsetMap):  # the record kernels' loops (cleaner/fast_cleaner.py)
        return build_for_segment_fast(seg, start, offset_map, txn, max_entries, stats, throttler, check_done,
                                      io_buffer_size)
    position = seg.offset_index.lookup(start)[1]
    for chunk, size in _chunks(seg, position, io_buffer_size):
        check_done()
        if throttler is not None:
            throttler.maybe_throttle(size)
        keys: list[bytes] = []
        offs: list[int] = []
        ends: list[tuple[int, int]] = []  # (number of keys collected after this batch, batch last offset)
        read_before: list[int] = []  # records read before each batch (map_messages_read on a full map)
        messages = 0
        for b in chunk:
            read_before.append(messages)
            if b.is_control:
                txn.on_control_batch_read(b)
                messages += 1
            elif not txn.on_batch_read(b):
                messages += b.records_count
                if b.last_offset >= start:
                    for off, key, _has_value in b.iter_key_offsets():
                        if key is not None and off >= start:
                            keys.append(key)
                            offs.append(off)
            ends.append((len(keys), b.last_offset))
        latest = offset_map.latest_offset
        consumed = offset_map.put_all(keys, offs, max_entries)
        if stats is not None:
            stats.index_bytes_read(size)
            if consumed < len(keys):
                # Kafka counts the records it mapped before the map filled, not the whole chunk
                full_at = offs[consumed]
                i = next(i for i, (n, _last) in enumerate(ends) if n > consumed)
                messages = read_before[i] + sum(1 for r in chunk[i].iter_key_offsets() if r[0] < full_at)
            stats.index_messages_read(messages)
        if consumed < len(keys):
            # full at keys[consumed]: "latest" is the last event (a put or a batch end) before it
            if consumed:
                latest = max(latest, offs[consumed - 1])
            for n, last in ends:
                if n > consumed:
                    break
                if last >= start:
                    latest = max(latest, last)
            offset_map.update_latest_offset(latest)
            return True
        if consumed:
            latest = max(latest, offs[-1])
        for _n, last in ends:
            if last >= start:
                latest = max(latest, last)
        offset_map.update_latest_offset(latest)
    return False


# ---- 2. grouping --------------------------------------------------------------------------

def group_segments_by_size(segments: Iterable[LogSegment], max_size: int, max_index_size: int,
                           first_uncleanable_offset: int) -> list[list[LogSegment]]:
    """Group consecutive segments so each group fits one cleaned segment (A.6).

    A group's log bytes stay <= ``max_size``, its offset- and time-index bytes <=
    ``max_index_size``, and its offsets within 2^31-1 of the first segment's base (using the
    next segment's base - 1, or ``first_uncleanable_offset - 1``, as the candidate's last offset).
    Empty segments skip the offset check, so runs of them merge.
    """
    segs = list(segments)
    groups: list[list[LogSegment]] = []
    i = 0
    while i < len(segs):
        first = segs[i]
        group = [first]
        log_size = first.size
        idx = first.offset_index.size_in_bytes
        tidx = first.time_index.size_in_bytes
        i += 1
        while i < len(segs):
            s = segs[i]
            last_offset = segs[i + 1].base_offset - 1 if i + 1 < len(segs) else first_uncleanable_offset - 1
            if not (log_size + s.size <= max_size
                    and idx + s.offset_index.size_in_bytes <= max_index_size
                    and tidx + s.time_index.size_in_bytes <= max_index_size
                    and (s.size == 0 or last_offset - first.base_offset <= INT32_MAX)):
                break
            group.append(s)
            log_size += s.size
            idx += s.offset_index.size_in_bytes
            tidx += s.time_index.size_in_bytes
            i += 1
        groups.append(group)
    return groups


# ---- 3. retention and rewriting ---------------------------------------------------------------

@dataclass(slots=True)
class _Pending:
    """Output bytes waiting to be appended to the destination as one chunk."""

    parts: list[bytes] = field(default_factory=list)
    size: int = 0
    largest_offset: int = -1
    max_timestamp: int = -1
    offset_of_max_timestamp: int = -1

    def add(self, data: bytes, last_offset: int, max_timestamp: int) -> None:
        self.parts.append(data)
        self.size += len(data)
        self.largest_offset = last_offset
        if max_timestamp > self.max_timestamp or self.offset_of_max_timestamp < 0:
            self.max_timestamp = max_timestamp
            self.offset_of_max_timestamp = last_offset

    def flush_to(self, dest: LogSegment, throttler: Throttler | None) -> None:
        """Append what is pending to ``dest`` as one chunk (one index entry at most) and reset."""
        if not self.parts:
            return
        data = b"".join(self.parts)
        dest.append(data, largest_offset=self.largest_offset, largest_timestamp=self.max_timestamp,
                    offset_of_largest_timestamp=self.offset_of_max_timestamp)
        if throttler is not None:
            throttler.maybe_throttle(len(data))
        self.parts.clear()
        self.size = 0
        self.max_timestamp = self.offset_of_max_timestamp = -1


def clean_into(source: LogSegment, dest: LogSegment, offset_map: OffsetMap, ctx: CleanContext,
               stats: CleanerStats | None = None) -> None:
    """Append to ``dest`` what ``source`` must retain after this round (A.7, A.8).

    The aborted transactions of ``source`` must already be in ``ctx.txn_metadata``
    (:meth:`~cleaner.transactions.CleanedTransactionMetadata.add_aborted`), and
    ``ctx.txn_metadata.cleaned_index`` should be ``dest.txn_index``. ``source`` is read from
    position 0 in chunks of ``ctx.io_buffer_size``; ``dest`` may be any writable segment whose
    base offset is <= the source's offsets (a ``.cleaned`` segment of a LocalLog, or a
    temporary segment of the tiered cleaner).
    """
    if isinstance(offset_map, CompactOffsetMap):  # the record kernels' loops (cleaner/fast_cleaner.py)
        return clean_into_fast(source, dest, offset_map, ctx, stats)
    stats = stats if stats is not None else CleanerStats()
    txn = ctx.txn_metadata
    now = ctx.now_ms
    upper = ctx.upper_bound_of_round
    producers = ctx.active_producers
    latest = offset_map.latest_offset
    throttler = ctx.throttler
    get_many = offset_map.get_all
    new_horizon = ctx.new_delete_horizon_ms
    pending = _Pending()
    flush_at = max(dest.index_interval_bytes, 1)

    for chunk, size in _chunks(source, 0, ctx.io_buffer_size):
        ctx.check_done()
        if throttler is not None:
            throttler.maybe_throttle(size)
        stats.bytes_read += size
        # pass 1, in log order: batch-level decisions (they advance the transaction state), and
        # the keys to look up, all at once
        plans: list[tuple[RecordBatch, retention.BatchDecision, list | None]] = []
        lookup_keys: list[bytes] = []
        for b in chunk:
            decision = retention.decide_batch(b, txn, now, upper, producers)
            kos = None
            if (decision.retention is not retention.BatchRetention.DELETE and not decision.discard_records
                    and not b.is_control):
                kos = list(b.iter_key_offsets())
                lookup_keys.extend(key for off, key, _hv in kos if key is not None and off <= latest)
            plans.append((b, decision, kos))
        # pass 2: record-level decisions (asking for the same keys in the same order) and output
        found = iter(get_many(lookup_keys) if lookup_keys else ())

        def mapped_offset(_key: bytes, _next: Callable[[], int] = found.__next__) -> int:
            return _next()

        for b, decision, kos in plans:
            records = partial(retention.decide_records, kos or (), latest, mapped_offset,
                              retention.retains_tombstones(b, now))
            kept = retention.retain_batch(b, decision, stats, new_horizon, records,
                                          partial(retention.rebuild_batch, b))
            if kept is not None:
                pending.add(kept[0], b.last_offset, kept[1])
                if kept[2] and pending.size > flush_at:
                    pending.flush_to(dest, throttler)
    pending.flush_to(dest, throttler)


def finish_cleaned_segment(cleaned: LogSegment, last_modified_ms: int) -> None:
    """Seal a cleaned segment: final time-index entry, flush, mtime of the last source (A.9)."""
    cleaned.on_become_inactive()
    cleaned.set_last_modified(last_modified_ms)


def swap_cleaned_segment(log: LocalLog, cleaned: LogSegment, group: list[LogSegment]) -> None:
    """Replace ``group`` by ``cleaned`` with the swap protocol (A.10)."""
    log.replace_segments([cleaned], group)


def clean_segments(log: LocalLog, group: list[LogSegment], offset_map: OffsetMap, ctx: CleanContext,
                   stats: CleanerStats) -> LogSegment:
    """Clean one group of a LocalLog into one new segment and swap it in (Kafka's cleanSegments)."""
    cleaned = log.create_cleaned_segment(group[0].base_offset)
    ctx.txn_metadata.cleaned_index = cleaned.txn_index
    try:
        for i, seg in enumerate(group):
            upper = group[i + 1].base_offset if i + 1 < len(group) else seg.read_next_offset()
            ctx.txn_metadata.add_aborted(log.collect_aborted_transactions(seg.base_offset, upper))
            account = stats.account(f"{seg.base_offset:020d}", "cleaned-local", seg.base_offset, upper - 1)
            with stats.measure(account):
                clean_into(seg, cleaned, offset_map, ctx, stats)
        finish_cleaned_segment(cleaned, group[-1].last_modified)
        swap_cleaned_segment(log, cleaned, group)
    except SimulatedCrash:
        raise  # a simulated power cut leaves the files where they are
    except BaseException:
        if cleaned.suffix == CLEANED_SUFFIX:
            cleaned.delete_files()
        raise
    finally:
        ctx.txn_metadata.cleaned_index = None
    stats.segments_cleaned += len(group)
    stats.groups += 1
    return cleaned


# ---- the round --------------------------------------------------------------------------------

class Cleaner:
    """Runs rounds with one offset map (one per cleaner thread). Not thread-safe.

    ``check_done(tp)`` is called before each chunk and each mapped segment; it raises
    LogCleaningAbortedError to stop the round (partition paused, thread shutting down).
    """

    def __init__(self, offset_map: OffsetMap, config: CleanerConfig, *, throttler: Throttler | None = None,
                 clock: Clock = SYSTEM_CLOCK, check_done: Callable[[TopicPartition], None] | None = None,
                 cleaner_id: int = 0) -> None:
        self.offset_map = offset_map
        self.config = config
        self.throttler = throttler
        self.clock = clock
        self.check_done = check_done
        self.id = cleaner_id
        self.max_entries = max_map_entries(offset_map, config.load_factor)
        #: the running (or last) round's stats, also when it raised
        self.current_stats: CleanerStats | None = None

    def clean(self, ltc: LogToClean) -> tuple[int, CleanerStats]:
        return self.do_clean(ltc, self.clock.milliseconds())

    def do_clean(self, ltc: LogToClean, now: int) -> tuple[int, CleanerStats]:
        """Clean ``ltc`` as of ``now``; returns (new checkpoint offset, stats)."""
        log = ltc.log
        tp = ltc.topic_partition
        stats = CleanerStats(self.clock, tp, first_dirty_offset=ltc.first_dirty_offset)
        self.current_stats = stats  # what a failed round got through (its report)
        start = ltc.first_dirty_offset
        upper = ltc.first_uncleanable_offset
        check_done = self.check_done
        check = (lambda: check_done(tp)) if check_done is not None else _no_check
        if upper <= start:
            stats.end_offset = start
            stats.index_done()
            stats.all_done()
            return start, stats
        for seg in log.segments_in_range(0, upper):
            if seg.has_overflow():
                # KAFKA-20036: split a segment whose offsets overflow its base (written by an old
                # Kafka) instead of failing every round on it; offsets and bytes are unchanged.
                log.split_overflowed_segment(seg)
        delete_retention = int(log.config.get("delete.retention.ms"))
        before = log.segments_in_range(0, start)
        legacy = before[-1].last_modified - delete_retention if before else 0
        io_buf = self.config.io_buffer_per_thread
        self.offset_map.clear()
        map_txn = CleanedTransactionMetadata()
        map_txn.add_aborted(log.collect_aborted_transactions(start, upper))
        stats.map_full = build_offset_map_from_segments(
            log.segments_in_range(start, upper), start, upper, self.offset_map, map_txn,
            max_entries=self.max_entries, stats=stats, throttler=self.throttler, check_done=check,
            io_buffer_size=io_buf)
        stats.index_done()
        end_offset = max(self.offset_map.latest_offset + 1, start)
        groups = group_segments_by_size(log.segments_in_range(0, end_offset), log.config.segment_bytes,
                                        int(log.config.get("segment.index.bytes")), upper)
        with log.lock:
            producers = log.producer_state.active_producers()
        ctx = CleanContext(now_ms=now, delete_retention_ms=delete_retention, upper_bound_of_round=upper,
                           active_producers=producers, txn_metadata=CleanedTransactionMetadata(),
                           legacy_delete_horizon_ms=legacy, throttler=self.throttler, check_done=check,
                           io_buffer_size=io_buf)
        for group in groups:
            clean_segments(log, group, self.offset_map, ctx, stats)
        stats.buffer_utilization = self.offset_map.utilization
        stats.end_offset = end_offset
        stats.all_done()
        logger.info("cleaned %s [%d, %d): %d -> %d bytes, %d -> %d records in %.3fs", tp, start, end_offset,
                    stats.bytes_read, stats.bytes_written, stats.messages_read, stats.messages_written,
                    stats.elapsed_secs)
        return end_offset, stats
