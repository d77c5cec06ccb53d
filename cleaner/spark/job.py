"""The Spark offload driver: one Spark job cleans the remote tier of many partitions.

It performs the in-process tiered round (:mod:`cleaner.tiered`) with the work spread over
executors, and produces the same bytes. For every requested partition the driver captures the
leader epoch and the cleaner checkpoint, sweeps orphan objects (:mod:`remote.orphans`) and
plans the round from metadata alone (:func:`cleaner.tiered.plan_round`). Then each partition
runs one of two ways:

* **Whole** (every partition whose round may read at most ``split_partition_bytes``, 1 GiB by
  default): the partition's round runs as one task, the in-process round's own code on an
  executor (:mod:`cleaner.spark.partition_round`: compiled kernels, no shuffle); partitions run
  in parallel, several small ones packed into one task. Its metadata writes come back to the
  driver, which replays them under the job's epoch (step 6 below). The job's lease claims the
  ids these rounds make by their tag, and once it is released the driver sweeps what a failed or
  killed attempt left.
* **Split** (larger partitions): one partition's work is spread over many tasks, for all split
  partitions at once:

1. **Transaction indexes** of the segments that may hold transactions (no bloom summary, or
   one flagging transactional batches) are fetched in parallel by the scans: they are small.
   The driver collects aborted transactions from them forward over both tiers
   (:class:`cleaner.tiered.RoundTxnIndexes`, the in-process round's own walk), fetching any
   later remote index the walk still needs and reading the local log above the remote tier,
   so the map and every rewrite task receive the complete aborted set.
2. **Scan**: one task per dirty segment maps it (digest -> latest offset, aborted transactions
   skipped exactly as the in-process map skips them); clean-region segments that hold
   transactional batches, or have no bloom filter, are scanned too. Every scan returns the
   digests present in its segment and the headers of its transactional/control batches.
   The map is reduced by key across executors (``reduceByKey(max)``), so it is bounded by
   the cluster, not one machine: there is no "map full, continue next round".
3. **Bloom skip**: the clean-region segments' filters are broadcast and every map partition
   tests its digests against them; a clean segment is skipped under the in-process rule
   (filter present, no transactional batch, no passed delete horizon, no map digest in it).
   The same hits tell which map entries the segment's group needs.
4. **Groups** are formed on the driver exactly as :func:`cleaner.tiered.group_remote_segments` forms them, and
   the round's transaction state is replayed from the scanned headers to get each group's
   starting :class:`~cleaner.transactions.CleanedTransactionMetadata`.
5. **Rewrite**: each group is one task. It receives only the map entries of digests present
   in its segments (a join of segment digests with the map, plus the bloom hits), fetches its
   sources, cleans them with :func:`~cleaner.cleaner.clean_into` and uploads the new segment
   under an id the driver generated before the stage (a retried task overwrites the same
   keys). A lease (:mod:`remote.orphans`) names these ids while they are unregistered.
6. **Publish**, per partition, on the driver: each new segment is registered
   COPY_SEGMENT_STARTED with its real size and its bloom filter stored, then
   :meth:`~metadata.manager.RemoteLogMetadataManager.publish_compaction` runs with the epoch
   captured at job start and the cleaner-offset vector ``{..., epoch: upper}``. A partition
   whose leadership moved meanwhile is fenced there: its uploads are deleted (their keys are
   known from the pre-generated ids) and the log is unchanged for readers. Then the local
   checkpoint is written through a callback and stale local copies are dropped.

Deliberate differences from the in-process round: local copies are never used as sources
(executors read the object store) and the chunk bound is the executor's disk, not the broker's.
A split partition's groups are bounded by ``segment.bytes`` only and its offset map never fills
(it is reduced across executors); a whole partition's map fills as in process (the round ends
where it got; the next continues).
"""
from __future__ import annotations

import logging
import uuid
import weakref
from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import Any

from pyspark import StorageLevel
from pyspark.sql import SparkSession

