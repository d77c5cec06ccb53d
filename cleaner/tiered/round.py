"""TieredCleaner: Kafka's cleaning round for a partition whose segments live in an object store.

A "download-clean-upload" round, built from the local cleaner's steps
(:func:`~cleaner.cleaner.build_offset_map_from_segments`, :func:`~cleaner.cleaner.clean_into`)
so the retention rules are exactly the local ones. A round over one partition:

1. **Plan from metadata alone.** The referenced remote segments are the canonical log below
   the tiering point. The dirty range is ``[checkpoint, upper)`` where the checkpoint is the
   larger of the local cleaner-offset-checkpoint and the remote cleaner-offset vector's
   value for the newest epoch, and ``upper`` is the first uncleanable offset (last stable
   offset, active segment, ``min.compaction.lag.ms``), capped at the end of what is already
   in remote storage and rounded down to a remote segment boundary.
2. **Map the dirty range in chunks** of at most ``min(segment.bytes, free disk / 3)``: the
   remote segments of a chunk that have no identical local copy are fetched into a temporary
   directory, mapped into the same offset map, and deleted before the next chunk. If the
   map fills, the round ends where it got (the next round continues from there).
   The map pass also digests each dirty key once (:class:`~cleaner.key_skip.DirtyKeys`), and
   a downloaded segment stays on disk for the rewrite while a keep budget allows (a third of
   the free disk beyond one chunk and one output), so a dirty segment is downloaded once.
3. **Rewrite** every referenced segment below the mapped end. A segment of the already
   clean region is decided by :mod:`cleaner.key_skip`: rewritten if it holds transactional
   batches or a delete horizon that has passed; else **skipped** and carried forward
   unchanged if its bloom filter (metadata store) rules out every dirty key, or if its exact
   key index (an object beside it, read through the read cache; built from a download if it
   has none) holds none of them; else rewritten (or carried forward by the optional cost
   gate). Consecutive segments to rewrite are grouped up to ``segment.bytes``; each
   group is fetched source by source (so local disk holds one source plus the output),
   cleaned into one new segment, and uploaded under a **new** RemoteLogSegmentId with
   its new bloom filter and key index, registered COPY_SEGMENT_STARTED under the round's
   leader epoch.
4. **Publish once** through :meth:`RemoteLogMetadataManager.publish_compaction` with the
   cleaner-offset vector ``{..., epoch: end}``: the new segments become readable and the old
   ones unreferenced in one fenced transaction. A leader whose epoch was superseded while
   the round ran is rejected there (whatever the arrival order) and deletes what it
   uploaded; its metadata rows are orphans the new leader's deferred-delete loop removes.
   The replaced objects are deleted later by that loop, after epoch validation.
5. **Finish locally**: the cleaner checkpoint is written and local copies wholly below the
   new checkpoint (stale, uncompacted caches of remote data) are removed, so local and
   remote reads agree.

Transactions and producers as in Kafka: aborted transactions are collected forward over both
tiers (:class:`RoundTxnIndexes`), and "keep each producer's last batch" reads the partition's active
producers (:meth:`~cleaner.tiered.view.PartitionView.active_producers`: a live log's producer state), which covers the remote tier too: it is carried by the producer
snapshot uploaded with every remote segment and restored from it by a node whose local log is
behind the remote tier (:mod:`remote.segment_state`), never derived from the batches a round reads.

Deliberate difference from Kafka (which cannot compact tiered topics at all): segments of the
clean region that the bloom filter rules out are not recopied, so their tombstones are revisited
only once their recorded delete horizon has passed (see :mod:`log.index.bloom` for the summary
stored with each filter). A segment holding transactional or control batches is never skipped.

Thread-safety: a TieredCleaner (and its offset map) belongs to one cleaner thread; rounds on
different partitions may run in different TieredCleaners at once.
"""

from __future__ import annotations

import dataclasses
import logging
import shutil
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import cast

