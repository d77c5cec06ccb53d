"""The background cleaner: N threads that keep compacted logs clean (Kafka's LogCleaner).

Each :class:`CleanerThread` loops (Kafka's ``CleanerThread.doWork``):

1. ask the :class:`~cleaner.manager.LogCleanerManager` for the filthiest compacted log;
   if there is one, run one round on it (:class:`~cleaner.cleaner.Cleaner`) and report the
   result (``done_cleaning`` writes the checkpoint only after a successful round);
   a round that raises anything but an abort marks the partition *uncleanable*, so a broken
   partition is not retried in a hot loop;
2. run retention (``delete_old_segments``) on logs whose cleanup.policy contains ``delete``;
3. if nothing was cleaned, wait ``backoff_ms`` (woken early by :meth:`LogCleaner.wakeup` or
   shutdown).

An unexpected error outside a round kills the thread; dead threads are counted
(``dead_thread_count``) and are not restarted, as in Kafka.

All threads share one :class:`~cleaner.throttler.Throttler`; each has its own offset map of
``dedupe_buffer_size / threads`` bytes.

Metrics are pulled: the properties of :class:`LogCleaner` compute Kafka's gauges from the
threads' last rounds. :func:`clean_partition` is the one-shot entry point behind
``tiercompact clean TOPIC PARTITION``.

Thread-safety: LogCleaner's public methods are thread-safe.
"""

from __future__ import annotations

import collections
import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from cleaner.cleaner import Cleaner
from cleaner.config import CleanerConfig
from cleaner.errors import LogCleaningAbortedError, LogCleaningError, ThreadShutdownError
from cleaner.manager import LogCleanerManager
from cleaner.offset_map import CompactOffsetMap, OffsetMap
from cleaner.report import RoundReporter, build_report
from cleaner.stats import CleanerStats
from cleaner.throttler import Throttler
from cleaner.tiered import TieredCleaner, TieredContext, tiered_log_to_clean
from log.clock import SYSTEM_CLOCK, Clock
from log.errors import CorruptRecordError, InvalidRequestError, TiercompactError
from log.local_log import LocalLog, SimulatedCrash
from log.locks import RANK_LEAF, ordered_lock
from log.log_manager import LogManager
from log.types import TopicPartition
from metadata.errors import FencedLeaderEpochError

logger = logging.getLogger(__name__)

LAST_RUNS_KEPT = 50


class CleanerThread(threading.Thread):
    """One cleaner thread. A tiered thread cleans only ``remote.storage.enable`` partitions,
    with a TieredCleaner; a local one only the others (a separate pool, sharing the
    manager, the checkpoint file and the throttle)."""

    def __init__(self, owner: LogCleaner, thread_id: int, offset_map: OffsetMap, *, tiered: bool = False) -> None:
        kind = "tiered-cleaner" if tiered else "log-cleaner"
        super().__init__(name=f"tiercompact-{kind}-{thread_id}", daemon=True)
        self.owner = owner
        self.thread_id = thread_id
        self.tiered = tiered
        self._stop_event = threading.Event()
        self._wake = threading.Event()
        self.cleaner: Cleaner | TieredCleaner
        if tiered:
            self.cleaner = owner.new_tiered_cleaner(offset_map, check_done=self._check_done)
        else:
            self.cleaner = Cleaner(offset_map, owner.config, throttler=owner.throttler, clock=owner.clock,
                                   check_done=self._check_done, cleaner_id=thread_id)
        self.last_stats: CleanerStats | None = None
        self.last_pre_clean_delay_ms = 0
        self.dead = False

    @property
    def running(self) -> bool:
        return not self._stop_event.is_set()

    def _check_done(self, tp: TopicPartition) -> None:
        if self._stop_event.is_set():
            raise ThreadShutdownError("the cleaner is shutting down", tp)
        self.owner.manager.check_cleaning_aborted(tp)

    def initiate_shutdown(self) -> None:
        self._stop_event.set()
        self._wake.set()

    def wakeup(self) -> None:
        self._wake.set()

    def run(self) -> None:
        try:
            while self.running:
                cleaned = self.do_work()
                if not cleaned and self.running:
                    self._wake.wait(self.owner.config.backoff_ms / 1000.0)
                    self._wake.clear()
        except BaseException:
            # as Kafka's ShutdownableThread: the thread ends, is counted dead, and is not restarted
            self.dead = True
            logger.exception("%s died", self.name)

    def do_work(self) -> bool:
        """One iteration: clean the filthiest log if any, then retention. Returns whether it cleaned."""
        manager = self.owner.manager
        ltc = manager.grab_filthiest_compacted_log(tiered=self.tiered)
        if not self.tiered:
            self.last_pre_clean_delay_ms = manager.pre_clean_stats.max_compaction_delay_ms
        cleaned = False
        offload = self.owner.offload
        if ltc is not None and self.tiered and offload is not None and offload(ltc):
            return True  # a Spark job cleans it; this thread goes on to the next partition
        if ltc is not None:
            stats = self.owner.run_round(self.cleaner, ltc)
            if stats is not None:
                self.last_stats = stats
                cleaned = True  # a failed round backs off like an idle one: no hot loop
        if not self.tiered:
            self.owner.run_retention()
        return cleaned


