"""LocalLog: one partition's log on local disk.

Appends assign offsets and validate batches; the active (last) segment rolls on
``segment.bytes``, on ``segment.ms`` and, for compacted logs, on
``max.compaction.lag.ms`` (KIP-354: a non-empty active segment whose first batch is
too old is force-rolled so it can be cleaned). Reads start at any offset; an offset
removed by compaction reads as the next one present.

Segment replacement follows Kafka's swap protocol (LocalLog.replaceSegments):
new ``*.cleaned`` files are renamed to ``*.swap``, the old segments to ``*.deleted``
(removed asynchronously after ``file.delete.delay.ms``), then the ``*.swap`` files to
their final names. Opening a partition directory recovers from a crash at any of those
steps: :class:`~log.log_loader.LogLoader` loads the directory when the log is constructed.

Thread-safety: every public method takes the log's lock; reads copy what they return.
A single LocalLog object must own a directory.
"""

from __future__ import annotations

import logging
import zlib
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

from log.checkpoint import (
    LOG_START_OFFSET_CHECKPOINT,
    RECOVERY_POINT_CHECKPOINT,
    LogStartOffsetCheckpointFile,
    RecoveryPointCheckpointFile,
    fsync_dir,
    fsync_path,
)
from log.clock import SYSTEM_CLOCK, Clock
from log.config import CONFIG_DEF, LogConfig
from log.errors import CorruptRecordError, InvalidRequestError, OffsetOutOfRangeError
from log.errors import SimulatedCrash as SimulatedCrash  # where the crash hooks of tests import it from
from log.fetch_raw import readable_segments
from log.index.txn_index import AbortedTxn
from log.leader_epochs import LeaderEpochCache
from log.locks import RANK_LOCAL_LOG, RANK_LOG_ROLL_SYNC, ordered_lock, ordered_rlock
from log.log_loader import CLEAN_SHUTDOWN_FILE, LogLoader
from log.page_cache import DROP_STEP, behind_window, drop_file_cached
from log.producer_snapshot import list_snapshots, snapshot_path, write_snapshot
from log.producer_state import ProducerStateEntry, ProducerStateManager
from log.record import (
    CompressionType,
    ControlRecordType,
    RecordBatch,
    RecordBatchBuilder,
    build_control_batch,
    iter_batches,
    stamp_batch,
)
from log.retention import retention_breached
from log.scheduler import Scheduler
from log.segment import (
    CLEANED_SUFFIX,
    DELETED_SUFFIX,
    SCAN_BUFFER_SIZE,
    SWAP_SUFFIX,
    LogSegment,
)
from log.segment_split import split_overflowed_segment
from log.segments import LogSegments
from log.types import EpochEntry, TimestampType, TopicPartition

logger = logging.getLogger(__name__)

INT32_MAX = 2**31 - 1


@dataclass(frozen=True, slots=True)
class AppendResult:
    base_offset: int
    last_offset: int
    duplicate: bool = False


@dataclass(frozen=True, slots=True)
class RecordSpec:
    """A record to append: what the produce API carries."""

    key: bytes | None
    value: bytes | None
    timestamp: int | None = None
    headers: tuple[tuple[str, bytes | None], ...] = ()


#: a read whose segment is swapped out under it starts over this many times in all
LOCAL_READ_ATTEMPTS = 5


