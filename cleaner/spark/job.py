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

import contextlib
import dataclasses
import logging
import os
import signal
import sys
import tempfile
import uuid
import weakref
import zipfile
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
from pyspark import StorageLevel, TaskContext
from pyspark.sql import SparkSession

from cleaner.report import RoundReporter
from cleaner.spark.errors import SparkJobError
from cleaner.spark.partition_round import (
    TAG_LENGTH,
    PartitionRoundResult,
    PartitionRoundTask,
    local_txn_segments,
    run_partition_round,
)
from cleaner.spark.report import partition_round_report, spark_report
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
    run_rewrite,
    run_scan,
)
from cleaner.spark.views import DriverView, LocalLogView, RemoteOnlyView
from cleaner.tiered import RoundTxnIndexes, TieredRoundPlan, group_remote_segments
from cleaner.tiered.view import PartitionView
from cleaner.transactions import CleanedTransactionMetadata
from log.clock import SYSTEM_CLOCK, Clock
from log.errors import TiercompactError
from log.index.bloom import KeyBloomFilter
from log.index.key_index import KeyIndex, stable_hashes
from log.local_log import LocalLog
from log.types import TopicPartition
from metadata.errors import FencedLeaderEpochError
from metadata.manager import RemoteLogMetadataManager
from metadata.reports import ACTION_SKIPPED_BY_KEY_INDEX
from metadata.types import RemoteLogSegmentId, RemoteLogSegmentMetadata
from remote.orphans import release_lease, sweep_orphan_objects, write_lease
from remote.segment_deletion import SegmentDeleter
from remote.storage_manager import IndexType

logger = logging.getLogger(__name__)

PACKAGES = ("log", "metadata", "remote", "cleaner")


# ---- session ----------------------------------------------------------------------------------

@dataclass(frozen=True, slots=True)
class SparkCleanConfig:
    """Settings of the Spark offload.

    ``fail_first_attempt`` is fault injection for tests: the first attempt of every task of the
    named stages ("scan", "rewrite") fails after doing its work, so Spark retries it.
    """

    master: str = "local[*]"
    app_name: str = "tiercompact-spark-clean"
    driver_memory: str = "512m"
    shuffle_partitions: int = 4
    max_task_failures: int = 4
    bloom_skip: bool = True
    #: test the exact key index of clean segments the bloom filter cannot rule out (#14)
    key_index_skip: bool = True
    #: the sizing rule (see README "Spark"): a rewrite task carries groups of at least this many
    #: source bytes, so the ~40-90 ms a Spark task costs stays under ~5% of its work
    rewrite_task_min_bytes: int = 32 * 1024 * 1024
    #: a dirty segment's scan leaves its download for the rewrite on the same host (read once)
    reuse_scan_downloads: bool = True
    #: a partition whose round may read more than this many bytes is split across tasks (map
    #: shuffled, groups rewritten in parallel); smaller ones run whole, one partition round per
    #: task (:mod:`cleaner.spark.partition_round`). 0 splits every partition.
    split_partition_bytes: int = 1 << 30
    #: the offset map of a partition round (grows with the keys up to this, as in process)
    dedupe_buffer_size: int = 128 * 1024 * 1024
    #: where a partition round downloads and writes on an executor (default: Spark's local dir,
    #: else the system's temporary directory)
    executor_temp_dir: str | None = None
    orphan_grace_ms: int = 60 * 60 * 1000
    io_buffer_size: int = 256 * 1024
    scan_tasks_per_core: int = 2
    ship_packages: bool | None = None  # None: ship when the master is not local
    extra_conf: tuple[tuple[str, str], ...] = ()
    fail_first_attempt: frozenset[str] = frozenset()
    #: fault injection for tests: the first attempt of every task of these stages kills its own
    #: Python worker process (SIGKILL) after doing its work, as a lost executor would
    kill_first_attempt: frozenset[str] = frozenset()

    def __post_init__(self) -> None:
        if min(self.shuffle_partitions, self.max_task_failures, self.scan_tasks_per_core) < 1 or self.orphan_grace_ms < 0:
            raise ValueError("shuffle_partitions, max_task_failures and scan_tasks_per_core must be >= 1, "
                             "orphan_grace_ms >= 0")
        if self.split_partition_bytes < 0 or self.dedupe_buffer_size < 1024 * 1024:
            raise ValueError("split_partition_bytes must be >= 0 and dedupe_buffer_size >= 1 MiB")

    @property
    def is_local(self) -> bool:
        return self.master.startswith("local")