class LogCleaner:
    """The cleaner threads plus their shared manager, throttler and metrics."""

    def __init__(self, config: CleanerConfig, log_manager: LogManager, *, clock: Clock = SYSTEM_CLOCK,
                 throttler: Throttler | None = None, tiered: TieredContext | None = None,
                 offload: Callable[[Any], bool] | None = None) -> None:
        self.config = config
        self.log_manager = log_manager
        self.clock = clock
        self.throttler = throttler or Throttler(config.io_max_bytes_per_second, clock=clock)
        self.manager = LogCleanerManager(log_manager.all_logs, log_manager.cleaner_checkpoint_path, clock=clock,
                                         offline=lambda: log_manager.offline_partitions().keys())
        self.tiered = tiered
        if tiered is not None:
            self.manager.tiered_log_to_clean = (
                lambda tp, log, cp, now: tiered_log_to_clean(tiered, tp, log, cp, now))
        #: every round's report goes to the metadata store (when there is one: a tiered context's)
        self.reporter: RoundReporter | None = RoundReporter(tiered.rlmm, clock=clock) if tiered is not None else None
        #: the tiered pool's offload hook (the node's Spark offload): given a grabbed tiered
        #: LogToClean it returns True when it took the round over, and then owns the partition's
        #: IN_PROGRESS state until its job ends (it calls done_cleaning)
        self.offload = offload
        #: rounds rejected because this node's leader epoch was superseded (a zombie)
        self.fenced_rounds = 0
        self.segments_skipped_by_bloom_total = 0
        self._lock = ordered_lock("cleaner.log_cleaner", RANK_LEAF)
        self.threads: list[CleanerThread] = []
        self._last_runs: collections.deque[dict[str, Any]] = collections.deque(maxlen=LAST_RUNS_KEPT)
        #: the last round run by clean_now (the admin API's clean), for the metrics
        self._last_request_stats: CleanerStats | None = None
        self._started = False

    # ---- lifecycle ---------------------------------------------------------------------
    def _new_map(self, *, tiered: bool = False) -> OffsetMap:
        # 16-byte slots and the record kernels for local and tiered rounds alike: the tiered
        # skip tests digest the dirty keys themselves (cleaner.key_skip.DirtyKeys), not the map
        return CompactOffsetMap(self.config.dedupe_buffer_per_thread)

    def start(self) -> None:
        with self._lock:
            if self._started or not self.config.enable:
                return
            self.threads = [CleanerThread(self, i, self._new_map()) for i in range(self.config.threads)]
            if self.tiered is not None:
                n = len(self.threads)
                self.threads += [CleanerThread(self, n + i, self._new_map(tiered=True), tiered=True)
                                 for i in range(self.tiered.threads)]
            for t in self.threads:
                t.start()
            self._started = True

    def initiate_shutdown(self) -> None:
        """Tell every thread to stop: a running round aborts at its next check (ThreadShutdownError)."""
        for t in list(self.threads):
            t.initiate_shutdown()

    def shutdown(self, timeout: float = 30.0) -> bool:
        """Stop the threads, waiting at most ``timeout`` seconds in all. A round that does not
        reach a check in time is abandoned (the threads are daemons; what it leaves behind,
        ``.cleaned`` files, is removed by recovery). Returns whether every thread stopped."""
        with self._lock:
            threads = list(self.threads)
            self._started = False
        for t in threads:
            t.initiate_shutdown()
        deadline = time.monotonic() + timeout
        for t in threads:
            t.join(max(deadline - time.monotonic(), 0.0))
        alive = [t.name for t in threads if t.is_alive()]
        if alive:
            logger.warning("cleaner threads still running after %.1f s, abandoned: %s", timeout, alive)
        return not alive

    def adopt_remote_checkpoint(self, tp: TopicPartition, log: LocalLog) -> None:
        """A new leader resolves the cleaner checkpoint from the remote cleaner-offset vector
        (the previous epoch's entry) and removes its local segments below it, whose content
        the remote tier has compacted since. Without a tiered context there is none."""
        if self.tiered is None:
            return
        cp = self.tiered.rlmm.resolve_cleaner_checkpoint(tp)
        if cp is None:
            return
        manager = self.manager
        manager.abort_and_pause_cleaning(tp, timeout=60)
        try:
            local = manager.all_cleaner_checkpoints().get(tp)
            if local is None or local < cp:
                manager.update_checkpoints(add=(tp, cp))
            dropped = TieredCleaner.drop_stale_local_copies(log, cp)
            if dropped:
                logger.info("%s: new leader dropped %d local segments below the remote cleaner checkpoint %d",
                            tp, len(dropped), cp)
        finally:
            manager.resume_cleaning(tp)

    def wakeup(self) -> None:
        for t in list(self.threads):
            t.wakeup()

    # ---- rounds ------------------------------------------------------------------------
    def new_tiered_cleaner(self, offset_map: OffsetMap,
                           check_done: Callable[[TopicPartition], None] | None = None) -> TieredCleaner:
        ctx = self.tiered
        if ctx is None:
            raise InvalidRequestError("this cleaner has no remote tier configured")
        return TieredCleaner(ctx.rlmm, ctx.rsm, offset_map, self.config, temp_dir=ctx.temp_dir,
                             broker_id=ctx.broker_id, clock=self.clock, throttler=self.throttler,
                             free_disk=ctx.free_disk, bloom_skip=ctx.bloom_skip,
                             check_done=check_done or self.manager.check_cleaning_aborted)

    def _clean(self, cleaner: Cleaner | TieredCleaner, ltc: Any, now: int | None = None) -> tuple[int, CleanerStats]:
        """One round, reported (:mod:`cleaner.report`) whatever its outcome."""
        tp = ltc.topic_partition
        started = self.clock.milliseconds()
        tiered = isinstance(cleaner, TieredCleaner)
        cleaner.current_stats = None
        epoch = -1
        checkpoint_before = -1
        try:
            if isinstance(cleaner, TieredCleaner):
                assert self.tiered is not None
                checkpoint = self.manager.all_cleaner_checkpoints().get(tp)
                checkpoint_before = checkpoint if checkpoint is not None else -1
                epoch = self.tiered.leader_epoch(tp)
                end, stats = cleaner.clean(ltc.log, leader_epoch=epoch, local_checkpoint=checkpoint)
                with self._lock:
                    self.segments_skipped_by_bloom_total += stats.segments_skipped_by_bloom
            else:
                epoch = ltc.log.leader_epoch
                checkpoint_before = ltc.first_dirty_offset
                end, stats = cleaner.clean(ltc) if now is None else cleaner.do_clean(ltc, now)
        except SimulatedCrash:
            raise  # a power cut writes nothing
        except BaseException as e:
            self._report(tp, tiered, epoch, started, checkpoint_before, None, cleaner.current_stats, e)
            raise
        self._report(tp, tiered, epoch, started, checkpoint_before, end, stats, None)
        return end, stats

    def _report(self, tp: TopicPartition, tiered: bool, epoch: int, started: int, checkpoint_before: int,
                end: int | None, stats: CleanerStats | None, error: BaseException | None) -> None:
        if self.reporter is None:
            return
        if stats is not None and stats.first_dirty_offset >= 0:
            checkpoint_before = stats.first_dirty_offset  # the tiered round's planned start
        self.reporter.record(build_report(
            tp, engine="tiered" if tiered else "local", leader_epoch=epoch, started_ms=started,
            ended_ms=self.clock.milliseconds(), checkpoint_before=checkpoint_before, checkpoint_after=end,
            stats=stats, error=error))

    def run_round(self, cleaner: Cleaner | TieredCleaner, ltc: Any) -> CleanerStats | None:
        """Run one round on an IN_PROGRESS log and complete it in the manager (A.11).

        A round that fails with a retriable error (object store unavailable, not enough free
        disk) or because this node was fenced is not marked uncleanable: it is tried again
        after the backoff. Any other failure marks the partition uncleanable.
        """
        tp = ltc.topic_partition
        end_offset: int | None = None
        stats: CleanerStats | None = None
        try:
            end_offset, stats = self._clean(cleaner, ltc)
        except LogCleaningAbortedError:
            logger.info("%s: cleaning aborted", tp)
        except FencedLeaderEpochError as e:
            with self._lock:
                self.fenced_rounds += 1
            logger.warning("%s: round rejected, this node's leader epoch was superseded: %s", tp, e)
            self._record({"topic": tp.topic, "partition": tp.partition, "error": f"fenced: {e}",
                          "end_ms": self.clock.milliseconds()})
        except TiercompactError as e:
            if not e.retriable:
                logger.exception("%s: cleaning failed; marking the partition uncleanable", tp)
                self.manager.mark_uncleanable(tp, f"{type(e).__name__}: {e}")
            else:
                logger.warning("%s: cleaning failed, will retry after the backoff: %s", tp, e)
            self._record({"topic": tp.topic, "partition": tp.partition, "error": f"{type(e).__name__}: {e}",
                          "end_ms": self.clock.milliseconds()})
        except Exception as e:
            logger.exception("%s: cleaning failed; marking the partition uncleanable", tp)
            self.manager.mark_uncleanable(tp, f"{type(e).__name__}: {e}")
            self._record({"topic": tp.topic, "partition": tp.partition, "error": f"{type(e).__name__}: {e}",
                          "end_ms": self.clock.milliseconds()})
        finally:
            self.manager.done_cleaning(tp, end_offset)
        if stats is not None:
            d = stats.as_dict()
            d["end_ms"] = self.clock.milliseconds()
            self._record(d)
        return stats

    def run_retention(self) -> None:
        """Retention on deletable logs (cleanup.policy containing delete), holding them IN_PROGRESS."""
        logs = self.manager.deletable_logs()
        try:
            now = self.clock.milliseconds()
            for tp, log in logs:
                try:
                    log.delete_old_segments(now)
                except Exception:
                    logger.exception("%s: retention failed", tp)
        finally:
            self.manager.done_deleting([tp for tp, _ in logs])

    def clean_now(self, tp: TopicPartition) -> CleanerStats:
        """One round on ``tp`` now, ignoring min.cleanable.dirty.ratio (the admin API's clean).

        Raises CleanerStateError if the partition is being cleaned or is paused, and
        LogCleaningError (with the cause) if the round fails.
        """
        log = self.log_manager.get_log(tp)
        if not log.config.compact:
            raise InvalidRequestError(f"{tp}: cleanup.policy={log.config.get('cleanup.policy')} does not "
                                      f"include 'compact'; there is nothing to clean")
        self.manager.start_cleaning(tp)
        end_offset: int | None = None
        try:
            now = self.clock.milliseconds()
            if self.tiered is not None and log.config.remote_storage_enable:
                tiered = self.new_tiered_cleaner(self._new_map(tiered=True))
                end_offset, stats = self._clean(tiered, _OneLog(tp, log))
            else:
                ltc = self.manager.log_to_clean(tp, log, self.manager.all_cleaner_checkpoints().get(tp), now)
                cleaner = Cleaner(self._new_map(), self.config, throttler=self.throttler, clock=self.clock,
                                  check_done=self.manager.check_cleaning_aborted)
                end_offset, stats = self._clean(cleaner, ltc, now)
        except (LogCleaningError, FencedLeaderEpochError):
            raise
        except CorruptRecordError as e:
            # corrupt bytes will not heal by retrying: the round stopped before rewriting them
            # (a rebuilt batch would carry a fresh, valid CRC) and the partition is uncleanable
            # until an operator deals with the named file (as a background round marks it)
            reason = f"{type(e).__name__}: {e}"
            logger.error("%s: %s; marking the partition uncleanable", tp, reason)
            self.manager.mark_uncleanable(tp, reason)
            self._record({"topic": tp.topic, "partition": tp.partition, "error": reason,
                          "end_ms": self.clock.milliseconds()})
            raise LogCleaningError(f"cleaning failed: {reason}; the partition is uncleanable until a clean "
                                   f"succeeds: repair or restore the named file, then clean it again", tp) from e
        except TiercompactError as e:
            if e.retriable:
                raise  # e.g. the object store is unavailable: the caller may simply retry
            raise LogCleaningError(f"cleaning failed: {type(e).__name__}: {e}", tp) from e
        except Exception as e:
            # not a project error: a bug or an untranslated library error; keep where it came from
            logger.exception("%s: cleaning failed with an unexpected %s", tp, type(e).__name__)
            raise LogCleaningError(f"cleaning failed: {type(e).__name__}: {e}", tp) from e
        finally:
            self.manager.done_cleaning(tp, end_offset)
        if tp in self.manager.uncleanable_partitions():
            # the operator's way back: a round asked for after the damage was dealt with succeeded
            logger.info("%s: cleaned successfully; no longer uncleanable", tp)
            self.manager.clear_uncleanable(tp)
        d = stats.as_dict()
        d["end_ms"] = self.clock.milliseconds()
        self._record(d)
        with self._lock:
            self._last_request_stats = stats  # the metrics count it like one more thread's last round
        return stats

    def _record(self, run: dict[str, Any]) -> None:
        with self._lock:
            self._last_runs.append(run)

    # ---- metrics (pulled) --------------------------------------------------------------
    def _last_stats(self) -> list[CleanerStats]:
        """The last round of each thread, and of the requests (clean_now) as if one more thread."""
        stats = [t.last_stats for t in list(self.threads) if t.last_stats is not None]
        with self._lock:
            if self._last_request_stats is not None:
                stats.append(self._last_request_stats)
        return stats

    @property
    def max_buffer_utilization_percent(self) -> int:
        """100 x max buffer utilization of the threads' last rounds (KAFKA-18597 semantics)."""
        return int(100 * max((s.buffer_utilization for s in self._last_stats()), default=0.0))

    @property
    def cleaner_recopy_percent(self) -> int:
        stats = self._last_stats()
        read = sum(s.bytes_read for s in stats)
        written = sum(s.bytes_written for s in stats)
        return int(100 * written / max(read, 1))

    @property
    def max_clean_time_secs(self) -> int:
        return int(max((s.elapsed_secs for s in self._last_stats()), default=0.0))

    @property
    def max_compaction_delay_secs(self) -> int:
        delays = [t.last_pre_clean_delay_ms for t in list(self.threads)]
        delays.append(self.manager.pre_clean_stats.max_compaction_delay_ms)
        return int(max(delays) / 1000)

    @property
    def dead_thread_count(self) -> int:
        return sum(1 for t in list(self.threads) if t.dead)

    @property
    def uncleanable_partitions_count(self) -> int:
        return len(self.manager.uncleanable_partitions())

    @property
    def uncleanable_bytes(self) -> int:
        return self.manager.uncleanable_bytes()

    @property
    def time_since_last_run_ms(self) -> int:
        return self.manager.time_since_last_run_ms()

    @property
    def max_dirty_percent(self) -> int:
        return self.manager.max_dirty_percent

    @property
    def last_runs(self) -> list[dict[str, Any]]:
        """Recent round summaries (stats dicts, or {"error": ...} for a failed round), oldest first."""
        with self._lock:
            return list(self._last_runs)

    def status(self) -> dict[str, Any]:
        """GET /v1/cleaner's shape."""
        return {
            "threads": self.config.threads,
            "dead_threads": self.dead_thread_count,
            "uncleanable_partitions": [str(tp) for tp in sorted(self.manager.uncleanable_partitions())],
            "uncleanable_reasons": {str(tp): r for tp, r in sorted(self.manager.uncleanable_reasons().items())},
            "last_runs": self.last_runs,
        }


@dataclass(frozen=True, slots=True)
class _OneLog:
    """The partition clean_now targets (a tiered round plans its own range)."""

    topic_partition: TopicPartition
    log: Any


def clean_partition(log_manager: LogManager, tp: TopicPartition, cleaner_config: CleanerConfig | None = None,
                    clock: Clock | None = None, *, log_cleaner: LogCleaner | None = None) -> CleanerStats:
    """One cleaning round on ``tp`` ignoring the dirty-ratio threshold; updates the checkpoint.

    With a running ``log_cleaner``, goes through it so the round is coordinated with its threads
    (the partition must not be in a cleaning state). Without one, uses a private manager over
    ``log_manager``'s checkpoint file (for the CLI, when no service is running).
    """
    if log_cleaner is not None:
        return log_cleaner.clean_now(tp)
    lc = LogCleaner(cleaner_config or CleanerConfig(), log_manager, clock=clock or log_manager.clock)
    return lc.clean_now(tp)