from cleaner.cleaner import (
    CleanContext,
    build_offset_map_from_segments,
    clean_into,
    finish_cleaned_segment,
)
from cleaner.config import CleanerConfig
from cleaner.errors import InsufficientDiskError
from cleaner.key_skip import REWRITE_DISABLED, Decision, DirtyKeys, SkipPolicy
from cleaner.offset_map import OffsetMap, max_map_entries
from cleaner.round_metadata import RoundMetadata
from cleaner.stats import CleanerStats
from cleaner.throttler import Throttler
from cleaner.tiered.plan import TieredRoundPlan, group_remote_segments, plan_round
from cleaner.tiered.sources import Source, close_source, fetch_verified, link_local_copy, naming
from cleaner.tiered.space import TempSpace
from cleaner.tiered.txn_indexes import RoundTxnIndexes
from cleaner.tiered.view import PartitionView, partition_view
from cleaner.transactions import CleanedTransactionMetadata
from log.checkpoint import LeaderEpochCheckpointFile
from log.clock import SYSTEM_CLOCK, Clock
from log.index.key_index import build_segment_indexes, scan_keys
from log.local_log import LocalLog, SimulatedCrash
from log.segment import LogSegment
from log.types import EpochEntry, TopicPartition
from metadata.errors import FencedLeaderEpochError
from metadata.manager import RemoteLogMetadataManager
from metadata.types import RemoteLogSegmentId, RemoteLogSegmentMetadata, RemoteLogSegmentState
from remote.segment_deletion import SegmentDeleter
from remote.segment_state import rewritten_segment_state
from remote.storage_manager import IndexType, LogSegmentData, RemoteStorageManager

logger = logging.getLogger(__name__)

#: downloads kept open for the rewrite at most (each holds file handles), whatever the disk allows
MAX_KEPT_SOURCES = 256