def build_session(config: SparkCleanConfig) -> SparkSession:
    """A SparkSession for the offload (UI off, small driver, few shuffle partitions).

    Python workers run this interpreter (``PYSPARK_PYTHON`` unless already set), so local
    executors see the same installed packages as the driver.
    """
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    logging.getLogger("py4j").setLevel(logging.WARNING)  # its INFO chatter outlives the caller's log handlers
    b = (SparkSession.builder.master(config.master).appName(config.app_name)
         .config("spark.ui.enabled", "false")
         .config("spark.driver.memory", config.driver_memory)
         .config("spark.sql.shuffle.partitions", str(config.shuffle_partitions))
         .config("spark.default.parallelism", str(config.shuffle_partitions))
         .config("spark.task.maxFailures", str(config.max_task_failures))
         .config("spark.pyspark.python", sys.executable)
         .config("spark.pyspark.driver.python", sys.executable)
         .config("spark.ui.showConsoleProgress", "false")
         # executors talk to their Python workers over Unix domain sockets: over loopback TCP every
         # task paid ~45 ms more here (Nagle and delayed ACKs on the small control messages):
         # 65 -> 18 ms per empty task on local[1]
         .config("spark.python.unix.domain.socket.enabled", "true")
         # the driver's JVM only coordinates (the work runs in Python workers): the C1 compiler
         # alone and a serial collector cut its CPU per job of 8 tasks from 0.3-0.55 to ~0.15 s
         # here, CPU the executors' Python workers need on a small machine (local modes run the
         # executors in this JVM too)
         .config("spark.driver.extraJavaOptions", "-XX:+UseSerialGC -XX:TieredStopAtLevel=1"))
    for k, v in config.extra_conf:
        b = b.config(k, v)
    spark = b.getOrCreate()
    if config.ship_packages or (config.ship_packages is None and not config.is_local):
        ship_packages(spark)
    return spark


def has_active_session() -> bool:
    """Whether this process already runs a SparkSession (build_session would return it)."""
    from pyspark import SparkContext

    return SparkContext._active_spark_context is not None


@contextlib.contextmanager
def spark_session(config: SparkCleanConfig) -> Iterator[SparkSession]:
    """A session for the duration of a ``with`` block; stopped at the end only if this call
    started it (an embedding application's active session is reused and left running)."""
    existing = SparkSession.getActiveSession()
    spark = build_session(config)
    try:
        yield spark
    finally:
        if existing is None:
            spark.stop()


def ship_packages(spark: SparkSession) -> Path:
    """Zip tiercompact's packages below service/ and add them to the executors' path."""
    out = Path(tempfile.mkdtemp(prefix="tiercompact-pyfiles-")) / "tiercompact_pkgs.zip"
    with zipfile.ZipFile(out, "w", zipfile.ZIP_DEFLATED) as zf:
        for name in PACKAGES:
            root = Path(sys.modules[name].__file__ or "").parent if name in sys.modules else None
            if root is None:
                root = Path(__import__(name).__file__ or "").parent
            for f in root.rglob("*.py"):
                zf.write(f, Path(name) / f.relative_to(root))
    spark.sparkContext.addPyFile(str(out))
    return out


# ---- results -------------------------------------------------------------------------------

@dataclass(slots=True)
class PartitionOutcome:
    """What the job did to one partition. ``status``: cleaned, nothing-to-clean, fenced, failed."""

    topic_partition: TopicPartition
    status: str
    leader_epoch: int
    first_dirty_offset: int = 0
    end_offset: int = 0
    new_segment_ids: list[str] = field(default_factory=list)
    replaced_segment_ids: list[str] = field(default_factory=list)
    segments_skipped_by_bloom: int = 0
    segments_skipped_by_key_index: int = 0
    segments_cleaned: int = 0
    bytes_downloaded: int = 0
    bytes_uploaded: int = 0
    messages_read: int = 0
    messages_written: int = 0
    error: str | None = None

    def as_dict(self) -> dict[str, Any]:
        return {"topic": self.topic_partition.topic, "partition": self.topic_partition.partition,
                "status": self.status, "leader_epoch": self.leader_epoch,
                "first_dirty_offset": self.first_dirty_offset, "end_offset": self.end_offset,
                "new_segments": len(self.new_segment_ids), "replaced_segments": len(self.replaced_segment_ids),
                "segments_skipped_by_bloom": self.segments_skipped_by_bloom,
                "segments_skipped_by_key_index": self.segments_skipped_by_key_index,
                "segments_cleaned": self.segments_cleaned, "bytes_downloaded": self.bytes_downloaded,
                "bytes_uploaded": self.bytes_uploaded, "records_read": self.messages_read,
                "records_retained": self.messages_written, "error": self.error}