class LocalLog:
    def __init__(self, directory: Path, config: LogConfig, *, clock: Clock = SYSTEM_CLOCK,
                 scheduler: Scheduler | None = None, page_cache_window: int = -1) -> None:
        self.dir = Path(directory)
        self.topic_partition = TopicPartition.from_dir_name(self.dir.name)
        self.config = config
        self.clock = clock
        self.scheduler = scheduler
        self.lock = ordered_rlock("log.local", RANK_LOCAL_LOG, label=self.dir.name)
        self.segments = LogSegments()
        self.producer_state = ProducerStateManager()
        self.epochs = LeaderEpochCache(self.dir)
        self._start_file = LogStartOffsetCheckpointFile(self.dir / LOG_START_OFFSET_CHECKPOINT)
        #: the log start offset DeleteRecords set (0: never): offsets below it read as out of range
        #: even while the segments holding them are still on disk
        self._start_floor = 0
        #: test hook called with a step name during the swap protocol (crash injection)
        self.crash_hook: Callable[[str], None] | None = None
        self._closed = False
        #: the newest bytes of this log kept in the page cache, the rest dropped behind (-1: all; log/page_cache.py)
        self.page_cache_window = page_cache_window
        #: segments rolled since the last drop that may still hold cached bytes behind the window
        self._rolled_cached: list[LogSegment] = []
        self._appended_since_drop = 0
        #: rolled segments not synced yet, oldest first, each with the producer snapshot its roll wrote: with a
        #: scheduler, a roll syncs nothing under the lock and :meth:`sync_rolled` syncs them soon after (Kafka's
        #: flush of the rolled segment, which it schedules at roll)
        self._unsynced_rolls: list[tuple[LogSegment, Path]] = []
        self._roll_sync = ordered_lock("log.roll_sync", RANK_LOG_ROLL_SYNC)
        self._recovery_file = RecoveryPointCheckpointFile(self.dir / RECOVERY_POINT_CHECKPOINT)
        self.dir.mkdir(parents=True, exist_ok=True)
        try:
            recovery_point = self._read_recovery_point()
            self.epochs.entries = LogLoader(self.dir, self.topic_partition, config, clock, self.segments,
                                            self.producer_state, self.epochs.file,
                                            recovery_point=recovery_point).load()
            #: every record below this offset is on disk (Kafka's recoveryPoint): all but the active segment now
            self.recovery_point = self.active_segment.base_offset
            self._recovery_file.stored = recovery_point  # None: no file yet (or a corrupt one)
            self.epochs.truncate_from_end(self.log_end_offset)
            try:
                self._start_floor = self._start_file.read()
            except CorruptRecordError as e:  # read as 0 it would serve records a client deleted again
                raise CorruptRecordError(f"{e}. Restore it from a backup, or write the offset the partition's "
                                         f"records were deleted below into it, and restart the node") from None
        except BaseException:
            for seg in self.segments:  # a log that failed to load holds no open files
                seg.close()
            raise

    def _hook(self, step: str) -> None:
        if self.crash_hook is not None:
            self.crash_hook(step)

    def _read_recovery_point(self) -> int | None:
        try:
            return self._recovery_file.read_offset()
        except CorruptRecordError as e:  # recovered as absent: every rolled segment is checked, none cut
            logger.warning("%s: ignoring the recovery point: %s", self.topic_partition, e)
            return None

    # ---- syncing what rolls left --------------------------------------------------------
    def sync_rolled(self) -> None:
        """Make what rolls left unsynced durable, oldest roll first: each rolled segment's files, the producer
        snapshot written at its end, then the directory (the new segments' names); then move the recovery point
        past them and store it. Kafka schedules this flush at every roll. Called by the scheduler after a roll,
        by every sync of the log (acks=-1, flush.messages, flush.ms: what they make durable comes after), and
        before a segment is copied to the remote tier. Never called with the log's lock held."""
        if not self._unsynced_rolls and not self._roll_sync.locked():
            # The common case, on every acks=-1 sync: no lock taken. An entry leaves the list only once synced (or
            # its segments deleted), and the sync that removed it holds the roll-sync lock until the recovery point
            # is stored: an empty list with that lock free leaves nothing to wait for.
            return
        with self._roll_sync:
            with self.lock:
                pending = list(self._unsynced_rolls)
            if not pending:
                return
            for seg, snapshot in pending:
                seg.sync_files()
                fsync_path(snapshot, missing_ok=True)
            try:
                fsync_dir(self.dir)
                deleted = False
            except FileNotFoundError:  # the partition was deleted meanwhile: nothing of it is left to keep
                deleted = True
            synced = {id(entry) for entry in pending}
            with self.lock:  # by identity: a truncation may have cleared the list and a roll added to it meanwhile
                self._unsynced_rolls = [e for e in self._unsynced_rolls if id(e) not in synced]
                if deleted:
                    return
                self._advance_recovery_point()
            self._store_recovery_point()

    def _advance_recovery_point(self) -> None:
        """Set the recovery point (under the log's lock) to the base of the oldest rolled segment still unsynced,
        else the active segment's: every record below it is on disk."""
        self.recovery_point = (self._unsynced_rolls[0][0].base_offset if self._unsynced_rolls
                               else self.active_segment.base_offset)

    def _store_recovery_point(self) -> None:
        """Store the recovery point as it is when the file's lock is taken (so a sync's higher point, stored after
        a truncation lowered it, cannot overwrite the lower one)."""
        self._recovery_file.store(lambda: self.recovery_point)

    def _delete_snapshots_below(self, offset: int) -> None:
        for off, path in list_snapshots(self.dir):
            if off < offset:
                path.unlink(missing_ok=True)

    # ---- offsets ---------------------------------------------------------------------
    @property
    def active_segment(self) -> LogSegment:
        seg = self.segments.last()
        assert seg is not None
        return seg

    @property
    def log_start_offset(self) -> int:
        """The first offset a read may ask for: the first segment's base offset, or the offset
        DeleteRecords moved the start to when that is higher (Kafka's logStartOffset)."""
        with self.lock:
            first = self.segments.first()
            base = first.base_offset if first else 0
            return base if base >= self._start_floor else self._start_floor

    @property
    def deleted_records_offset(self) -> int:
        """The log start offset DeleteRecords set (0 when never): the floor of the log start over
        both tiers of a tiered partition too."""
        return self._start_floor

    def advance_log_start_offset(self, offset: int) -> int:
        """DeleteRecords (Kafka's maybeIncrementLogStartOffset): records below ``offset`` are
        deleted for readers at once; the start only moves forward, and it is on disk before this
        returns. Whole segments below it are removed by retention (:meth:`start_breached_segments`).
        Returns the log start offset.

        Raises:
            OffsetOutOfRangeError: ``offset`` is negative or above the high watermark.
        """
        with self.lock:
            self.check_new_log_start_offset(offset)
            if offset > self._start_floor:
                self._start_file.write(offset)
                self._start_floor = offset
                self.epochs.truncate_from_start(offset)
            return self.log_start_offset

    def check_new_log_start_offset(self, offset: int) -> None:
        """Raise OffsetOutOfRangeError unless ``offset`` is in [0, high watermark] (what DeleteRecords takes)."""
        hw = self.high_watermark
        if offset < 0 or offset > hw:
            raise OffsetOutOfRangeError(
                f"cannot delete the records of {self.topic_partition} below offset {offset}: it is outside "
                f"[0, {hw}] (0 to the high watermark)")

    def start_breached_segments(self) -> list[LogSegment]:
        """Rolled segments wholly below the log start offset DeleteRecords set (Kafka's
        deleteLogStartOffsetBreachedSegments: a segment goes once the next one starts at or below it)."""
        with self.lock:
            segs = self.segments.all()
            floor = self._start_floor
            return [s for s, nxt in zip(segs, segs[1:], strict=False) if nxt.base_offset <= floor]

    @property
    def log_end_offset(self) -> int:
        with self.lock:
            return self.active_segment.read_next_offset()

    @property
    def high_watermark(self) -> int:
        """A single replica: everything appended is committed."""
        return self.log_end_offset

    @property
    def last_stable_offset(self) -> int:
        with self.lock:
            first_unstable = self.producer_state.first_unstable_offset()
            hw = self.high_watermark
            return min(first_unstable, hw) if first_unstable is not None else hw

    def size_in_bytes(self) -> int:
        with self.lock:
            return self.segments.size_in_bytes()

    def all_segments(self) -> list[LogSegment]:
        with self.lock:
            return self.segments.all()

    def non_active_segments_from(self, offset: int) -> list[LogSegment]:
        """Kafka's nonActiveLogSegmentsFrom: floor(offset) onwards, excluding the active one."""
        with self.lock:
            active = self.active_segment
            if offset > active.base_offset:
                return []
            return self.segments.range(offset, active.base_offset)

    def segments_in_range(self, from_offset: int, to_offset: int) -> list[LogSegment]:
        with self.lock:
            return self.segments.range(from_offset, to_offset)

    # ---- leader epochs -----------------------------------------------------------------
    @property
    def epoch_entries(self) -> list[EpochEntry]:
        return self.epochs.entries

    @property
    def leader_epoch(self) -> int:
        return self.epochs.latest

    def assign_epoch(self, epoch: int, start_offset: int | None = None) -> None:
        """Record that ``epoch`` starts at ``start_offset`` (default: the log end offset)."""
        with self.lock:
            self.epochs.assign(epoch, self.log_end_offset if start_offset is None else start_offset)

    def epochs_for_range(self, start: int, end: int) -> dict[int, int]:
        """{epoch: first offset within [start, end)} — a segment's ``segment_leader_epochs``."""
        with self.lock:
            return self.epochs.for_range(start, end)

    # ---- appending ---------------------------------------------------------------------
    def append_records(self, records: Sequence[RecordSpec], *, compression: CompressionType = CompressionType.NONE,
                       producer_id: int = -1, producer_epoch: int = -1, base_sequence: int = -1,
                       transactional: bool = False) -> AppendResult:
        """Build one batch from ``records`` (as a producer would) and append it."""
        if not records:
            raise InvalidRequestError("a produce request needs at least one record")
        if not any(r.headers for r in records):
            return self.append_columns([r.key for r in records], [r.value for r in records],
                                       [r.timestamp for r in records], compression=compression,
                                       producer_id=producer_id, producer_epoch=producer_epoch,
                                       base_sequence=base_sequence, transactional=transactional)
        now = self.clock.milliseconds()
        b = RecordBatchBuilder(0, compression=compression, producer_id=producer_id, producer_epoch=producer_epoch,
                               base_sequence=base_sequence, is_transactional=transactional)
        for i, r in enumerate(records):
            b.append(i, now if r.timestamp is None else r.timestamp, r.key, r.value, r.headers)
        return self.append_batches(b.build())

    def append_columns(self, keys: list[bytes | None], values: list[bytes | None],
                       timestamps: list[int | None] | None = None, *,
                       compression: CompressionType = CompressionType.NONE, producer_id: int = -1,
                       producer_epoch: int = -1, base_sequence: int = -1,
                       transactional: bool = False) -> AppendResult:
        """:meth:`append_records` for records without headers, given as columns (``keys[i]``,
        ``values[i]``, ``timestamps[i]``; a None timestamp, or no list, is the append time):
        what a produce request decodes to, without a RecordSpec per record. The compiled
        kernels encode the records in one loop; the builder does it where they do not."""
        if not keys:
            raise InvalidRequestError("a produce request needs at least one record")
        if len(values) != len(keys) or (timestamps is not None and len(timestamps) != len(keys)):
            raise ValueError("keys, values and timestamps must be columns of the same length")
        now = self.clock.milliseconds()
        b = RecordBatchBuilder(0, compression=compression, producer_id=producer_id, producer_epoch=producer_epoch,
                               base_sequence=base_sequence, is_transactional=transactional)
        ts = [now] * len(keys) if timestamps is None else [now if t is None else t for t in timestamps]
        if not b.append_new_records(keys, values, ts):
            for i, k in enumerate(keys):
                b.append(i, ts[i], k, values[i])
        return self.append_batches(b.build())

    def append_marker(self, producer_id: int, producer_epoch: int, control_type: ControlRecordType,
                      coordinator_epoch: int = 0) -> int:
        """Append a COMMIT/ABORT marker for ``producer_id`` (what the transaction coordinator writes)."""
        if control_type not in (ControlRecordType.COMMIT, ControlRecordType.ABORT):
            raise InvalidRequestError("a transaction marker is COMMIT or ABORT")
        with self.lock:
            self.producer_state.check_marker(producer_id, producer_epoch)
            data = build_control_batch(base_offset=0, timestamp=self.clock.milliseconds(), producer_id=producer_id,
                                       producer_epoch=producer_epoch, control_type=control_type,
                                       coordinator_epoch=coordinator_epoch)
            return self.append_batches(data, from_client=False).base_offset

    def append_batches(self, data: bytes | bytearray | memoryview, *, from_client: bool = True,
                       assign_offsets: bool = True, strict_producers: bool = False,
                       validated: bool = False) -> AppendResult:
        """Validate and append whole record batches; offsets are assigned from the log end.

        ``from_client``: reject control batches and check producer epochs and sequences
        (``strict_producers``: as the Kafka listener does, see ProducerStateManager.validate).
        ``assign_offsets=False`` appends batches with the offsets they carry (replication, tests).
        A ``bytearray`` holding one batch is stamped in place (base offset, leader epoch) and
        written as it is: no copy, no re-encoding unless ``compression.type`` asks for another codec.
        ``validated``: ``data`` is one client batch log/batch_validation.py already checked (framing,
        CRC, size, control flag, counts), so those checks are not run twice.
        """
        source = "append request"
        if validated:
            parsed = [(0, RecordBatch(data))]
        else:
            parsed = list(iter_batches(data, source=source))
        if not parsed:
            raise InvalidRequestError("the request holds no record batch")
        max_bytes = self.config.max_message_bytes
        for pos, batch in ([] if validated else parsed):
            batch.ensure_valid(source=source, position=pos)
            if from_client and batch.is_control:
                raise InvalidRequestError("clients may not write control batches; use the markers endpoint")
            if batch.size_in_bytes > max_bytes:
                raise InvalidRequestError(f"batch of {batch.size_in_bytes} bytes exceeds max.message.bytes={max_bytes}")
            if from_client and batch.records_count != batch.last_offset_delta + 1:
                raise InvalidRequestError("a producer batch must hold records with offset deltas 0..n-1")
        with self.lock:
            if self._closed:
                raise InvalidRequestError(f"log {self.topic_partition} is closed")
            now = self.clock.milliseconds()
            first = last = -1
            for _pos, batch in parsed:
                info = self.producer_state.validate(batch, strict=strict_producers) if from_client else None
                if info is not None and info.duplicate_of is not None:
                    if first < 0:
                        first = info.duplicate_of[0]
                    last = info.duplicate_of[1]
                    if len(parsed) == 1:
                        return AppendResult(first, last, duplicate=True)
                    continue
                raw = self._maybe_recompress(batch)
                owner = raw.obj if isinstance(raw, memoryview) else None
                buf = owner if type(owner) is bytearray and len(owner) == len(raw) else bytearray(raw)
                append_time = now if self.config.timestamp_type is TimestampType.LOG_APPEND_TIME else None
                base = self.log_end_offset if assign_offsets else batch.base_offset
                if not assign_offsets and base < self.log_end_offset:
                    raise InvalidRequestError(f"batch base offset {base} is below the log end {self.log_end_offset}")
                if assign_offsets and self.epochs.latest < 0:
                    # a partition is at leader epoch 0 from its creation, as Kafka's: its first batch starts epoch 0
                    # in the cache (Metadata and ListOffsets say 0; clients validate positions by it, KIP-320)
                    self.epochs.assign(0, base)
                stamp_batch(buf, 0, base_offset=base, partition_leader_epoch=self.leader_epoch
                            if batch.partition_leader_epoch < 0 or assign_offsets else batch.partition_leader_epoch,
                            log_append_time_ms=append_time)
                stamped = RecordBatch(buf)
                self._maybe_roll(stamped, now)
                seg = self.active_segment
                seg.append(stamped.raw, largest_offset=stamped.last_offset, largest_timestamp=stamped.max_timestamp,
                           offset_of_largest_timestamp=stamped.last_offset)
                if stamped.is_control:
                    aborted = self.producer_state.on_control_batch(stamped)
                    if aborted is not None:
                        seg.append_aborted_txn(aborted)
                else:
                    self.producer_state.on_data_batch(stamped)
                if first < 0:
                    first = stamped.base_offset
                last = stamped.last_offset
                self._appended_since_drop += len(buf)
            if self._appended_since_drop >= DROP_STEP:
                self._drop_behind()
            return AppendResult(first, last)

    def drop_from_cache(self, seg: LogSegment, start: int, end: int) -> None:
        """Drop bytes [``start``, ``end``) of ``seg`` from the page cache (log/page_cache.py): on the node's
        drop-behind thread when this log has the node's scheduler (off the appending or fetching thread), else now."""
        if self.scheduler is not None:
            self.scheduler.dropper.drop(seg.log_path, start, end)
        else:
            drop_file_cached(seg.log_path, start, end)

    def _drop_behind(self) -> None:
        """(Under the lock, once per DROP_STEP appended.) Drop from the page cache what lies behind the newest
        ``page_cache_window`` bytes, in the active segment and in those rolled since (log/page_cache.py)."""
        self._appended_since_drop = 0
        window = self.page_cache_window
        if window < 0:
            return
        active = self.active_segment
        segs = [*self._rolled_cached, active]
        keep = []
        for seg, floor in zip(segs, behind_window([s.size for s in segs], window), strict=True):
            if floor > seg.cache_dropped_to:
                self.drop_from_cache(seg, seg.cache_dropped_to, floor)
                seg.cache_dropped_to = floor
            if seg is not active and floor < seg.size:
                keep.append(seg)
        self._rolled_cached = keep

    def _maybe_recompress(self, batch: RecordBatch) -> bytes | memoryview:
        target = self.config.get("compression.type")
        if target == "producer" or batch.is_control or CompressionType.from_name(target) == batch.compression:
            return batch.raw
        codec = CompressionType.from_name(target)
        level_key = f"compression.{target}.level"
        b = RecordBatchBuilder(batch.base_offset, compression=codec,
                               compression_level=int(self.config.get(level_key)) if level_key in CONFIG_DEF else None,
                               timestamp_type=batch.timestamp_type, producer_id=batch.producer_id,
                               producer_epoch=batch.producer_epoch, base_sequence=batch.base_sequence,
                               is_transactional=batch.is_transactional,
                               partition_leader_epoch=batch.partition_leader_epoch)
        for r in batch.records():
            b.append(r.offset, r.timestamp, r.key, r.value, r.headers)
        return b.build(last_offset_delta=batch.last_offset_delta)

    # ---- rolling -----------------------------------------------------------------------
    def _should_roll(self, seg: LogSegment, incoming_size: int, last_offset: int, now: int) -> bool:
        if seg.size == 0:
            return False
        if seg.size + incoming_size > self.config.segment_bytes:
            return True
        if not seg.can_hold(last_offset):
            return True
        if seg.offset_index.size_in_bytes + 8 > self.config.segment_index_bytes:
            return True
        return self._time_to_roll(seg, now)

    def _time_to_roll(self, seg: LogSegment, now: int) -> bool:
        first = seg.first_batch_timestamp
        rolling_base = first if first != 2**63 - 1 else getattr(seg, "created_ms", now)
        return now - rolling_base > self.config.max_segment_ms - self._roll_jitter(seg)

    def _roll_jitter(self, seg: LogSegment) -> int:
        """How much sooner than segment.ms this segment rolls by time: up to segment.jitter.ms, Kafka's per-segment
        rollJitterMs. Kafka draws it at random per segment; here it is a hash of the partition and the segment's
        base offset: partitions created together still roll apart, and a restart keeps each segment's."""
        jitter = self.config.roll_jitter_bound_ms
        if jitter <= 0:
            return 0
        return zlib.crc32(f"{self.topic_partition.dir_name}@{seg.base_offset}".encode()) % jitter

    def _maybe_roll(self, batch: RecordBatch, now: int) -> None:
        if self._should_roll(self.active_segment, batch.size_in_bytes, batch.last_offset, now):
            self.roll()

    def maybe_roll(self, now: int | None = None) -> bool:
        """Roll a non-empty active segment that is past segment.ms / max.compaction.lag.ms (KIP-354)."""
        with self.lock:
            now = self.clock.milliseconds() if now is None else now
            seg = self.active_segment
            if seg.size and self._time_to_roll(seg, now):
                self.roll()
                return True
            return False

    def roll(self) -> LogSegment:
        """Close the active segment and start a new one at the log end offset."""
        with self.lock:
            active = self.active_segment
            new_base = active.read_next_offset()
            if active.size == 0:
                return active
            # Without a scheduler to sync in the background (tests, tools), the roll syncs at once, as it did.
            deferred = self.scheduler is not None
            if deferred and self._recovery_file.stored is None:
                # before the first unsynced roll: the point every rolled segment was synced to, on disk first,
                # or a crash would leave a torn rolled segment the loader takes for a durable one
                self._store_recovery_point()
            if deferred:
                active.hand_off_inactive()
            else:
                active.on_become_inactive()
            if self.page_cache_window >= 0:
                self._rolled_cached.append(active)
            seg = LogSegment(self.dir, new_base, index_interval_bytes=int(self.config.get("index.interval.bytes")),
                             create=True)
            seg.created_ms = self.clock.milliseconds()  # type: ignore[attr-defined]
            self.segments.add(seg)
            # the producer state after every batch below the new segment (Kafka takes one per roll)
            snapshot = snapshot_path(self.dir, new_base)
            write_snapshot(snapshot, self.producer_state.producers, sync=not deferred)
            if deferred:
                self._unsynced_rolls.append((active, snapshot))
                assert self.scheduler is not None
                self.scheduler.schedule(0, self.sync_rolled)
            else:
                fsync_dir(self.dir)
                self._advance_recovery_point()
            return seg

    def truncate_fully_and_start_at(self, offset: int, producers: dict[int, ProducerStateEntry],
                                    epoch_entries: Sequence[EpochEntry]) -> None:
        """Drop every segment and restart the log, empty, at ``offset`` with the given producer
        state (written as the snapshot at ``offset``) and leader-epoch entries (Kafka's
        truncateFullyAndStartAt + the state KIP-405 restores from the remote tier: a node
        whose local log is behind the remote one)."""
        with self.lock:
            for seg in self.all_segments():
                self.segments.remove(seg.base_offset)
                self._delete_segment_files(seg)
            for _off, path in list_snapshots(self.dir):
                path.unlink(missing_ok=True)
            self.segments.add(LogSegment(self.dir, offset, create=True,
                                         index_interval_bytes=int(self.config.get("index.interval.bytes"))))
            write_snapshot(snapshot_path(self.dir, offset), producers)
            self.producer_state.load(producers)
            self.epochs.reset(epoch_entries, offset)
            fsync_dir(self.dir)
            self._unsynced_rolls.clear()
            self._advance_recovery_point()
            self._store_recovery_point()

    # ---- reading -----------------------------------------------------------------------
    def read(self, start_offset: int, *, max_bytes: int = 1 << 20, max_offset: int | None = None,
             max_records: int | None = None) -> list[RecordBatch]:
        """Batches holding offsets >= ``start_offset`` (below ``max_offset``), at least one if any.

        With ``max_records`` the read also stops once the data batches read hold that many
        records, instead of scanning ``max_bytes`` for a page the caller will cut short.

        The segment list is taken under the lock and the files are read without it, so a
        segment can be swapped out (cleaner) or deleted (retention) in between: its file is
        renamed to ``.deleted`` and removed, and opening it raises FileNotFoundError. The read
        then takes a new segment list and goes on from the next offset it has not returned yet
        (offsets never change, so a cleaned replacement holds the same offsets, minus the
        records compaction removed). Batches already read stay valid: an open file outlives
        its name.

        Raises OffsetOutOfRangeError outside [log start, log end] (also when retention removed
        ``start_offset`` while reading and nothing was read yet).
        """
        out: list[RecordBatch] = []
        for attempt in range(LOCAL_READ_ATTEMPTS):
            offset = out[-1].next_offset if out else start_offset
            try:
                self._read_into(out, offset, max_bytes, max_offset, max_records)
                return out
            except OffsetOutOfRangeError:
                if not out:
                    raise
                return out  # retention removed what followed the batches already read
            except FileNotFoundError:
                if attempt == LOCAL_READ_ATTEMPTS - 1:
                    raise
        raise AssertionError("unreachable")  # pragma: no cover

    def _read_into(self, out: list[RecordBatch], start_offset: int, max_bytes: int, max_offset: int | None,
                   max_records: int | None = None) -> None:
        segs, sizes = readable_segments(self, start_offset)
        total = sum(b.size_in_bytes for b in out)
        records = sum(b.records_count for b in out if not b.is_control)
        for seg, size in zip(segs, sizes, strict=True):
            # the first segment is read from its index entry at or below start_offset, in one
            # pass: the batches before start_offset are skipped below (no separate look-up read)
            pos = seg.offset_index.lookup(start_offset)[1] if seg is segs[0] else 0
            # a page bounded by max_records reads the segment in small windows (more as needed)
            window = min(max_bytes, SCAN_BUFFER_SIZE) if max_records is not None else max_bytes
            source = str(seg.log_path)
            for p, batch in seg.batches(pos, size, buffer_size=max(window, 4096)):
                if batch.last_offset < start_offset:
                    continue
                if max_offset is not None and batch.base_offset >= max_offset:
                    return
                if out and total + batch.size_in_bytes > max_bytes:
                    return
                # A read reports damaged bytes (file and position) rather than serving them,
                # as the remote read path already does.
                batch.ensure_valid(source=source, position=p)
                out.append(batch)
                total += batch.size_in_bytes
                if max_records is not None and not batch.is_control:
                    # at most this many of the batch's records lie at or after start_offset
                    records += min(batch.records_count, batch.last_offset - max(start_offset, batch.base_offset) + 1)
                    if records >= max_records:
                        return

    def collect_aborted_transactions(self, start_offset: int, upper: int) -> list[AbortedTxn]:
        """Aborted transactions overlapping [start_offset, upper), from the .txnindex files."""
        with self.lock:
            # An entry lives in the segment holding its ABORT marker, which may lie at or beyond
            # ``upper``: walk from floor(start_offset) through every later segment until one
            # completes the search, as Kafka's LocalLog.collectAbortedTransactions does.
            first = self.segments.floor(start_offset) or self.segments.first()
            segs = ([s for s in self.segments.all() if s.base_offset >= first.base_offset]
                    if start_offset < upper and first is not None else [])
            out: list[AbortedTxn] = []
            for seg in segs:
                found, complete = seg.txn_index.collect(start_offset, upper)
                out.extend(found)
                if complete:
                    break
            return out

    # ---- replacing and deleting segments ----------------------------------------------------
    def create_cleaned_segment(self, base_offset: int) -> LogSegment:
        """A fresh ``<base>.*.cleaned`` segment (stale ones from a crashed clean are removed)."""
        for p in self.dir.glob(f"{base_offset:020d}.*{CLEANED_SUFFIX}"):
            p.unlink()
        return LogSegment(self.dir, base_offset, index_interval_bytes=int(self.config.get("index.interval.bytes")),
                          suffix=CLEANED_SUFFIX, create=True)

    def split_overflowed_segment(self, seg: LogSegment) -> list[LogSegment]:
        """Rewrite a segment whose offsets overflow its base's 32-bit range (see log.segment_split)."""
        return split_overflowed_segment(self, seg)

    def replace_segments(self, new_segments: Sequence[LogSegment], old_segments: Iterable[LogSegment]) -> None:
        """Kafka's replaceSegments: .cleaned -> .swap, old -> .deleted, .swap -> final."""
        with self.lock:
            news = sorted(new_segments, key=lambda s: s.base_offset, reverse=True)
            olds = sorted((s for s in old_segments if s in self.segments), key=lambda s: s.base_offset)
            for seg in news:
                seg.flush()
                seg.change_suffix(SWAP_SUFFIX)
                self._hook("renamed_to_swap")
            min_new = min(s.base_offset for s in news) if news else None
            for seg in news:
                self.segments.add(seg)
            for seg in olds:
                if seg.base_offset != min_new and all(seg.base_offset != n.base_offset for n in news):
                    self.segments.remove(seg.base_offset)
                self._delete_segment_files(seg)
                self._hook("renamed_to_deleted")
            for seg in news:
                seg.change_suffix("")
                self._hook("renamed_from_swap")
            new_bases = {n.base_offset for n in news}
            for seg in olds:  # A.10 step 5: snapshots of replaced segments that were not re-created
                if seg.base_offset not in new_bases:
                    snapshot_path(self.dir, seg.base_offset).unlink(missing_ok=True)
            fsync_dir(self.dir)

    def _delete_segment_files(self, seg: LogSegment) -> None:
        seg.change_suffix(DELETED_SUFFIX)
        delay = int(self.config.get("file.delete.delay.ms"))
        if self.scheduler is not None:
            self.scheduler.remove_later(delay, seg.close, seg.files)
        else:
            seg.delete_files()

    def delete_segments(self, segments: Iterable[LogSegment]) -> list[int]:
        """Remove whole segments (retention); the active segment is rolled first if included."""
        with self.lock:
            segs = [s for s in segments if s in self.segments]
            if not segs:
                return []
            if any(s is self.active_segment for s in segs):
                if self.active_segment.size == 0 and len(self.segments) == 1:
                    segs = [s for s in segs if s is not self.active_segment]
                else:
                    self.roll()
            for seg in segs:
                self.segments.remove(seg.base_offset)
                self._delete_segment_files(seg)
            self._delete_snapshots_below(self.log_start_offset)
            fsync_dir(self.dir)
            return [s.base_offset for s in segs]

    def remove_expired_producers(self, now: int | None = None) -> list[int]:
        """Kafka's periodic removeExpiredProducers (see log/producer_state.py)."""
        with self.lock:
            now = self.clock.milliseconds() if now is None else now
            return self.producer_state.remove_expired_producers(
                now, int(self.config.get("producer.id.expiration.ms")))

    def delete_old_segments(self, now: int | None = None) -> list[int]:
        """Retention: segments below the log start offset DeleteRecords set (whatever the policy, as
        Kafka), then for cleanup.policy containing 'delete' retention.ms and retention.bytes."""
        with self.lock:
            below = self.start_breached_segments()
            deleted = self.delete_segments(below) if below else []
            if self.config.delete:
                now = self.clock.milliseconds() if now is None else now
                # Kafka's deletableSegments walks the active segment too (unless it is empty): a
                # record older than retention.ms must not outlive it by segment.ms (7 days by
                # default). delete_segments rolls the active segment before removing it.
                deleted += self.delete_segments(self.retention_breached_segments(
                    now, int(self.config.get("retention.ms")), int(self.config.get("retention.bytes")),
                    include_active=True))
                if deleted and not self.config.remote_storage_enable:
                    # the log starts at its first segment now (a tiered log starts in its remote tier: its
                    # history stays whole down to there)
                    self.epochs.truncate_from_start(self.log_start_offset)
            return deleted

    def retention_breached_segments(self, now: int, retention_ms: int, retention_bytes: int,
                                    extra_bytes: int = 0, *, include_active: bool = False) -> list[LogSegment]:
        """Segments, oldest first, past ``retention_ms`` or beyond ``retention_bytes``.

        The active segment is a candidate only with ``include_active`` and when it holds
        records; local retention of tiered logs never passes it (it is not copied yet).
        """
        with self.lock:
            segs = self.segments.all()
            if not (include_active and segs and segs[-1].size > 0):
                segs = segs[:-1]
            return retention_breached(segs, now, retention_ms, retention_bytes,
                                      total_bytes=self.segments.size_in_bytes() + extra_bytes,
                                      size=lambda s: s.size, max_timestamp=lambda s: s.largest_timestamp)

    # ---- lifecycle -----------------------------------------------------------------------
    def flush(self) -> None:
        self.sync_rolled()
        with self.lock:
            for seg in self.segments:
                seg.flush()

    def close(self, *, clean: bool = True, timeout: float | None = None) -> bool:
        """Flush and close the segments; with ``clean``, mark a clean shutdown (the next open
        skips full recovery). ``timeout`` bounds the wait for the log's lock (shutdown: a thread
        abandoned mid-operation may hold it); on timeout nothing is marked and False is returned."""
        if not self.lock.acquire(timeout=-1 if timeout is None else timeout):
            logger.warning("%s: busy at shutdown; left unclosed (recovered at the next start)", self.topic_partition)
            return False
        try:
            if self._closed:
                return True
            active = self.active_segment
            # Kafka's LogSegment.close: the active segment's time index gets its final entry
            active.time_index.maybe_append(active.max_timestamp_so_far, active.offset_of_max_timestamp_so_far)
            for seg in self.segments:
                seg.flush()
                seg.close()
            if self._unsynced_rolls:  # their segments were just synced; the snapshots and names are left
                for _seg, snapshot in self._unsynced_rolls:
                    fsync_path(snapshot, missing_ok=True)
                fsync_dir(self.dir)
                self._unsynced_rolls.clear()
                self._advance_recovery_point()
                self._store_recovery_point()
            if clean:
                (self.dir / CLEAN_SHUTDOWN_FILE).touch()
            self._closed = True
            return True
        finally:
            self.lock.release()

    def __repr__(self) -> str:
        return f"LocalLog({self.topic_partition}, segments={len(self.segments)})"