class TieredCleaner:
    """Runs tiered cleaning rounds with one offset map. See the module docstring."""

    def __init__(self, rlmm: RoundMetadata, rsm: RemoteStorageManager, offset_map: OffsetMap,
                 config: CleanerConfig, *, temp_dir: Path, broker_id: int = 0, clock: Clock = SYSTEM_CLOCK,
                 throttler: Throttler | None = None, free_disk: Callable[[Path], int] | None = None,
                 disk_hook: Callable[[int], None] | None = None, bloom_skip: bool = True,
                 check_done: Callable[[TopicPartition], None] | None = None, use_key_index: bool = True,
                 segment_ids: Callable[[TopicPartition], RemoteLogSegmentId] = RemoteLogSegmentId.generate) -> None:
        self.rlmm = rlmm
        self.rsm = rsm
        self.offset_map = offset_map
        self.config = config
        self.temp_root = Path(temp_dir)
        self.broker_id = broker_id
        self.clock = clock
        self.throttler = throttler
        self.free_disk = free_disk or (lambda p: shutil.disk_usage(p).free)
        self.disk_hook = disk_hook
        self.bloom_skip = bloom_skip
        #: False: the clean region is decided by bloom filters alone (the behaviour before key indexes)
        self.use_key_index = use_key_index
        self.check_done = check_done
        #: the id of each new segment (a Spark executor's carry its job's tag, see remote.orphans)
        self.segment_ids = segment_ids
        #: downloads of this round kept on disk for the rewrite (segment id -> source), within _keep_budget
        self._kept: dict[str, Source] = {}
        self._keep_budget = 0
        #: sources opened only to build a key index, closed once their segment is decided
        self._deciding: list[Source] = []
        #: the round's dirty keys (collected by the map pass when a clean region is to be tested)
        self._dirty_keys: DirtyKeys | None = None
        self.max_entries = max_map_entries(offset_map, config.load_factor)
        #: the round's transaction indexes (remote and local), each loaded at most once per round
        self._round_txns: RoundTxnIndexes | None = None
        #: the last round's temp space (peak bytes for tests and stats)
        self.last_space: TempSpace | None = None
        #: the running (or last) round's stats, also when it raised
        self.current_stats: CleanerStats | None = None
        #: test hook called with a step name ("mapped", "uploaded", "before_publish", "published"); raising
        #: log.local_log.SimulatedCrash there stops the round as a power cut would
        self.crash_hook: Callable[[str], None] | None = None

    def _hook(self, step: str) -> None:
        if self.crash_hook is not None:
            self.crash_hook(step)

    # ---- chunk bound ---------------------------------------------------------------------
    def chunk_bound(self, log: PartitionView | LocalLog) -> int:
        """min(segment.bytes, free disk / 3): room for downloads, the map's spill and output."""
        self.temp_root.mkdir(parents=True, exist_ok=True)
        return max(min(log.config.segment_bytes, self.free_disk(self.temp_root) // 3), 1)

    # ---- the round -------------------------------------------------------------------------
    def clean(self, partition: PartitionView | LocalLog, *, leader_epoch: int, local_checkpoint: int | None,
              now: int | None = None, plan: TieredRoundPlan | None = None) -> tuple[int, CleanerStats]:
        """One round on ``partition`` (a live LocalLog, or any :class:`~cleaner.tiered.view.PartitionView`);
        returns (new checkpoint, stats).

        ``plan``: the round's plan when the caller made it already (a Spark executor runs the
        round its driver planned, see :mod:`cleaner.spark.partition_round`); else planned here
        from the metadata store, which ``self.rlmm`` must then be.

        Raises:
            FencedLeaderEpochError: leadership moved while the round ran; nothing was published
                and the round's uploads were removed.
            InsufficientDiskError: free disk cannot hold one segment within the chunk bound.
        """
        log = partition_view(partition)
        tp = log.topic_partition
        now = self.clock.milliseconds() if now is None else now
        stats = CleanerStats(self.clock, tp)
        self.current_stats = stats  # what a failed round got through (its report)
        self._round_txns = None
        if plan is None:
            plan = plan_round(tp, log, cast(RemoteLogMetadataManager, self.rlmm), leader_epoch=leader_epoch,
                              local_checkpoint=local_checkpoint, now=now)
        if plan is None or plan.upper <= plan.first_dirty_offset:
            cp = plan.first_dirty_offset if plan else (local_checkpoint or 0)
            stats.first_dirty_offset = stats.end_offset = cp
            stats.index_done()
            stats.all_done()
            return cp, stats
        stats.first_dirty_offset = plan.first_dirty_offset
        space = TempSpace(self.temp_root / tp.dir_name, self.disk_hook)
        self.last_space = space
        self._start_round(log, plan)
        uploaded: list[RemoteLogSegmentMetadata] = []  # filled as uploads land, so a failure can undo them
        replaced: list[RemoteLogSegmentMetadata] = []
        try:
            self._round_txns = self._txn_indexes(log, plan, stats)
            end = self._map_dirty_range(log, plan, space, stats)
            stats.index_done()
            self._hook("mapped")
            self._rewrite(log, plan, end, now, space, stats, uploaded, replaced)
            self._hook("before_publish")
            vector = dict(plan.cleaner_offsets)
            vector[leader_epoch] = end
            if uploaded or replaced:
                self.rlmm.publish_compaction(tp, leader_epoch=leader_epoch,
                                             new_segment_ids=[m.remote_log_segment_id for m in uploaded],
                                             replaced_segment_ids=[m.remote_log_segment_id for m in replaced],
                                             cleaner_offsets=vector)
            else:
                self.rlmm.publish_cleaner_offsets(tp, leader_epoch=leader_epoch, cleaner_offsets=vector)
            self._hook("published")
        except SimulatedCrash:
            raise  # a power cut runs no cleanup: recovery must cope with what is left
        except BaseException as e:
            self._abandon(uploaded, leader_epoch, fenced=isinstance(e, FencedLeaderEpochError))
            raise
        finally:
            self._drop_kept(space)
            space.cleanup()
            self._round_txns = None
        self.drop_stale_local_copies(log, end)
        stats.buffer_utilization = self.offset_map.utilization
        stats.end_offset = end
        stats.all_done()
        logger.info("tiered clean %s [%d, %d): %d segments downloaded, %d skipped by bloom, %d B down, %d B up",
                    tp, plan.first_dirty_offset, end, stats.segments_downloaded, stats.segments_skipped_by_bloom,
                    stats.bytes_downloaded, stats.bytes_uploaded)
        return end, stats

    def _check(self, tp: TopicPartition) -> Callable[[], None]:
        if self.check_done is None:
            return lambda: None
        return lambda: self.check_done(tp)  # type: ignore[misc]

    # ---- phase 1: the offset map ----------------------------------------------------------
    def _map_dirty_range(self, log: PartitionView, plan: TieredRoundPlan, space: TempSpace, stats: CleanerStats) -> int:
        tp = log.topic_partition
        start, upper = plan.first_dirty_offset, plan.upper
        self.offset_map.clear()
        txn = CleanedTransactionMetadata()
        assert self._round_txns is not None
        txn.add_aborted(self._round_txns.collect(start, upper))
        bound = self.chunk_bound(log)
        for chunk in self._chunks(plan.dirty, bound):
            sources = [self._open_source(log, md, space, stats, bound) for md in chunk]
            try:
                with naming(sources):
                    full = build_offset_map_from_segments(
                        [s.segment for s in sources], start, upper, self.offset_map, txn,
                        max_entries=self.max_entries, stats=stats, throttler=self.throttler,
                        check_done=self._check(tp), io_buffer_size=self.config.io_buffer_per_thread)
                    self._collect_dirty_keys(sources, start, upper)
            finally:
                for s in sources:
                    self._keep_or_close(s, space)
            if full:
                stats.map_full = True
                return max(self.offset_map.latest_offset + 1, start)
        return upper

    @staticmethod
    def _chunks(segments: Sequence[RemoteLogSegmentMetadata], bound: int) -> Iterator[list[RemoteLogSegmentMetadata]]:
        chunk: list[RemoteLogSegmentMetadata] = []
        size = 0
        for md in segments:
            if chunk and size + md.segment_size_in_bytes > bound:
                yield chunk
                chunk, size = [], 0
            chunk.append(md)
            size += md.segment_size_in_bytes
        if chunk:
            yield chunk

    # ---- sources: a local copy, or a download ----------------------------------------------
    def _txn_indexes(self, log: PartitionView, plan: TieredRoundPlan, stats: CleanerStats) -> RoundTxnIndexes:
        """The round's transaction indexes over both tiers. A remote index is fetched at most once
        per round: the map pass and the rewrite both walk it, and segment ids never change."""
        def downloaded(n: int) -> None:
            stats.bytes_downloaded += n

        def fetch(md: RemoteLogSegmentMetadata) -> bytes:
            data = self.rsm.fetch_index(md, IndexType.TRANSACTION)
            account = stats.account(md.id, None, md.start_offset, md.end_offset)
            account.downloaded += len(data)
            account.requests += 1
            return data

        return RoundTxnIndexes(log, plan.segments, self.rlmm, fetch,
                               local_copies=True, on_download=downloaded)

    def _open_source(self, log: PartitionView, md: RemoteLogSegmentMetadata, space: TempSpace, stats: CleanerStats,
                     bound: int) -> Source:
        kept = self._kept.pop(md.id, None)
        if kept is not None:  # downloaded earlier this round (map pass or key index build)
            return kept
        linked = link_local_copy(log, md, space)
        if linked is not None:
            return linked
        # A segment above segment.bytes (one batch bigger than it) is a chunk on its own; it is
        # refused only if it does not fit in a third of the free disk.
        if md.segment_size_in_bytes > bound and md.segment_size_in_bytes > self.free_disk(self.temp_root) // 3:
            raise InsufficientDiskError(
                f"remote segment {md.id} of {log.topic_partition} is {md.segment_size_in_bytes} bytes but a third "
                f"of the free disk under {self.temp_root} is smaller; free disk space and the round is retried")
        base = md.start_offset
        log_path = space.dir / f"{base:020d}.log"
        n = fetch_verified(self.rsm, md, log_path)
        # only the .log: aborted transactions reach the cleaner through the round's
        # RoundTxnIndexes (forward over both tiers), never through the source's own index
        files = [log_path]
        space.track(*files)
        stats.segments_downloaded += 1
        stats.bytes_downloaded += n
        account = stats.account(md.id, None, md.start_offset, md.end_offset)
        account.downloaded += n
        account.requests += 1
        account.log_downloads += 1
        if self.throttler is not None:
            self.throttler.maybe_throttle(n)
        seg = LogSegment(space.dir, base, index_interval_bytes=int(log.config.get("index.interval.bytes")))
        return Source(md, seg, tuple(files + [seg.offset_index.path, seg.time_index.path]),
                       name=f"remote segment {self.rsm.object_key(md)}")

    # ---- phase 2: rewrite ---------------------------------------------------------------
    def _decide(self, md: RemoteLogSegmentMetadata, plan: TieredRoundPlan, policy: SkipPolicy) -> Decision:
        """Dirty segments are rewritten; the clean region is decided by :mod:`cleaner.key_skip`."""
        if not self.bloom_skip:
            return REWRITE_DISABLED
        if md.end_offset >= plan.first_dirty_offset:
            return Decision(True, "dirty")
        return policy.decide(md)

    def _skip_policy(self, log: PartitionView, plan: TieredRoundPlan, now: int, space: TempSpace, stats: CleanerStats,
                     bound: int) -> SkipPolicy:
        def download(md: RemoteLogSegmentMetadata) -> Path:
            src = self._open_source(log, md, space, stats, bound)
            if not self._keep(src, space):
                self._deciding.append(src)  # over the keep budget: closed once the segment is decided
            return src.segment.log_path

        keys = self._dirty_keys if self._dirty_keys is not None else DirtyKeys()
        return SkipPolicy(self.rlmm, self.rsm, keys, now=now,
                          max_compaction_lag_ms=int(log.config.get("max.compaction.lag.ms")),
                          min_reclaimable_ratio=float(log.config.get("remote.compaction.min.reclaimable.ratio")),
                          use_key_index=self.use_key_index, stats=stats, download=download)

    # ---- downloads kept for the rewrite ----------------------------------------------------
    def _start_round(self, log: PartitionView, plan: TieredRoundPlan) -> None:
        """Size the keep budget: what a third of the free disk holds beyond one chunk and one
        output (so the round's temp disk stays within the larger of that third and the chunk
        bound plus an output), and decide whether the map pass collects dirty keys."""
        bound = self.chunk_bound(log)
        third = self.free_disk(self.temp_root) // 3
        self._kept = {}
        self._keep_budget = max(0, third - bound - log.config.segment_bytes)
        has_clean_region = any(s.end_offset < plan.first_dirty_offset for s in plan.segments)
        self._dirty_keys = DirtyKeys() if (self.bloom_skip and has_clean_region) else None

    def _collect_dirty_keys(self, sources: Sequence[Source], start: int, upper: int) -> None:
        """Digest each dirty key once (a map that fills makes this a superset: safe)."""
        if self._dirty_keys is None:
            return
        for src in sources:
            scan = scan_keys(src.segment.log_path, start, upper)
            self._dirty_keys.add(scan.digests, scan.tombstones)

    def _keep(self, src: Source, space: TempSpace) -> bool:
        """Keep a downloaded source (not a linked local copy) for the rewrite if the budget allows."""
        downloaded = bool(src.temp_files) and src.segment.log_path.parent == space.dir
        kept = sum(k.md.segment_size_in_bytes for k in self._kept.values())
        if (downloaded and src.md.id not in self._kept and len(self._kept) < MAX_KEPT_SOURCES
                and kept + src.md.segment_size_in_bytes <= self._keep_budget):
            self._kept[src.md.id] = src
            return True
        return False

    def _keep_or_close(self, src: Source, space: TempSpace) -> None:
        if not self._keep(src, space):
            close_source(src, space)

    def _release_kept(self, md: RemoteLogSegmentMetadata, space: TempSpace) -> None:
        """After a decision: a carried-forward segment's download, and any source opened only to
        build an index, leave the disk."""
        src = self._kept.pop(md.id, None)
        if src is not None:
            close_source(src, space)
        while self._deciding:
            close_source(self._deciding.pop(), space)

    def _drop_kept(self, space: TempSpace) -> None:
        for src in [*self._kept.values(), *self._deciding]:
            close_source(src, space)
        self._kept, self._deciding = {}, []

    def _rewrite(self, log: PartitionView, plan: TieredRoundPlan, end: int, now: int, space: TempSpace,
                 stats: CleanerStats, uploaded: list[RemoteLogSegmentMetadata],
                 replaced: list[RemoteLogSegmentMetadata]) -> None:
        """Clean every referenced segment below ``end`` that may change, appending each upload
        and the segments it replaces to ``uploaded`` / ``replaced`` as soon as it lands."""
        tp = log.topic_partition
        bound = self.chunk_bound(log)
        candidates = [s for s in plan.segments if s.start_offset < end]
        runs: list[list[RemoteLogSegmentMetadata]] = [[]]
        policy = self._skip_policy(log, plan, now, space, stats, bound)
        if self.bloom_skip:  # the clean region's bloom filters in batched queries, not one per segment
            policy.prefetch([s for s in candidates if s.end_offset < plan.first_dirty_offset])
        for md in candidates:
            decision = self._decide(md, plan, policy)
            if not decision.rewrite:
                if decision.action == "skipped-by-bloom":
                    stats.segments_skipped_by_bloom += 1
                stats.account(md.id, decision.action, md.start_offset, md.end_offset)
                self._release_kept(md, space)  # if it was downloaded to build its index
                if runs[-1]:
                    runs.append([])
            else:
                while self._deciding:  # opened for its index but over the keep budget: fetched again
                    close_source(self._deciding.pop(), space)
                runs[-1].append(md)
        groups = [g for run in runs if run for g in group_remote_segments(run, min(log.config.segment_bytes, bound), end)]
        producers = log.active_producers()
        ctx = CleanContext(now_ms=now, delete_retention_ms=int(log.config.get("delete.retention.ms")),
                           upper_bound_of_round=plan.upper, active_producers=producers,
                           txn_metadata=CleanedTransactionMetadata(), throttler=self.throttler,
                           check_done=self._check(tp), io_buffer_size=self.config.io_buffer_per_thread)
        out_dir = space.dir / "out"
        out_dir.mkdir(exist_ok=True)
        fpp = float(log.config.get("remote.compaction.bloom.fpp"))
        for group in groups:
            ctx.check_done()
            dest = LogSegment(out_dir, group[0].start_offset,
                              index_interval_bytes=int(log.config.get("index.interval.bytes")), create=True)
            ctx.txn_metadata.cleaned_index = dest.txn_index
            assert self._round_txns is not None
            aborted = self._round_txns.for_sources(group)
            try:
                for md, txns in zip(group, aborted, strict=True):
                    src = self._open_source(log, md, space, stats, bound)
                    try:
                        ctx.txn_metadata.add_aborted(txns)
                        with naming([src]), stats.measure(
                                stats.account(md.id, "rewritten", md.start_offset, md.end_offset)):
                            clean_into(src.segment, dest, self.offset_map, ctx, stats)
                        space.track(dest.log_path)
                    finally:
                        close_source(src, space)
                finish_cleaned_segment(dest, now)
                stats.segments_cleaned += len(group)
                stats.groups += 1
                new_md = self._upload(log, group, dest, fpp, plan.leader_epoch, stats)
                uploaded.append(new_md)
                replaced.extend(group)
                self._hook("uploaded")
            finally:
                ctx.txn_metadata.cleaned_index = None
                dest.close()
                space.release(*dest.files())

    def _upload(self, log: PartitionView, group: list[RemoteLogSegmentMetadata], dest: LogSegment, fpp: float,
                epoch: int, stats: CleanerStats) -> RemoteLogSegmentMetadata:
        tp = log.topic_partition
        epochs: dict[int, int] = {}
        for md in group:
            for e, off in md.segment_leader_epochs.items():
                epochs[e] = min(off, epochs.get(e, off))
        max_ts = dest.max_timestamp_so_far if dest.max_timestamp_so_far >= 0 else max(m.max_timestamp_ms for m in group)
        md = RemoteLogSegmentMetadata(
            remote_log_segment_id=self.segment_ids(tp), start_offset=group[0].start_offset,
            end_offset=group[-1].end_offset, max_timestamp_ms=max_ts, broker_id=self.broker_id,
            event_timestamp_ms=self.clock.milliseconds(), segment_size_in_bytes=dest.size,
            segment_leader_epochs=epochs, state=RemoteLogSegmentState.COPY_SEGMENT_STARTED)
        bloom, key_index = build_segment_indexes(dest, fpp)  # one scan of the output: both key indexes
        key_index_data = key_index.to_bytes()
        md = dataclasses.replace(md, key_index_bytes=len(key_index_data))
        # the bloom filter is registered with the segment, in its fenced transaction: stored after
        # the copy, a new leader's deferred delete could end the row first ("was deleted", found
        # by the soak) where the round must learn that it was fenced
        self.rlmm.add_remote_log_segments([(md, bloom.to_bytes())], leader_epoch=epoch)
        for index in (dest.offset_index, dest.time_index):  # an empty index is still uploaded
            index.flush()
            index.path.touch(exist_ok=True)
        txn = dest.txn_index.path if dest.txn_index.entries else None
        entries = [EpochEntry(e, o) for e, o in sorted(epochs.items())]
        try:
            # KIP-405 LogSegmentData: the replaced segments' producer snapshot and epoch checkpoint
            checkpoint, snapshot = rewritten_segment_state(self.rsm, group, LeaderEpochCheckpointFile.render(entries))
            self.rsm.copy_log_segment_data(md, LogSegmentData(
                dest.log_path, dest.offset_index.path, dest.time_index.path, txn, checkpoint, snapshot,
                key_index=key_index_data))
        except SimulatedCrash:
            raise
        except BaseException as e:
            self._abandon([md], epoch, fenced=isinstance(e, FencedLeaderEpochError))
            raise
        uploaded = dest.size + dest.offset_index.size_in_bytes + dest.time_index.size_in_bytes + len(key_index_data)
        stats.bytes_uploaded += uploaded
        # the replaced segments' state objects were read for it (two GETs), its objects written
        stats.account(max(group, key=lambda m: m.end_offset).id).requests += 2
        account = stats.account(md.id, "uploaded", md.start_offset, md.end_offset)
        account.bytes_out, account.uploaded = dest.size, uploaded
        account.requests += 5 + (txn is not None) + (snapshot is not None)
        if self.throttler is not None:
            self.throttler.maybe_throttle(uploaded)
        return md

    def _abandon(self, uploaded: list[RemoteLogSegmentMetadata], epoch: int, *, fenced: bool) -> None:
        """Remove a failed round's uploads; their metadata rows are orphans the deferred-delete loop ends."""
        SegmentDeleter(self.rlmm, self.rsm, self.broker_id, self.clock).remove_uploads(
            uploaded, epoch, tombstone=lambda md: not fenced, what="abandoned upload")

    @staticmethod
    def drop_stale_local_copies(log: PartitionView | LocalLog, end: int) -> list[int]:
        """Local segments wholly below the new checkpoint now hold stale copies of remote data."""
        return partition_view(log).drop_local_copies_below(end)