@dataclass(slots=True)
class _Part:
    """The driver's state for one partition of the job."""

    idx: int
    tp: TopicPartition
    view: DriverView
    epoch: int
    plan: TieredRoundPlan
    outcome: PartitionOutcome
    segs: dict[int, RemoteLogSegmentMetadata] = field(default_factory=dict)  # segment number -> md (candidates)
    blooms: dict[int, KeyBloomFilter | None] = field(default_factory=dict)
    blobs: dict[int, bytes] = field(default_factory=dict)
    tasks: list[RewriteTask] = field(default_factory=list)
    #: the round's transaction state, replayed group by group in log order
    txn: CleanedTransactionMetadata = field(default_factory=CleanedTransactionMetadata)
    #: the partition's transaction indexes over both tiers (as the in-process round reads them)
    txn_indexes: RoundTxnIndexes | None = None
    leased: bool = False
    #: for the round report: segments the bloom test skipped, bytes each scan fetched
    skipped: set[int] = field(default_factory=set)
    scanned: dict[int, int] = field(default_factory=dict)
    #: segments the exact key index ruled out after the bloom filter said "maybe" (#14), and
    #: the bytes of each key index fetched
    skipped_by_key_index: set[int] = field(default_factory=set)
    index_bytes: dict[int, int] = field(default_factory=dict)
    #: the partition runs as one partition round (not split across tasks), and its result
    whole: bool = False
    round: PartitionRoundResult | None = None

    def is_clean_region(self, md: RemoteLogSegmentMetadata) -> bool:
        return md.end_offset < self.plan.first_dirty_offset

    @property
    def log(self) -> PartitionView:
        return self.view


#: spark.speculation of each running SparkContext (fixed once it starts; reading it copies the
#: whole SparkConf over py4j, 6-9 ms a job)
_SPECULATION: weakref.WeakKeyDictionary[Any, bool] = weakref.WeakKeyDictionary()


def _speculation(sc: Any) -> bool:
    """Whether the context may run a task twice at once (``spark.speculation``)."""
    on = _SPECULATION.get(sc)
    if on is None:
        on = _SPECULATION[sc] = str(sc.getConf().get("spark.speculation", "false")).lower() == "true"
    return on


# ---- executor-side wrappers (module level: pickled by reference) --------------------------------

def _maybe_fail(stage: str, inject: frozenset[str]) -> None:
    if stage in inject or f"kill:{stage}" in inject:
        ctx = TaskContext.get()
        if ctx is not None and ctx.attemptNumber() == 0:
            if f"kill:{stage}" in inject:
                os.kill(os.getpid(), signal.SIGKILL)
            raise RuntimeError(f"injected failure of the first attempt of a {stage} task")


def _scan(task: ScanTask, inject: frozenset[str]) -> ScanResult:
    res = run_scan(task)
    _maybe_fail("scan", inject)
    return res


def _round(task: PartitionRoundTask, inject: frozenset[str]) -> PartitionRoundResult:
    res = run_partition_round(task)
    _maybe_fail("round", inject)  # after the uploads: the retry uploads under new ids, the sweep ends these
    ctx = TaskContext.get()
    return res if ctx is None else dataclasses.replace(res, attempt=ctx.attemptNumber())


def _rewrite(task: RewriteTask, entries: Iterable[tuple[bytes, int]], inject: frozenset[str]) -> RewriteResult:
    res = run_rewrite(task, entries)
    _maybe_fail("rewrite", inject)  # after the upload: the retry overwrites the same keys
    return res


