"""LogLoader: opens a partition directory into its segments, producer state and leader-epoch history.

Kafka's LogLoader, split from LocalLog as Kafka splits it from UnifiedLog. Opening a
directory recovers from a crash at any step of the swap protocol (LocalLog.replace_segments):
``*.deleted`` and ``*.cleaned`` files are removed, complete ``*.swap`` sets replace what they
cover; temp files of interrupted atomic writes are removed; a torn tail of the active segment
is truncated (unless the last shutdown was clean), and so is one of a rolled segment at or above
the partition's recovery point (a roll syncs its segment in the background, as Kafka's does: a
crash may come first), the segments after it then removed, as Kafka's recoverLog does; a rolled
segment below the recovery point that lost data is refused;
missing or corrupt indexes are rebuilt; the producer state is loaded from the newest valid
snapshot and the batches after it replayed; the leader-epoch checkpoint is read.

The loader fills the LogSegments and ProducerStateManager its LocalLog owns (so the log can
close whatever was opened when loading fails) and holds no lock: the log is not shared yet.
"""

from __future__ import annotations

import logging
import os
from pathlib import Path

from log.checkpoint import TMP_SUFFIX, LeaderEpochCheckpointFile, fsync_dir
from log.clock import Clock
from log.config import LogConfig
from log.errors import CorruptIndexError, CorruptRecordError
from log.producer_snapshot import decode_snapshot, list_snapshots
from log.producer_state import ProducerStateManager
from log.record import iter_batches
from log.segment import (
    CLEANED_SUFFIX,
    DELETED_SUFFIX,
    LOG_SUFFIX,
    SEGMENT_FILE_SUFFIXES,
    SWAP_SUFFIX,
    TXN_INDEX_SUFFIX,
    LogSegment,
    offset_from_filename,
)
from log.segments import LogSegments
from log.types import EpochEntry, TopicPartition

logger = logging.getLogger(__name__)

#: present in a partition directory after a clean shutdown: the next open skips tail recovery
CLEAN_SHUTDOWN_FILE = ".clean-shutdown"


def segment_advice(path: str | None) -> str:
    """What an operator can do about a damaged segment file."""
    what = f"'tiercompact dump-log {path}'" if path else "'tiercompact dump-log <segment>.log'"
    return (f"Inspect it with {what}, then restore the file from a backup (a tiered topic's object store may "
            f"hold a copy of the segment) or delete the topic, and restart the node")