from cleaner.report import RoundReporter
from cleaner.round_metadata import TieredMetadata
from cleaner.spark.errors import SparkJobError
from cleaner.spark.packing import (
    key_index_hits,
    map_combiner,
    map_merge_combiners,
    map_merge_value,
    rewrite_bin_stage,
    rewrite_bins,
    round_stage,
    scan_stage,
    segment_groups,
)
from cleaner.spark.partition_round import (
    TAG_LENGTH,
    PartitionRoundTask,
    local_txn_segments,
)
from cleaner.spark.publish import JobPartition, PartitionOutcome, Publishing
from cleaner.spark.report import spark_report
from cleaner.spark.session import (
    SparkCleanConfig,
    build_session,
    has_active_session,
    ship_packages,
    spark_session,
)
from cleaner.spark.tasks import (
    AbortedT,
    RewriteResult,
    RewriteTask,
    ScanResult,
    ScanTask,
    SegmentRef,
    StoreSpec,
    TxnState,
    aborted_batches,
    aborted_from_plain,
    aborted_to_plain,
    drop_kept,
    replay_segment,
)
from cleaner.spark.views import DriverView, LocalLogView, RemoteOnlyMetadata, RemoteOnlyView
from cleaner.tiered import RoundTxnIndexes
from log.clock import SYSTEM_CLOCK, Clock
from log.index.bloom import KeyBloomFilter
from log.local_log import LocalLog
from log.types import TopicPartition
from remote.orphans import release_lease, sweep_orphan_objects, write_lease
from remote.storage_manager import IndexType

logger = logging.getLogger(__name__)

__all__ = ["PartitionOutcome", "SparkCleanConfig", "SparkCleanJob", "build_session", "has_active_session",
           "rewrite_bins", "ship_packages", "spark_session"]


#: spark.speculation of each running SparkContext (fixed once it starts; reading it copies the
#: whole SparkConf over py4j, 6-9 ms a job)
_SPECULATION: weakref.WeakKeyDictionary[Any, bool] = weakref.WeakKeyDictionary()


def _speculation(sc: Any) -> bool:
    """Whether the context may run a task twice at once (``spark.speculation``)."""
    on = _SPECULATION.get(sc)
    if on is None:
        on = _SPECULATION[sc] = str(sc.getConf().get("spark.speculation", "false")).lower() == "true"
    return on


