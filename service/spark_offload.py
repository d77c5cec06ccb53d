"""The node's Spark offload: runs tiered-pool rounds and API requests as Spark jobs on the
configured master while the node keeps serving, and adopts their results.

Who submits: the tiered pool, for partitions whose ``remote.compaction.engine`` is ``spark`` (or
``auto`` with enough dirty remote bytes), hands the partition over still marked IN_PROGRESS in
the cleaner manager, so no other round (background or API) runs on it meanwhile; and
``POST /v1/topics/{t}/spark-clean`` (``tiercompact spark-clean --server``), which marks its
partitions IN_PROGRESS itself, waiting for a running round to end first.

What runs: the driver of :class:`cleaner.spark.job.SparkCleanJob` in this process (Spark runs a
Python application's driver where it is submitted), executors on the master's workers. The
driver plans from the node's live log (:class:`cleaner.spark.views.LocalLogView`): the same
bounds as the in-process round. No lock is held while a job runs: the only state a job holds is
its partitions' IN_PROGRESS mark, and a watcher cancels the job's Spark stages when that mark
is aborted (topic deletion, a leadership move onto this node, shutdown).

Adoption: when the fenced publish landed the job drops the stale local copies below the new
checkpoint and :meth:`~cleaner.manager.LogCleanerManager.done_cleaning` writes the checkpoint,
exactly as after an in-process round. A partition fenced by a leadership change has had its
uploads removed by the job; the node forgets its cached epoch and, if it is still the leader
(under a new epoch), runs the partition again once under that epoch.

Jobs are listed in ``GET /v1/jobs`` (kind ``spark-clean``, engine ``spark``, the Spark
application id, attempts) and every round leaves a report with engine ``spark``.

The offloader is given its collaborators (the job registry, the cleaner's manager and reporter,
the node's partitions and leadership ports, the metadata store), never the node.
"""

from __future__ import annotations

import logging
import threading
import time
import uuid
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import TYPE_CHECKING, Any

from cleaner.errors import CleanerStateError
from cleaner.manager import CleaningStateKind, LogCleanerManager
from cleaner.ports import Leadership, Partitions
from cleaner.report import RoundReporter
from cleaner.round_metadata import TieredMetadata
from log.clock import Clock
from log.errors import InvalidRequestError, TiercompactError
from log.types import TopicPartition
from service.config import ServiceConfig, store_options
from service.errors import ServiceUnavailableError
from service.jobs import RUNNING, Job, JobRegistry

if TYPE_CHECKING:
    from cleaner.spark.job import PartitionOutcome, SparkCleanConfig, SparkCleanJob

logger = logging.getLogger(__name__)

ENGINE_LOCAL, ENGINE_SPARK, ENGINE_AUTO = "local", "spark", "auto"
#: how often the watcher looks for an aborted partition or a stopping node
WATCH_INTERVAL_S = 0.2
#: how long an API job waits for a running round on its partition to end
BUSY_WAIT_S = 120.0


def clean_config(config: ServiceConfig, *, master: str | None = None) -> SparkCleanConfig:
    """The offload's Spark settings from the service options (``master`` overrides spark_master)."""
    from cleaner.spark.job import SparkCleanConfig

    return SparkCleanConfig(master=master or config.spark_master or "local[*]",
                            app_name=f"tiercompact-broker-{config.broker_id}",
                            extra_conf=config.spark_conf_pairs(),
                            ship_packages=None if config.spark_ship_packages else False,
                            split_partition_bytes=config.spark_split_partition_bytes)


def wants_spark(engine: str, dirty_bytes: int, threshold: int) -> bool:
    """The engine rule of ``remote.compaction.engine``."""
    return engine == ENGINE_SPARK or (engine == ENGINE_AUTO and dirty_bytes >= threshold)