class LogLoader:
    """Loads one partition directory (see the module docstring); used once, by LocalLog's constructor."""

    def __init__(self, directory: Path, topic_partition: TopicPartition, config: LogConfig, clock: Clock,
                 segments: LogSegments, producer_state: ProducerStateManager,
                 epoch_file: LeaderEpochCheckpointFile, *, recovery_point: int | None = None) -> None:
        self.dir = directory
        #: every record below it was on disk (None: no recovery point stored, every rolled segment was)
        self.recovery_point = recovery_point
        self.topic_partition = topic_partition
        self.config = config
        self.clock = clock
        self.segments = segments
        self.producer_state = producer_state
        self._epoch_file = epoch_file

    def load(self) -> list[EpochEntry]:
        """Open the directory: finish swaps, open segments, recover, replay producer state;
        returns the leader-epoch history.

        Raises CorruptRecordError (naming the file and what to do) when the directory cannot
        be opened without losing data: a rolled segment that is corrupt, truncated or
        emptied, or a malformed leader-epoch-checkpoint. The log manager then takes this one
        partition offline.
        """
        self._remove_temp_files()
        clean_marker = self.dir / CLEAN_SHUTDOWN_FILE
        clean_shutdown = clean_marker.exists()
        self._complete_swaps()
        interval = int(self.config.get("index.interval.bytes"))
        bases = sorted(offset_from_filename(p.name) for p in self.dir.glob("*" + LOG_SUFFIX))
        #: a crash may have left rolled segments from here on unsynced: they are recovered as the active one is
        unsynced_from = None if clean_shutdown or self.recovery_point is None else self.recovery_point
        cut: int | None = None  # a torn unsynced segment ended the log here: later segments are removed
        for i, base in enumerate(bases):
            if cut is not None:
                self._remove_segment_files(base)
                continue
            try:
                seg = LogSegment(self.dir, base, index_interval_bytes=interval)
            except CorruptIndexError as e:
                if e.source is not None and e.source.endswith(TXN_INDEX_SUFFIX):
                    raise CorruptRecordError(
                        f"{e}. The transaction index cannot be rebuilt from its segment alone; restore it from "
                        f"a backup (a tiered topic's object store keeps a copy as <offset>-<segment id>.txnindex) "
                        f"or delete the topic, and restart the node") from None
                logger.warning("%s: %s; rebuilding indexes", self.topic_partition, e)
                for suffix in (".index", ".timeindex"):
                    (self.dir / f"{base:020d}{suffix}").unlink(missing_ok=True)
                seg = LogSegment(self.dir, base, index_interval_bytes=interval)
                seg.rebuild_indexes()
            self.segments.add(seg)
            is_last = i == len(bases) - 1
            if is_last and not clean_shutdown and seg.size:
                truncated = seg.recover()
                if truncated:
                    logger.warning("%s: truncated %d bytes of torn tail in %s",
                                   self.topic_partition, truncated, seg.log_path)
            elif not is_last and unsynced_from is not None and bases[i + 1] > unsynced_from:
                cut = self._recover_unsynced(seg, bases[i + 1], len(bases) - i - 1)
            elif not is_last:
                self._check_rolled_segment(seg, bases[i + 1])
            elif seg.size and (seg.index_needs_rebuild() or not self._index_sane(seg)):
                try:
                    seg.rebuild_indexes()
                except CorruptRecordError as e:
                    raise CorruptRecordError(f"{seg.log_path}: active segment is corrupt ({e}). "
                                             f"{segment_advice(str(seg.log_path))}", source=None) from None
        if cut is not None:
            fsync_dir(self.dir)
        if not len(self.segments):
            self.segments.add(LogSegment(self.dir, 0, index_interval_bytes=interval, create=True))
        try:
            self._replay_producer_state()
        except CorruptRecordError as e:
            raise CorruptRecordError(f"cannot replay the producer state: {e}. {segment_advice(e.source)}",
                                     source=None) from None
        try:
            epoch_entries = self._epoch_file.read()
        except CorruptRecordError as e:
            # Kafka: a malformed leader-epoch-checkpoint is a storage error that takes the log
            # offline (CheckpointFileWithFailureHandler); it is not rebuilt from the batches.
            raise CorruptRecordError(
                f"{e}. Restore {self._epoch_file.path} from a backup, or move it away to open the partition "
                f"with an empty leader-epoch history (then register leadership again with POST "
                f"/v1/topics/{self.topic_partition.topic}/partitions/{self.topic_partition.partition}/leadership), "
                f"and restart the node") from None
        # only now: a partition that failed to load keeps its marker for the next attempt
        clean_marker.unlink(missing_ok=True)
        return epoch_entries

    def _remove_temp_files(self) -> None:
        """Temp files of atomic writes a crash interrupted (``<name>.tmp``: producer snapshots,
        the leader-epoch checkpoint); the file they were replacing is intact."""
        for p in self.dir.glob("*" + TMP_SUFFIX):
            if p.is_file():
                logger.info("%s: removing %s left by an interrupted write", self.topic_partition, p.name)
                p.unlink(missing_ok=True)

    def _recover_unsynced(self, seg: LogSegment, next_base: int, later: int) -> int | None:
        """Recover a rolled segment that may not have been synced before a crash (it holds offsets at or above the
        recovery point): validate it and cut a torn tail, as the active segment's. Returns the log's new end when
        a tail was cut (the ``later`` segments after it are then removed: they would follow a gap), else None."""
        truncated = seg.recover()
        end = seg.read_next_offset()
        if end > next_base:
            raise CorruptRecordError(
                f"{seg.log_path}: rolled segment holds offsets up to {end - 1} but the next segment starts at "
                f"{next_base}. {segment_advice(str(seg.log_path))}", source=None)
        if not truncated:
            return None
        logger.warning("%s: truncated %d bytes of torn tail in %s, a rolled segment the crash came before syncing "
                       "(records from offset %d on were not acknowledged as on disk); removing the %d segment(s) "
                       "after it", self.topic_partition, truncated, seg.log_path, end, later)
        return end

    def _remove_segment_files(self, base: int) -> None:
        for suffix in SEGMENT_FILE_SUFFIXES:
            (self.dir / f"{base:020d}{suffix}").unlink(missing_ok=True)

    def _check_rolled_segment(self, seg: LogSegment, next_base: int) -> None:
        """Refuse a rolled segment that lost data; rebuild its indexes if only they are off.

        A rolled segment was flushed when it rolled (or when the cleaner swapped it in), so
        unlike the active segment it has no torn tail to cut: a short, empty or unreadable
        rolled segment lost records, and silently accepting it would leave a gap. Its indexes
        were written with the data, so they tell: an offset index entry past the end of the
        file, or a time index naming an offset the file no longer holds, means the .log was
        truncated. (An empty cleaned segment, where compaction removed every record, has
        empty indexes and is fine.)
        """
        path = seg.log_path
        claimed = seg.time_index.last_entry[1] if seg.time_index.entries else None
        if seg.offset_index.entries:
            idx_off, idx_pos = seg.offset_index.lookup(2**62)
            if idx_pos >= seg.size:
                raise CorruptRecordError(
                    f"{path}: rolled segment is truncated: it has {seg.size} bytes but its offset index "
                    f"{seg.offset_index.path.name} places offset {idx_off} at byte {idx_pos}. "
                    f"{segment_advice(str(path))} (if only the index is damaged, delete "
                    f"{seg.offset_index.path} and restart to rebuild it)", source=None)
        # Walk the tail (from the last index entry if the index is sane, else the whole file)
        # before touching the indexes: rebuilding them first would erase the evidence.
        index_ok = seg.offset_index.entries > 0 and self._index_sane(seg)
        nxt = seg.base_offset
        try:
            for _pos, batch in seg.batches(seg.offset_index.lookup(2**62)[1] if index_ok else 0):
                nxt = batch.next_offset
        except CorruptRecordError as e:
            raise CorruptRecordError(f"{path}: rolled segment is corrupt or truncated ({e}). "
                                     f"{segment_advice(str(path))}", source=None) from None
        if claimed is not None and claimed >= nxt:
            what = "is empty" if not seg.size else f"ends at offset {nxt - 1}"
            raise CorruptRecordError(
                f"{path}: rolled segment {what} but its time index {seg.time_index.path.name} records offset "
                f"{claimed}: the file was truncated and offsets {nxt}..{claimed} (at least) are missing. "
                f"{segment_advice(str(path))} (if only the index is damaged, delete {seg.time_index.path} "
                f"and restart to rebuild it)", source=None)
        if nxt > next_base:
            raise CorruptRecordError(
                f"{path}: rolled segment holds offsets up to {nxt - 1} but the next segment starts at {next_base}. "
                f"{segment_advice(str(path))}", source=None)
        if seg.size and not index_ok:
            seg.rebuild_indexes()

    @staticmethod
    def _index_sane(seg: LogSegment) -> bool:
        """Cheap check that the last index entry points at a batch that really holds its offset."""
        off, pos = seg.offset_index.lookup(2**62)
        if pos >= seg.size:
            return False
        try:
            for _p, batch in seg.batches(pos, min(seg.size, pos + (1 << 20))):
                return batch.last_offset >= off and batch.base_offset <= off or off == seg.base_offset
        except CorruptRecordError:
            return False
        return False

    def _complete_swaps(self) -> None:
        """Kafka's LogLoader.removeTempFilesAndCollectSwapFiles + completing the swap."""
        min_cleaned = None
        swaps: list[Path] = []
        for p in list(self.dir.iterdir()):
            name = p.name
            if name.endswith(DELETED_SUFFIX):
                p.unlink(missing_ok=True)
            elif name.endswith(CLEANED_SUFFIX):
                off = offset_from_filename(name)
                min_cleaned = off if min_cleaned is None else min(min_cleaned, off)
                p.unlink(missing_ok=True)
            elif name.endswith(SWAP_SUFFIX):
                swaps.append(p)
        remaining = []
        for p in swaps:
            if min_cleaned is not None and offset_from_filename(p.name) >= min_cleaned:
                p.unlink(missing_ok=True)  # a swap that never fully reached the .swap stage
            else:
                remaining.append(p)
        log_swaps = [p for p in remaining if p.name.endswith(LOG_SUFFIX + SWAP_SUFFIX)]
        if log_swaps:
            min_swap = min(offset_from_filename(p.name) for p in log_swaps)
            max_swap = 0
            for p in log_swaps:
                base = offset_from_filename(p.name)
                nxt = base
                try:
                    for _pos, b in iter_batches(p.read_bytes(), source=str(p), allow_truncated_tail=True):
                        nxt = b.next_offset
                except CorruptRecordError:
                    pass
                max_swap = max(max_swap, nxt)
            for p in list(self.dir.iterdir()):
                if p.name.endswith(SWAP_SUFFIX) or not p.name[:20].isdigit():
                    continue
                if min_swap <= offset_from_filename(p.name) < max_swap:
                    p.unlink(missing_ok=True)
        for p in remaining:
            os.replace(p, p.with_name(p.name[: -len(SWAP_SUFFIX)]))
        if remaining:
            fsync_dir(self.dir)

    def _replay_producer_state(self) -> None:
        """Load the newest valid snapshot at or below the log end, then replay the batches after it.

        A snapshot below the first segment (its segments were deleted), past the log end (a
        truncated tail) or corrupt is removed; without one the whole local log is replayed.
        """
        self.producer_state.truncate_and_reset()
        first, last = self.segments.first(), self.segments.last()
        assert first is not None and last is not None
        start, end = first.base_offset, last.read_next_offset()
        replay_from = start
        for off, path in reversed(list_snapshots(self.dir)):
            if off > end or off < start or replay_from != start:
                path.unlink(missing_ok=True)
                continue
            try:
                self.producer_state.load(decode_snapshot(path.read_bytes(), source=str(path)))
                replay_from = off
            except CorruptRecordError as e:
                logger.warning("%s: ignoring producer snapshot: %s", self.topic_partition, e)
                path.unlink(missing_ok=True)
        for seg in self.segments:
            if seg.read_next_offset() <= replay_from:
                continue
            for _pos, batch in seg.batches():
                if batch.base_offset < replay_from:
                    continue
                if batch.is_control:
                    self.producer_state.on_control_batch(batch)
                else:
                    self.producer_state.on_data_batch(batch)
        # Kafka filters expired producers when it loads producer state, too
        self.producer_state.remove_expired_producers(self.clock.milliseconds(),
                                                     int(self.config.get("producer.id.expiration.ms")))