def _rewrite_bin(groups: Sequence[int], entries: Iterable[tuple[int, tuple[bytes, int]]],
                 tasks: dict[int, RewriteTask], inject: frozenset[str]) -> list[RewriteResult]:
    """One Spark task: the rewrite of each group of a bin, with its slice of the map."""
    by_group: dict[int, list[tuple[bytes, int]]] = {g: [] for g in groups}
    for g, e in entries:
        by_group[g].append(e)
    out = []
    for g in groups:
        out.append(_rewrite(tasks[g], by_group.pop(g), inject))
    return out


def rewrite_bins(sizes: Sequence[tuple[int, int]], parallelism: int,
                 min_bytes: int) -> tuple[dict[int, int], list[list[int]]]:
    """The sizing rule of the rewrite stage: ``(group key, source bytes)`` in log order packed
    into consecutive bins of about equal bytes, as many as ``total / min_bytes`` but at least
    ``parallelism`` (every core busy), never more than the groups. Returns group -> bin and the
    groups of each bin."""
    total = sum(n for _k, n in sizes)
    nbins = max(1, min(len(sizes), max(parallelism, -(-total // max(min_bytes, 1)))))
    per_bin = total / nbins if total else 1.0
    bin_of: dict[int, int] = {}
    bins: list[list[int]] = [[] for _ in range(nbins)]
    before, prev = 0, -1
    for i, (key, n) in enumerate(sizes):
        # by bytes before the group; no bin skipped, and never fewer groups left than bins to fill
        b = min(int(before / per_bin), nbins - 1, prev + 1)
        b = max(b, nbins - (len(sizes) - i), prev)
        prev = b
        bin_of[key] = b
        bins[b].append(key)
        before += n
    return bin_of, bins


def _combiner(v: tuple[int, int]) -> tuple[int, set[int]]:
    return v[1], {v[0]}


def _merge_value(acc: tuple[int, set[int]], v: tuple[int, int]) -> tuple[int, set[int]]:
    acc[1].add(v[0])
    return (acc[0] if acc[0] >= v[1] else v[1]), acc[1]


def _merge_combiners(a: tuple[int, set[int]], b: tuple[int, set[int]]) -> tuple[int, set[int]]:
    return (a[0] if a[0] >= b[0] else b[0]), a[1] | b[1]


# ---- the driver ------------------------------------------------------------------------------------

class SparkCleanJob:
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
                 rlmm: RemoteLogMetadataManager, store_url: str, store_options: dict[str, Any] | None = None,
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
    def standalone_views(rlmm: RemoteLogMetadataManager, store_url: str,
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

    def _stage(self, name: str, parts: Sequence[_Part]) -> None:
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
        parts: list[_Part] = []
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
            parts.append(_Part(len(parts), tp, view, epoch, plan, out))
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

    def _report(self, p: _Part, results: list[RewriteResult], started_ms: int, *, error: str | None = None,
                status: str | None = None) -> None:
        out = p.outcome
        if p.whole:
            self.reporter.record(partition_round_report(
                p.tp, leader_epoch=p.epoch, started_ms=started_ms, ended_ms=self.clock.milliseconds(),
                status=status or out.status, first_dirty_offset=p.plan.first_dirty_offset, end_offset=out.end_offset,
                stats=p.round.stats if p.round is not None else None, error=error or out.error,
                round_id=self._round_id()))
            return
        self.reporter.record(spark_report(
            p.tp, leader_epoch=p.epoch, started_ms=started_ms, ended_ms=self.clock.milliseconds(),
            status=status or out.status, first_dirty_offset=p.plan.first_dirty_offset, end_offset=p.plan.upper,
            segments=p.segs, skipped=p.skipped, scanned=p.scanned, tasks=p.tasks,
            sources_of={t.key: self._numbers(p, t) for t in p.tasks}, results=results, error=error or out.error,
            skipped_by_key_index=p.skipped_by_key_index, index_bytes=p.index_bytes, round_id=self._round_id()))

    def _round_id(self) -> str:
        """A Spark round's report id names its Spark application and job:
        ``<application id>:<job id>:<n>`` (at most 64 characters)."""
        self._reports += 1
        return f"{self.application_id[:36]}:{self.job_id.removeprefix('spark-')[:16]}:{self._reports}"

    # ---- stages -----------------------------------------------------------------------------------
    def _run_rounds(self, parts: list[_Part], now: int) -> None:
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
        for res in sc.parallelize(packed, len(packed)).flatMap(lambda ts: [_round(t, inject) for t in ts]).collect():
            part[res.key].round = res
        self._stage("scanned", parts)
        self._stage("rewritten", parts)

    def _needs_sweep(self, p: _Part) -> bool:
        """Whether an attempt of ``p``'s round other than the one whose result was published may
        have uploaded objects: its result came from a retry (attempt > 0), speculation may have
        run it twice, or the result does not say which attempt made it."""
        attempt = p.round.attempt if p.round is not None else None
        return attempt is None or attempt > 0 or _speculation(self.spark.sparkContext)

    @property
    def segment_tag(self) -> str:
        """The hex prefix of every segment id a partition round of this job makes (its lease claims it)."""
        return self.job_id.removeprefix("spark-")[:TAG_LENGTH]

    def _execute(self, parts: list[_Part], now: int) -> dict[int, RewriteResult]:
        sc = self.spark.sparkContext
        cfg = self.config
        inject = cfg.fail_first_attempt | {f"kill:{s}" for s in cfg.kill_first_attempt}
        store = self.store
        owner: dict[int, _Part] = {}
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

        def txn_possible(p: _Part, i: int) -> bool:
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
        scans = (sc.parallelize(scan_tasks, slices).map(lambda t: _scan(t, inject))
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
            reduced = present.combineByKey(_combiner, _merge_value, _merge_combiners,
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
            # 3b. exact key indexes (#14), as the in-process round's skip policy: a clean segment
            # the bloom filter cannot rule out is rewritten only if its key index holds a mapped key
            bloom_hits = set(hit_segments)
            if cfg.key_index_skip and hit_segments:
                hit_segments = self._key_index_hits(sc, parts, owner, hit_segments, offset_map, broadcasts)
            for i in bloom_hits - hit_segments:
                owner[i].skipped_by_key_index.add(i)

            # 4. skip decisions, groups, transaction state at each group's start, new ids
            group_of: dict[int, int] = {}
            tasks: list[RewriteTask] = []
            for p in parts:
                for group in self._groups(p, hit_segments, now):
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
                lambda b, it: _rewrite_bin(groups_of_bin[b], it, bt.value, inject)).collect()
            self._stage("rewritten", parts)
            return {r.key: r for r in out}
        finally:
            for r in rdds:
                r.unpersist()
            for b in broadcasts:
                b.destroy()

    def _groups(self, p: _Part, hit_segments: set[int], now: int) -> list[list[int]]:
        """Skip decisions and grouping, as TieredCleaner._rewrite makes them."""
        runs: list[list[RemoteLogSegmentMetadata]] = [[]]
        number = {md.id: i for i, md in p.segs.items()}
        for i, md in p.segs.items():
            bf = p.blooms[i]
            skip = (self.config.bloom_skip and p.is_clean_region(md) and bf is not None
                    and not bf.has_transactional_batches
                    and not (bf.min_delete_horizon_ms is not None and bf.min_delete_horizon_ms <= now)
                    and i not in hit_segments)
            if not skip and i in p.skipped_by_key_index:
                p.skipped_by_key_index.discard(i)  # rewritten for another reason (summary)
            if skip:
                if i in p.skipped_by_key_index:
                    p.outcome.segments_skipped_by_key_index += 1
                else:
                    p.outcome.segments_skipped_by_bloom += 1
                    p.skipped.add(i)
                if runs[-1]:
                    runs.append([])
            else:
                runs[-1].append(md)
        size = p.view.config.segment_bytes
        return [[number[md.id] for md in g] for run in runs if run
                for g in group_remote_segments(run, size, p.plan.upper)]

    def _key_index_hits(self, sc: Any, parts: list[_Part], owner: dict[int, _Part], hits: set[int],
                        offset_map: Any, broadcasts: list[Any]) -> set[int]:
        """The bloom hits whose exact key index holds a mapped digest (or that have no usable index).

        The driver fetches the key index of each hit segment (about 1% of its bytes) and
        broadcasts the hashes; each map partition looks its digests up in the indexes of the
        segments its bloom probes hit."""
        rsm = self.store.open()
        indexes: dict[int, np.ndarray] = {}
        for i in sorted(hits):
            md = owner[i].segs[i]
            if md.key_index_bytes is None:
                continue  # no index (copied before indexes existed): keep the bloom's answer
            try:
                data = rsm.fetch_index(md, IndexType.KEY_INDEX)
                index = KeyIndex.from_bytes(data, source=rsm.object_key(md, IndexType.KEY_INDEX))
            except TiercompactError as e:  # unreadable: every doubt rewrites
                logger.warning("%s: key index of %s unusable (%s); rewriting it", owner[i].tp, md.id, e)
                continue
            owner[i].index_bytes[i] = len(data)
            owner[i].outcome.bytes_downloaded += len(data)
            indexes[i] = index.entries
        if not indexes:
            return hits
        bi = sc.broadcast(indexes)
        broadcasts.append(bi)

        def real_hits(it: Iterable[Any]) -> Iterator[set[int]]:
            idx = bi.value
            found: set[int] = set()
            pending: dict[int, list[bytes]] = {}
            for d, (_off, _segs, seg_hits) in it:
                for i in seg_hits:
                    if i not in idx:
                        found.add(i)
                    elif i not in found:
                        pending.setdefault(i, []).append(d)
            for i, ds in pending.items():
                if i in found:
                    continue
                digests = np.frombuffer(b"".join(ds), dtype=np.uint8).reshape(-1, 16)
                if KeyIndex(idx[i]).count_matching(np.unique(stable_hashes(digests))):
                    found.add(i)
            yield found

        real: set[int] = set()
        for found in offset_map.mapPartitions(real_hits).collect():
            real |= found
        return real

    def _txn_indexes(self, p: _Part, fetched: dict[int, tuple[AbortedT, ...]]) -> RoundTxnIndexes:
        """The partition's transaction indexes over both tiers, seeded with what the scans fetched."""
        rsm = self.store.open()

        def downloaded(n: int) -> None:
            p.outcome.bytes_downloaded += n

        known = {p.segs[i].id: [aborted_from_plain(t) for t in txns] for i, txns in fetched.items() if i in p.segs}
        return RoundTxnIndexes(p.log, p.plan.segments, self.rlmm, lambda md: rsm.fetch_index(md, IndexType.TRANSACTION),
                               on_download=downloaded, known=known)

    def _rewrite_task(self, p: _Part, key: int, group: list[int], headers: dict[int, tuple[Any, ...]],
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

    # ---- publish -----------------------------------------------------------------------------------
    def _publish(self, p: _Part, results: list[RewriteResult], now: int) -> None:
        out = p.outcome
        out.new_segment_ids = [t.new_segment_id for t in p.tasks]
        for res in results:
            out.segments_cleaned += res.segments_cleaned
            out.bytes_downloaded += res.bytes_downloaded
            out.bytes_uploaded += res.bytes_uploaded
            out.messages_read += res.messages_read
            out.messages_written += res.messages_written
        new = [(task.new_metadata(res.size, res.max_timestamp_ms, self.clock.milliseconds(),
                                  key_index_bytes=res.key_index_bytes), res.bloom)
               for task, res in zip(p.tasks, results, strict=True)]
        replaced = [p.segs[i] for t in p.tasks for i in self._numbers(p, t)]
        out.replaced_segment_ids = [m.id for m in replaced]
        vector = dict(p.plan.cleaner_offsets)
        vector[p.epoch] = p.plan.upper
        if not self._commit(p, new, [m.remote_log_segment_id for m in replaced], vector):
            return
        p.view.adopt(p.plan.upper)
        logger.info("spark clean %s [%d, %d): %d groups, %d skipped by bloom, %d B down, %d B up", p.tp,
                    p.plan.first_dirty_offset, p.plan.upper, len(p.tasks), out.segments_skipped_by_bloom,
                    out.bytes_downloaded, out.bytes_uploaded)

    def _commit(self, p: _Part, new: Sequence[tuple[RemoteLogSegmentMetadata, bytes | None]],
                replaced: Sequence[RemoteLogSegmentId], vector: dict[int, int]) -> bool:
        """Register the new segments (COPY_SEGMENT_STARTED, with their bloom filters) and publish
        them with the cleaner-offset vector under the job's epoch. False when the partition was
        fenced or failed: its outcome says so and its uploads were removed."""
        out = p.outcome
        registered: list[RemoteLogSegmentMetadata] = []
        try:
            # one transaction for all (their objects exist already, under the job's lease)
            self.rlmm.add_remote_log_segments(new, leader_epoch=p.epoch)
            registered = [md for md, _bloom in new]
            self._stage("before-publish", [p])
            if registered or replaced:
                self.rlmm.publish_compaction(p.tp, leader_epoch=p.epoch,
                                             new_segment_ids=[m.remote_log_segment_id for m in registered],
                                             replaced_segment_ids=replaced, cleaner_offsets=vector)
            else:
                self.rlmm.publish_cleaner_offsets(p.tp, leader_epoch=p.epoch, cleaner_offsets=vector)
            return True
        except FencedLeaderEpochError as e:
            logger.warning("%s: leadership moved during the Spark clean (epoch %d): %s", p.tp, p.epoch, e)
            out.status, out.error = "fenced", str(e)
            self._abandon(p, fenced=True, registered=registered)
        except Exception as e:  # noqa: BLE001 - one partition's failure must not stop the others
            logger.exception("%s: publishing the Spark clean failed", p.tp)
            out.status, out.error = "failed", f"{type(e).__name__}: {e}"
            self._abandon(p, fenced=False, registered=registered)
        return False

    def _publish_round(self, p: _Part) -> None:
        """Replay a partition round's metadata writes under the job's epoch (fenced as in process)."""
        out = p.outcome
        res = p.round
        writes = res.writes if res is not None else None
        if res is None or writes is None or writes.cleaner_offsets is None:
            out.status, out.error = "failed", f"the round of {p.tp} returned no publish"
            self._abandon(p, fenced=False)
            return
        for sid, size in writes.key_indexes:  # indexes built for segments that had none
            try:
                self.rlmm.set_key_index(RemoteLogSegmentId(p.tp, sid), size)
            except TiercompactError as e:
                logger.warning("%s: could not record the key index of %s: %s", p.tp, sid, e)
        if not self._commit(p, writes.new_segments, [RemoteLogSegmentId(p.tp, sid) for sid in writes.replaced_ids],
                            dict(writes.cleaner_offsets)):
            return
        stats = res.stats
        out.end_offset = res.end
        out.new_segment_ids = [md.id for md, _bloom in writes.new_segments]
        out.replaced_segment_ids = list(writes.replaced_ids)
        out.segments_skipped_by_bloom = stats.segments_skipped_by_bloom
        out.segments_skipped_by_key_index = sum(a.action == ACTION_SKIPPED_BY_KEY_INDEX
                                                for a in stats.segment_accounts)
        out.segments_cleaned = stats.segments_cleaned
        out.bytes_downloaded, out.bytes_uploaded = stats.bytes_downloaded, stats.bytes_uploaded
        out.messages_read, out.messages_written = stats.messages_read, stats.messages_written
        p.view.adopt(res.end)
        logger.info("spark clean %s [%d, %d) in one partition round: %d segments cleaned, %d skipped by bloom, "
                    "%d by key index, %d B down, %d B up", p.tp, p.plan.first_dirty_offset, res.end,
                    out.segments_cleaned, out.segments_skipped_by_bloom, out.segments_skipped_by_key_index,
                    out.bytes_downloaded, out.bytes_uploaded)

    @staticmethod
    def _numbers(p: _Part, task: RewriteTask) -> list[int]:
        ids = {s.segment_id for s in task.sources}
        return [i for i, md in p.segs.items() if md.id in ids]

    def _abandon(self, p: _Part, *, fenced: bool, registered: Sequence[RemoteLogSegmentMetadata] = ()) -> None:
        """Delete every object the job may have written for ``p`` (keys from the pre-generated ids).

        Registered segments go through DELETE_SEGMENT_STARTED/FINISHED unless fenced (a fenced
        writer may not touch metadata; the new leader's deferred-delete loop ends those rows)."""
        reg = {m.id: m for m in registered}
        if p.whole:  # what a round uploaded (a failed stage left only tagged objects: the sweep ends them)
            uploads = [md for md, _bloom in p.round.writes.new_segments] if p.round is not None else []
        else:
            uploads = [task.new_metadata(0, 0, 0) for task in p.tasks]
        SegmentDeleter(self.rlmm, self.store.open(), self.broker_id, self.clock).remove_uploads(
            [reg.get(upload.id) or upload for upload in uploads], p.epoch,
            tombstone=lambda md: md.id in reg and not fenced, what="upload of the Spark clean")

    def _release(self, p: _Part) -> None:
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