class SparkOffloader:
    """Runs the node's Spark jobs (see the module docstring). Thread-safe."""

    def __init__(self, config: ServiceConfig, *, jobs: JobRegistry, partitions: Partitions,
                 manager: LogCleanerManager, reporter: RoundReporter | None, wakeup: Callable[[], None],
                 leadership: Leadership, metadata: TieredMetadata, clock: Clock) -> None:
        self.service_config = config
        self.config = clean_config(config)
        self.jobs = jobs
        self.partitions = partitions
        self.manager = manager
        self.reporter = reporter
        self.wakeup = wakeup
        self.leadership = leadership
        self.metadata = metadata
        self.clock = clock
        self._pool = ThreadPoolExecutor(max_workers=config.spark_max_concurrent_jobs,
                                        thread_name_prefix="tiercompact-spark")
        self._session: Any = None
        self._owns_session = False
        #: for tests: SparkCleanJob's on_stage hook of every job (e.g. a leadership move mid-job)
        self.on_stage: Callable[[str, list[TopicPartition]], None] | None = None
        self._running: dict[str, SparkCleanJob] = {}
        self._stopping = threading.Event()

    # ---- submission ------------------------------------------------------------------------
    def offer(self, ltc: Any) -> bool:
        """The tiered pool's hook: take ``ltc`` (IN_PROGRESS) if its engine says Spark. The
        partition stays IN_PROGRESS until the job ends, which then calls done_cleaning."""
        try:
            log = ltc.log
            engine = str(log.config.get("remote.compaction.engine"))
            threshold = int(log.config.get("remote.compaction.spark.min.dirty.bytes"))
            if self._stopping.is_set() or not wants_spark(engine, int(ltc.cleanable_bytes), threshold):
                return False
        except Exception:  # noqa: BLE001 - never kill the pool's thread: it cleans in process instead
            logger.exception("%s: the Spark offload could not judge the partition", ltc.topic_partition)
            return False
        tp = ltc.topic_partition
        job = Job(uuid.uuid4().hex, tp.topic, tp.partition, kind="spark-clean", engine="spark",
                  partitions=[tp.partition], origin="tiered-pool")
        try:
            self.jobs.track(job)
            self._pool.submit(self._run, job, [tp], owned=True)
        except (RuntimeError, TiercompactError):
            return False  # shutting down: the pool's own path handles (and releases) it
        logger.info("%s: offloaded to Spark (engine=%s, %d dirty remote bytes), job %s", tp, engine,
                    ltc.cleanable_bytes, job.job_id)
        return True

    def submit(self, topic: str, partitions: Sequence[int]) -> Job:
        """An API request: one Spark job over ``partitions`` of ``topic``."""
        logs = [self.partitions.log(topic, p) for p in partitions]  # unknown ones fail now
        tps = [log.topic_partition for log in logs]
        for tp, log in zip(tps, logs, strict=True):
            if not log.config.remote_storage_enable:
                raise InvalidRequestError(f"{tp} has remote.storage.enable=false: Spark cleans the remote tier only")
        if self._stopping.is_set():
            raise ServiceUnavailableError("the node is shutting down; retry after it restarts")
        job = self.jobs.track(Job(uuid.uuid4().hex, topic, tps[0].partition, kind="spark-clean",
                                       engine="spark", partitions=[tp.partition for tp in tps]))
        self._pool.submit(self._run, job, tps, owned=False)
        return job

    # ---- running ---------------------------------------------------------------------------
    def session(self) -> Any:
        """The node's Spark session, started at the first job and kept for the node's life."""
        if self._session is None:
            from cleaner.spark.job import build_session, has_active_session

            # an embedding application's (or a test's) session is reused and left running
            self._owns_session = not has_active_session()
            self._session = build_session(self.config)  # getOrCreate: concurrent first jobs share one
        return self._session

    def _acquire(self, tps: list[TopicPartition]) -> list[TopicPartition]:
        """Mark each partition IN_PROGRESS, waiting for a running round to end."""
        manager = self.manager
        got: list[TopicPartition] = []
        deadline = time.monotonic() + BUSY_WAIT_S
        try:
            for tp in tps:
                while True:
                    try:
                        manager.start_cleaning(tp)
                        got.append(tp)
                        break
                    except CleanerStateError:
                        state = manager.state(tp)
                        if (self._stopping.is_set() or time.monotonic() > deadline
                                or (state is not None and state.kind is not CleaningStateKind.IN_PROGRESS)):
                            raise
                        time.sleep(0.05)
        except BaseException:
            for tp in got:
                manager.done_cleaning(tp, None)
            raise
        return got

    def _run(self, job: Job, tps: list[TopicPartition], *, owned: bool) -> None:
        manager = self.manager
        ends: dict[TopicPartition, int | None] = dict.fromkeys(tps)
        try:
            if not owned:
                tps = self._acquire(tps)
            job.state = RUNNING
            outcomes = self._attempts(job, tps)
            for tp, o in outcomes.items():
                if o.status == "cleaned" or o.status == "nothing-to-clean":
                    ends[tp] = o.end_offset
            stats = {"partitions": [o.as_dict() for o in outcomes.values()],
                     "spark_application_id": job.spark_application_id}
            failed = [o for o in outcomes.values() if o.status not in ("cleaned", "nothing-to-clean")]
            self.jobs.finish(job, stats=stats, error=(
                "; ".join(f"{o.topic_partition}: {o.status}: {o.error}" for o in failed) or None))
        except BaseException as e:  # a job must always end in a state a client can read
            if not isinstance(e, TiercompactError):
                logger.exception("Spark job %s failed", job.job_id)
            self.jobs.finish(job, error=f"{type(e).__name__}: {e}")
        finally:
            for tp in tps:
                try:
                    manager.done_cleaning(tp, ends.get(tp))
                except Exception:  # noqa: BLE001 - e.g. the topic was deleted meanwhile
                    logger.warning("%s: could not finish the cleaner state after Spark job %s", tp, job.job_id,
                                   exc_info=True)
            self.wakeup()

    def _attempts(self, job: Job, tps: list[TopicPartition]) -> dict[TopicPartition, PartitionOutcome]:
        """Run the job; partitions fenced by a leadership change that left this node the leader
        (a new epoch) run once more under it."""
        outcomes: dict[TopicPartition, PartitionOutcome] = {}
        todo = list(tps)
        for attempt in range(2):
            job.attempts = attempt + 1
            result = self._run_once(job, todo)
            outcomes.update(result)
            fenced = [tp for tp, o in result.items() if o.status == "fenced"]
            for tp in fenced:
                self.leadership.forget_leader(tp)
            todo = []
            for tp in fenced:
                try:
                    if self.leadership.is_leader(tp):
                        todo.append(tp)
                except TiercompactError as e:
                    logger.warning("%s: cannot resolve leadership after the fenced Spark job: %s", tp, e)
            if not todo or self._stopping.is_set():
                break
            logger.info("Spark job %s: %s fenced, retrying under this node's new epoch", job.job_id,
                        [str(tp) for tp in todo])
        return outcomes

    def _run_once(self, job: Job, tps: list[TopicPartition]) -> dict[TopicPartition, PartitionOutcome]:
        from cleaner.spark.job import SparkCleanJob
        from cleaner.spark.views import LocalLogView

        manager = self.manager
        spark = self.session()
        job.spark_application_id = str(spark.sparkContext.applicationId)

        def view(tp: TopicPartition) -> LocalLogView:
            # done_cleaning writes the checkpoint once the job ends, as after an in-process round
            return LocalLogView(self.partitions.log(tp.topic, tp.partition),
                                lambda: self.leadership.leader_epoch(tp),
                                lambda: manager.all_cleaner_checkpoints().get(tp))

        config = self.service_config
        sj = SparkCleanJob(spark, rlmm=self.metadata, store_url=config.remote_url,
                           store_options=store_options(config), views=view, broker_id=config.broker_id,
                           clock=self.clock, config=self.config, reporter=self.reporter,
                           check_abort=manager.check_cleaning_aborted, on_stage=self.on_stage)
        stop = threading.Event()
        watcher = threading.Thread(target=self._watch, args=(sj, tps, stop), daemon=True,
                                   name=f"tiercompact-spark-watch-{job.job_id[:8]}")
        self._running[job.job_id] = sj
        watcher.start()
        try:
            return sj.run(tps)
        finally:
            stop.set()
            self._running.pop(job.job_id, None)

    def _watch(self, sj: SparkCleanJob, tps: list[TopicPartition], stop: threading.Event) -> None:
        """Cancel the job's stages once a partition's round is aborted or the node stops."""
        manager = self.manager
        while not stop.wait(WATCH_INTERVAL_S):
            aborted = [tp for tp in tps if (s := manager.state(tp)) is not None
                       and s.kind is CleaningStateKind.ABORTED]
            if aborted or self._stopping.is_set():
                logger.info("cancelling Spark job %s (%s)", sj.job_id,
                            f"aborted: {[str(tp) for tp in aborted]}" if aborted else "node stopping")
                try:
                    sj.cancel()
                except Exception:  # noqa: BLE001 - the session may be stopping already
                    logger.debug("cancel failed", exc_info=True)
                return

    # ---- lifecycle -------------------------------------------------------------------------
    def running_jobs(self) -> int:
        return len(self._running)

    def shutdown(self, timeout: float) -> bool:
        """Cancel running jobs (their uploads are removed), wait up to ``timeout`` seconds, stop the
        session. Returns whether everything stopped in time."""
        self._stopping.set()
        self._pool.shutdown(wait=False, cancel_futures=True)
        deadline = time.monotonic() + timeout
        for sj in list(self._running.values()):
            try:
                sj.cancel()
            except Exception:  # noqa: BLE001
                logger.debug("cancel failed", exc_info=True)
        while self._running and time.monotonic() < deadline:
            time.sleep(0.05)
        clean = not self._running
        session = self._session if self._owns_session else None
        if session is not None:
            stopper = threading.Thread(target=_stop_quietly, args=(session,), daemon=True,
                                       name="tiercompact-spark-stop")
            stopper.start()
            stopper.join(max(deadline - time.monotonic(), 0.5))
            clean = clean and not stopper.is_alive()
        return clean


def _stop_quietly(session: Any) -> None:
    """Stop the session; on SIGTERM of the process group the JVM may be gone already."""
    try:
        session.stop()
    except Exception:  # noqa: BLE001 - shutting down: nothing left to do about it
        logger.debug("stopping the Spark session failed", exc_info=True)