class SparkCleanJob(Publishing):
    """Cleans the remote tier of partitions with one Spark job (see the module docstring).

    Args:
        spark: the session (:func:`build_session`).
        logs: the local log of a partition (the driver plans from it, as the in-process round).
        rlmm: the metadata store the driver publishes through.
        store_url, store_options: the object store, as executors open it.
        leader_epoch: the epoch this node leads ``tp`` at (e.g. ``RemoteLogManager.leader_epoch``).
        checkpoint / write_checkpoint: read and write the local cleaner checkpoint
            (e.g. ``LogCleanerManager.all_cleaner_checkpoints().get`` / ``update_checkpoints``).
        on_stage: called with a stage name ("planned", "scanned", "rewritten", "before-publish")
            and the job's partitions; tests move leadership from here.

    Not thread-safe: one run at a time per instance.
    """

    def __init__(self, spark: SparkSession, *, logs: Callable[[TopicPartition], LocalLog] | None = None,
                 rlmm: TieredMetadata, store_url: str, store_options: dict[str, Any] | None = None,
                 leader_epoch: Callable[[TopicPartition], int] | None = None,
                 checkpoint: Callable[[TopicPartition], int | None] = lambda tp: None,
                 write_checkpoint: Callable[[TopicPartition, int], None] = lambda tp, off: None,
                 broker_id: int = 0, clock: Clock = SYSTEM_CLOCK, config: SparkCleanConfig | None = None,
                 on_stage: Callable[[str, list[TopicPartition]], None] | None = None,
                 reporter: RoundReporter | None = None,
                 views: Callable[[TopicPartition], DriverView] | None = None,
                 check_abort: Callable[[TopicPartition], None] | None = None) -> None:
        self.spark = spark
        #: every partition's round is reported through the metadata store (cleaner.report)
        self.reporter = reporter or RoundReporter(rlmm, clock=clock)
        self.logs = logs
        self.rlmm = rlmm
        self.store = StoreSpec.of(store_url, store_options)
        self.leader_epoch = leader_epoch
        self.checkpoint = checkpoint
        self.write_checkpoint = write_checkpoint
        self.broker_id = broker_id
        self.clock = clock
        self.config = config or SparkCleanConfig()
        self.on_stage = on_stage
        self.check_abort = check_abort
        self.job_id = ""
        self._reports = 0
        if views is None:
            if logs is None or leader_epoch is None:
                raise ValueError("SparkCleanJob needs views=, or logs= and leader_epoch=")
            views = self._log_views(logs, leader_epoch, checkpoint, write_checkpoint)
        self.views = views

    @staticmethod
    def _log_views(logs: Callable[[TopicPartition], LocalLog], leader_epoch: Callable[[TopicPartition], int],
                   checkpoint: Callable[[TopicPartition], int | None],
                   write_checkpoint: Callable[[TopicPartition, int], None]) -> Callable[[TopicPartition], DriverView]:
        def view(tp: TopicPartition) -> DriverView:
            return LocalLogView(logs(tp), lambda: leader_epoch(tp), lambda: checkpoint(tp),
                                lambda end: write_checkpoint(tp, end))
        return view

    @staticmethod
    def standalone_views(rlmm: RemoteOnlyMetadata, store_url: str,
                         store_options: dict[str, Any] | None = None) -> Callable[[TopicPartition], DriverView]:
        """Views from the metadata store and object store alone (no data dir): a standalone job."""
        rsm = StoreSpec.of(store_url, store_options).open()
        return lambda tp: RemoteOnlyView.open(tp, rlmm, rsm)

    @property
    def application_id(self) -> str:
        """The Spark application the job runs in."""
        return str(self.spark.sparkContext.applicationId)

    def cancel(self) -> None:
        """Cancel the job's running Spark stages (from another thread); run() then fails and
        removes every upload of the job."""
        if self.job_id:
            self.spark.sparkContext.cancelJobGroup(self.job_id)

    def _stage(self, name: str, parts: Sequence[JobPartition]) -> None:
        if self.on_stage is not None:
            self.on_stage(name, [p.tp for p in parts])
        if self.check_abort is not None:
            for p in parts:
                self.check_abort(p.tp)

    # ---- run ------------------------------------------------------------------------------------
    def run(self, partitions: Sequence[TopicPartition]) -> dict[TopicPartition, PartitionOutcome]:
        """Clean ``partitions``; returns one outcome per partition.

        A fenced or failing partition does not stop the others (its outcome says why).

        Raises:
            SparkJobError: the Spark job itself failed; every upload of the job was removed and
                nothing was published.
        """
        self.job_id = f"spark-{uuid.uuid4().hex}"
        now = self.clock.milliseconds()
        rsm = self.store.open()
        outcomes: dict[TopicPartition, PartitionOutcome] = {}
        parts: list[JobPartition] = []
        for tp in dict.fromkeys(partitions):
            view = self.views(tp)
            epoch = view.leader_epoch()
            try:
                sweep_orphan_objects(rsm.store, self.rlmm, tp, grace_ms=self.config.orphan_grace_ms,
                                     clock=self.clock)
            except Exception:  # noqa: BLE001 - a failed sweep must not stop cleaning
                logger.warning("%s: orphan sweep failed", tp, exc_info=True)
            cp = view.checkpoint()
            plan = view.plan(self.rlmm, leader_epoch=epoch, checkpoint=cp, now=now)
            if plan is None or plan.upper <= plan.first_dirty_offset:
                end = plan.first_dirty_offset if plan else (cp or 0)
                outcomes[tp] = PartitionOutcome(tp, "nothing-to-clean", epoch, end, end)
                self.reporter.record(spark_report(
                    tp, leader_epoch=epoch, started_ms=now, ended_ms=self.clock.milliseconds(),
                    status="nothing-to-clean", first_dirty_offset=end, end_offset=end, segments={}, skipped=set(),
                    scanned={}, tasks=[], sources_of={}, results=[], round_id=self._round_id()))
                continue
            out = outcomes[tp] = PartitionOutcome(tp, "cleaned", epoch, plan.first_dirty_offset, plan.upper)
            parts.append(JobPartition(len(parts), tp, view, epoch, plan, out))
        if not parts:
            return outcomes
        sc = self.spark.sparkContext
        sc.setJobGroup(self.job_id, f"tiercompact spark-clean of {', '.join(str(p.tp) for p in parts)}",
                       interruptOnCancel=True)
        limit = self.config.split_partition_bytes
        for p in parts:
            p.whole = sum(md.segment_size_in_bytes for md in p.plan.segments
                          if md.start_offset < p.plan.upper) <= limit
        split = [p for p in parts if not p.whole]
        try:
            self._stage("planned", parts)
            if len(split) < len(parts):
                self._run_rounds([p for p in parts if p.whole], now)
            results = self._execute(split, now) if split else {}
        except BaseException as e:
            for p in parts:
                self._abandon(p, fenced=False)
                self._release(p)
                self._report(p, [], now, error=f"{type(e).__name__}: {e}", status="failed")
            if isinstance(e, Exception) and not isinstance(e, SparkJobError):
                raise SparkJobError(f"the Spark clean of {[str(p.tp) for p in parts]} failed: {e}") from e
            raise
        finally:
            if self.config.reuse_scan_downloads:  # what no rewrite took (same host only; else they expire)
                drop_kept(md.id for p in parts for md in p.segs.values() if not p.is_clean_region(md))
        for p in parts:
            try:
                if p.whole:
                    self._publish_round(p)
                else:
                    self._publish(p, [results[t.key] for t in p.tasks], now)
            finally:
                self._release(p)
                self._report(p, [results[t.key] for t in p.tasks if t.key in results], now)
        return outcomes

    # ---- stages -----------------------------------------------------------------------------------
    def _run_rounds(self, parts: list[JobPartition], now: int) -> None:
        """Run each partition's whole round as one task (several small ones packed into a task of
        at least ``rewrite_task_min_bytes``, never fewer tasks than cores): no shuffle, the
        compiled kernels, the in-process round's code (:mod:`cleaner.spark.partition_round`)."""
        sc = self.spark.sparkContext
        cfg = self.config
        inject = cfg.fail_first_attempt | {f"kill:{s}" for s in cfg.kill_first_attempt}
        tag = self.segment_tag
        tasks: list[PartitionRoundTask] = []
        for p in parts:
            candidates = [md.id for md in p.plan.segments if md.start_offset < p.plan.upper]
            blooms = self.rlmm.get_bloom_filters(p.tp, candidates) if cfg.bloom_skip else {}
            tasks.append(PartitionRoundTask(
                key=p.idx, store=self.store, plan=p.plan, config=tuple(sorted(p.view.config.overrides.items())),
                producers=p.view.producers(),
                local_txn_segments=local_txn_segments(p.log, p.plan.segments[-1].end_offset + 1),
                blooms=tuple(sorted(blooms.items())), now_ms=now, segment_tag=tag, broker_id=self.broker_id,
                dedupe_buffer_size=cfg.dedupe_buffer_size, io_buffer_size=cfg.io_buffer_size,
                bloom_skip=cfg.bloom_skip, use_key_index=cfg.key_index_skip, temp_dir=cfg.executor_temp_dir))
            write_lease(self.store.open().store, p.tp, self.job_id, (), self.clock, id_prefixes=[tag])
            p.leased = True
        by_key = {t.key: t for t in tasks}
        _bin_of, bins = rewrite_bins([(t.key, t.source_bytes) for t in tasks], sc.defaultParallelism,
                                     cfg.rewrite_task_min_bytes)
        packed = [[by_key[k] for k in b] for b in bins]
        part = {p.idx: p for p in parts}
        for res in sc.parallelize(packed, len(packed)).flatMap(lambda ts: [round_stage(t, inject) for t in ts]).collect():
            part[res.key].round = res
        self._stage("scanned", parts)
        self._stage("rewritten", parts)

    def _needs_sweep(self, p: JobPartition) -> bool:
        """Whether an attempt of ``p``'s round other than the one whose result was published may
        have uploaded objects: its result came from a retry (attempt > 0), speculation may have
        run it twice, or the result does not say which attempt made it."""
        attempt = p.round.attempt if p.round is not None else None
        return attempt is None or attempt > 0 or _speculation(self.spark.sparkContext)

    @property
    def segment_tag(self) -> str:
        """The hex prefix of every segment id a partition round of this job makes (its lease claims it)."""
        return self.job_id.removeprefix("spark-")[:TAG_LENGTH]

    def _execute(self, parts: list[JobPartition], now: int) -> dict[int, RewriteResult]:
        sc = self.spark.sparkContext
        cfg = self.config
        inject = cfg.fail_first_attempt | {f"kill:{s}" for s in cfg.kill_first_attempt}
        store = self.store
        owner: dict[int, JobPartition] = {}
        n = 0
        for p in parts:
            for md in p.plan.segments:
                if md.start_offset >= p.plan.upper:
                    break
                p.segs[n] = md
                owner[n] = p
                blob = self.rlmm.get_bloom_filter(md.remote_log_segment_id)
                p.blooms[n] = None if blob is None else KeyBloomFilter.from_bytes(blob, source=md.id)
                if blob is not None:
                    p.blobs[n] = blob
                n += 1

        def txn_possible(p: JobPartition, i: int) -> bool:
            bf = p.blooms[i]
            return bf is None or bf.has_transactional_batches

        # 1. scan: map the dirty segments; headers and digests of clean ones that hold transactions
        scan_tasks: list[ScanTask] = []
        for p in parts:
            for i, md in p.segs.items():
                if not p.is_clean_region(md):
                    scan_tasks.append(ScanTask(i, store, SegmentRef.of(md), p.plan.first_dirty_offset,
                                               txn_possible(p, i), keep=cfg.reuse_scan_downloads))
                elif txn_possible(p, i):
                    scan_tasks.append(ScanTask(i, store, SegmentRef.of(md)))
        part_of = {i: owner[i].idx for i in owner}
        slices = max(1, min(len(scan_tasks), sc.defaultParallelism * cfg.scan_tasks_per_core))
        scans = (sc.parallelize(scan_tasks, slices).map(lambda t: scan_stage(t, inject))
                 .persist(StorageLevel.MEMORY_AND_DISK))
        rdds: list[Any] = [scans]
        broadcasts: list[Any] = []
        try:
            headers: dict[int, tuple[Any, ...]] = {}
            fetched: dict[int, tuple[AbortedT, ...]] = {}
            with_index = {t.key for t in scan_tasks if t.with_txn_index}
            for i, hdrs, txns, nbytes in scans.map(lambda r: (r.key, r.txn_headers, r.aborted, r.bytes_read)).collect():
                headers[i] = hdrs
                if i in with_index:
                    fetched[i] = txns
                owner[i].outcome.bytes_downloaded += nbytes
                owner[i].scanned[i] = nbytes
            # the aborted transactions, collected forward over both tiers from the indexes the
            # scans fetched (and any later ones, fetched here), exactly as the in-process round
            for p in parts:
                p.txn_indexes = self._txn_indexes(p, fetched)
            # which transactional batches the in-process map would skip as aborted
            skipped: set[tuple[int, int]] = set()
            for p in parts:
                start, upper = p.plan.first_dirty_offset, p.plan.upper
                dirty = [(md.start_offset, md.end_offset, headers.get(i, ())) for i, md in p.segs.items()
                         if not p.is_clean_region(md)]
                assert p.txn_indexes is not None
                round_aborted = [aborted_to_plain(t) for t in p.txn_indexes.collect(start, upper)]
                skipped |= {(p.idx, off) for off in aborted_batches(dirty, round_aborted)}
            bs = sc.broadcast(skipped)
            broadcasts.append(bs)

            def present_keys(r: ScanResult) -> Iterator[Any]:
                pi = part_of[r.key]
                for d, off in r.keys.items():
                    yield (pi, d), (r.key, off)
                for d, off, batch in r.txn_keys:
                    yield (pi, d), (r.key, -1 if (pi, batch) in bs.value else off)

            # the map, reduced across executors: (partition, digest) -> (latest offset or -1, segments holding it)
            present = scans.flatMap(present_keys)
            reduced = present.combineByKey(map_combiner, map_merge_value, map_merge_combiners,
                                           numPartitions=cfg.shuffle_partitions)
            self._stage("scanned", parts)

            # 2. bloom tests of the clean region, in parallel over the map's partitions
            tested = {p.idx: [(i, p.blobs[i]) for i, md in p.segs.items() if p.is_clean_region(md) and i in p.blobs]
                      for p in parts}
            bc = sc.broadcast(tested)
            broadcasts.append(bc)

            def test_blooms(it: Iterable[Any]) -> Iterator[Any]:
                filters = {pi: [(i, KeyBloomFilter.from_bytes(b)) for i, b in lst] for pi, lst in bc.value.items()}
                for (pi, d), (off, segs) in it:
                    if off < 0:
                        continue  # present but not mapped: not in the offset map
                    hits = tuple(i for i, bf in filters.get(pi, ()) if bf.might_contain_digest(d))
                    yield d, (off, segs, hits)

            offset_map = reduced.mapPartitions(test_blooms).persist(StorageLevel.MEMORY_AND_DISK)
            rdds.append(offset_map)
            hit_segments: set[int] = set()
            for found in offset_map.mapPartitions(lambda it: [{i for _d, v in it for i in v[2]}]).collect():
                hit_segments |= found
            # 3b. exact key indexes, as the in-process round's skip policy: a clean segment
            # the bloom filter cannot rule out is rewritten only if its key index holds a mapped key
            bloom_hits = set(hit_segments)
            if cfg.key_index_skip and hit_segments:
                hit_segments = key_index_hits(sc, self.store, owner, hit_segments, offset_map, broadcasts)
            for i in bloom_hits - hit_segments:
                owner[i].skipped_by_key_index.add(i)

            # 4. skip decisions, groups, transaction state at each group's start, new ids
            group_of: dict[int, int] = {}
            tasks: list[RewriteTask] = []
            for p in parts:
                for group in segment_groups(p, hit_segments, now, bloom_skip=self.config.bloom_skip):
                    task = self._rewrite_task(p, len(tasks), group, headers, now)
                    for i in group:
                        group_of[i] = task.key
                    p.tasks.append(task)
                    tasks.append(task)
            for p in parts:
                write_lease(self.store.open().store, p.tp, self.job_id, [t.new_segment_id for t in p.tasks],
                            self.clock)
                p.leased = True
            bg = sc.broadcast(group_of)
            broadcasts.append(bg)

            # 3. each group's slice of the map (digests present in, or maybe in, its segments),
            # then one rewrite task per group (partition i of the routed RDD is group i)
            def route(kv: tuple[bytes, tuple[int, set[int], tuple[int, ...]]]) -> Iterator[Any]:
                d, (off, segs, hits) = kv
                groups = {bg.value[i] for i in (*segs, *hits) if i in bg.value}
                for g in groups:
                    yield g, (d, off)

            bt = sc.broadcast({t.key: t for t in tasks})
            broadcasts.append(bt)
            # groups are binned into Spark tasks of at least rewrite_task_min_bytes (the sizing
            # rule: Spark's per-task cost stays a small share of each task's work)
            bin_of, groups_of_bin = rewrite_bins([(t.key, sum(src.size for src in t.sources)) for t in tasks],
                                                 sc.defaultParallelism, cfg.rewrite_task_min_bytes)
            routed = offset_map.flatMap(route).partitionBy(len(groups_of_bin), lambda g: bin_of[g])
            out = routed.mapPartitionsWithIndex(
                lambda b, it: rewrite_bin_stage(groups_of_bin[b], it, bt.value, inject)).collect()
            self._stage("rewritten", parts)
            return {r.key: r for r in out}
        finally:
            for r in rdds:
                r.unpersist()
            for b in broadcasts:
                b.destroy()

    def _txn_indexes(self, p: JobPartition, fetched: dict[int, tuple[AbortedT, ...]]) -> RoundTxnIndexes:
        """The partition's transaction indexes over both tiers, seeded with what the scans fetched."""
        rsm = self.store.open()

        def downloaded(n: int) -> None:
            p.outcome.bytes_downloaded += n

        known = {p.segs[i].id: [aborted_from_plain(t) for t in txns] for i, txns in fetched.items() if i in p.segs}
        return RoundTxnIndexes(p.log, p.plan.segments, self.rlmm, lambda md: rsm.fetch_index(md, IndexType.TRANSACTION),
                               on_download=downloaded, known=known)

    def _rewrite_task(self, p: JobPartition, key: int, group: list[int], headers: dict[int, tuple[Any, ...]],
                      now: int) -> RewriteTask:
        txn = p.txn
        state = TxnState.capture(txn)
        own: list[tuple[AbortedT, ...]] = []
        assert p.txn_indexes is not None
        sources = [p.segs[i] for i in group]
        for i, txns in zip(group, p.txn_indexes.for_sources(sources), strict=True):
            mine = tuple(aborted_to_plain(t) for t in txns)
            own.append(mine)
            replay_segment(txn, mine, headers.get(i, ()))
        config = p.view.config
        producers = p.view.producers()
        return RewriteTask(
            key=key, store=self.store, new_segment_id=uuid.uuid4().hex,
            sources=tuple(SegmentRef.of(p.segs[i]) for i in group), aborted=tuple(own), now_ms=now,
            delete_retention_ms=int(config.get("delete.retention.ms")), upper_bound_of_round=p.plan.upper,
            latest_offset=p.plan.upper - 1, active_producers=producers, txn_state=state,
            fpp=float(config.get("remote.compaction.bloom.fpp")),
            index_interval_bytes=int(config.get("index.interval.bytes")),
            io_buffer_size=self.config.io_buffer_size, broker_id=self.broker_id,
            use_kept=self.config.reuse_scan_downloads)

    def _release(self, p: JobPartition) -> None:
        """Release the partition's lease. For a partition round, then sweep when a task attempt
        may have uploaded what no result names (an attempt that failed or was killed, or a
        partition that did not publish): only the job's tag names those objects, and nothing does
        once the lease is gone (what the round published is in metadata by now)."""
        if not p.leased:
            return
        store = self.store.open().store
        try:
            release_lease(store, p.tp, self.job_id)
            p.leased = False
        except Exception:  # noqa: BLE001 - an expired lease is removed by the next sweep
            logger.warning("%s: could not release lease %s", p.tp, self.job_id, exc_info=True)
            return
        if p.whole and (p.outcome.status != "cleaned" or self._needs_sweep(p)):
            try:
                sweep_orphan_objects(store, self.rlmm, p.tp, grace_ms=self.config.orphan_grace_ms, clock=self.clock)
            except Exception:  # noqa: BLE001 - the next job's (or the node's) sweep finds them
                logger.warning("%s: sweeping the job's leftover objects failed", p.tp, exc_info=True)

