"""Node: one tiercompact node, the methods every front door (HTTP routes, CLI, demo, bench) drives.

Its collaborators come built and connected (:func:`service.wiring.build_parts`, from a
:class:`~service.config.ServiceConfig`): the Scheduler and LogManager (local logs, recovered on
open), the object store (counting bytes for metrics), the RemoteStorageManager and metadata
store, the RemoteLogManager (tiering and reads over both tiers), the LogCleaner, the job
registry and the Spark offload. The node adds the erasure workflow, given the node's narrow
ports (:mod:`cleaner.ports`), and the background threads of :mod:`service.threads`.

Lifecycle: ``Node(config)`` opens the stores (local recovery runs as logs are opened);
:meth:`start` re-registers leadership of every partition, then starts the cleaner and
the periodic threads; :meth:`shutdown` stops them in reverse order (in-flight cleans are
aborted by the cleaner, which leaves only ``.cleaned`` files that recovery removes),
closes every log (marking a clean shutdown) and the stores. Both are idempotent.

Thread-safety: every method may be called from many request threads at once; the
collaborators are thread-safe and the node's own counters take a lock.
"""

from __future__ import annotations

import contextlib
import logging
import time
from collections.abc import Callable, Sequence
from typing import Any

from cleaner.erasure_workflow import ErasureService
from cleaner.errors import CleanerStateError
from cleaner.log_cleaner import clean_partition
from cleaner.log_to_clean import LogToClean, cleanable_offsets
from cleaner.manager import CleaningStateKind
from cleaner.ports import LogPartitions
from log.checkpoint import corrupt_checkpoints_rebuilt
from log.clock import SYSTEM_CLOCK, Clock
from log.errors import InvalidRequestError, PartitionOfflineError, PolicyViolationError, TiercompactError
from log.fetch import READ_COMMITTED, check_isolation
from log.local_log import AppendResult, LocalLog, RecordSpec
from log.locks import RANK_LEAF, ordered_lock
from log.log_manager import Topic
from log.record import CompressionType, ControlRecordType
from log.types import TopicPartition, validate_topic_name
from metadata.errors import FencedLeaderEpochError, NotLeaderForPartitionError
from remote.log_manager import COUNTED_BY_RLM
from remote.tiered_read import ReadResult, read_local_page
from service import flush_policy, topic_sync
from service.config import ServiceConfig, redact_url, store_options
from service.fields import decode_field, encode_field
from service.jobs import Job
from service.metadata_sync import MetadataFollower
from service.threads import PeriodicTask
from service.wiring import REMOTE_CACHE_DIR, TIERED_TEMP_DIR, NodeParts, build_parts

logger = logging.getLogger(__name__)

#: decode_field and encode_field stay importable from here (they live in service.fields)
__all__ = ["REMOTE_CACHE_DIR", "TIERED_TEMP_DIR", "Node", "NodeParts", "decode_field", "encode_field"]

ONLINE, OFFLINE = "online", "offline"  # a partition's state in GET .../partitions/{p}
MAX_EMPTY_PAGES = 1000
CLEAN_BUSY_WAIT_MS = 50
CLEAN_BUSY_RETRIES = 600
#: how long Node.shutdown may take (SIGTERM must end `tiercompact serve` within 10 s)
SHUTDOWN_TIMEOUT_S = 5.0


class Node:
    """One tiercompact node; see the module docstring. ``parts`` are its collaborators,
    built from ``config`` when not given."""

    def __init__(self, config: ServiceConfig, *, clock: Clock = SYSTEM_CLOCK, parts: NodeParts | None = None) -> None:
        self.config = config
        self.clock = clock
        self.broker_id = config.broker_id
        self.data_dir = config.data_dir
        self._lock = ordered_lock("service.node", RANK_LEAF)
        self._started = False
        self._closed = False
        self.fenced_operations = 0
        parts = parts if parts is not None else build_parts(config, clock)
        self.scheduler = parts.scheduler
        self.log_manager = parts.log_manager
        self.store_breaker = parts.store_breaker
        self.object_store = parts.object_store
        self.storage_manager = parts.storage_manager
        self.metadata = parts.metadata
        self.cleaner = parts.cleaner
        self.remote = parts.remote
        self.jobs = parts.jobs
        #: called with the TopicPartition after every append (the Kafka listener's Fetch long polls)
        self._append_listeners: list[Callable[[TopicPartition], None]] = []
        #: more Prometheus collectors for /metrics (the Kafka listener's)
        self.metric_collectors: list[Any] = []
        #: called with the name after a topic is deleted everywhere (the Kafka listener's topic id cache)
        self.topic_deleted_listeners: list[Callable[[str], None]] = []
        #: the Spark offload, with a spark_master: tiered-pool rounds and API requests as jobs
        self.spark = parts.spark
        self.partitions = LogPartitions(self.log_manager)
        self._running_cleans: dict[TopicPartition, int] = {}
        self.follower = MetadataFollower(self, interval_ms=config.metadata_sync_interval_ms)
        self._erasure_thread = PeriodicTask("tiercompact-erasures", self.run_erasures_once,
                                            config.erasure_check_interval_ms)
        self.threads: list[PeriodicTask] = [
            PeriodicTask("tiercompact-retention", self.run_retention_once, config.tiering_interval_ms),
            PeriodicTask("tiercompact-force-roll", self.run_force_roll_once, config.roll_check_interval_ms),
            self._erasure_thread,
            PeriodicTask("tiercompact-metadata-sync", self.follower.run_once, config.metadata_sync_interval_ms),
            flush_policy.install(self),  # flush.messages after appends, flush.ms periodically
        ]
        #: on-demand key erasure with a receipt, over the node's ports
        self.erasures = ErasureService(
            partitions=self.partitions, producer=self, cleaning=self, errors=self, remote=self.remote,
            metadata=self.metadata, storage_manager=self.storage_manager, object_store=self.object_store,
            clock=clock, broker_id=self.broker_id, temp_dir=self.data_dir / TIERED_TEMP_DIR / "erasure",
            wake=self._wake_erasures, cluster=self.follower.registered_brokers)

    def store_options(self) -> dict[str, Any]:
        return store_options(self.config)

    @property
    def tiered_cleaning(self) -> bool:
        """Whether cleans of tiered partitions compact the remote tier too (the tiered pool)."""
        return self.cleaner.tiered is not None

    # ---- lifecycle -------------------------------------------------------------------
    def start(self) -> Node:
        with self._lock:
            if self._started:
                return self
            self._started = True
        self.recover()
        self.follower.start_pass()  # before serving: stale and erased copies go first
        for t in self.threads:
            t.start()
        self.cleaner.start()
        logger.info("node %d started on %s (remote %s, metadata %s)", self.broker_id, self.data_dir,
                    self.config.remote_url, redact_url(self.config.metadata_url))
        return self

    def recover(self) -> None:
        """Startup recovery beyond the local logs' own: resume the registered leadership of
        every tiered partition and delete uploads a crash left unfinished, before any
        cleaner or tiering pass runs.

        A node resumes only an epoch registered to its own broker id. When the metadata
        store shows another broker's epoch (this node is an old leader restarted after a
        leadership move), the node is a follower of that partition: it uploads, publishes
        and deletes nothing there, and the API answers 409 naming the leader."""
        for tp, log in sorted(self.log_manager.all_logs().items()):
            if not log.config.remote_storage_enable:
                continue
            try:
                if not self.remote.is_leader(tp):
                    current = self.metadata.leader_state(tp)
                    logger.warning("%s: broker %d is not the leader (broker %s holds leader epoch %s); this node is "
                                   "a follower of the partition and fenced: no uploads, cleaning publishes or "
                                   "deletes there", tp, self.broker_id, current.broker_id if current else "?",
                                   current.leader_epoch if current else "?")
                    continue
                removed = self.remote.recover_orphans(tp)
                if removed:
                    logger.info("%s: removed %d unfinished uploads left by a crash", tp, len(removed))
            except TiercompactError as e:
                self.note_error(e)
                logger.warning("%s: recovery of remote state failed: %s", tp, e)

    def _wake_erasures(self) -> None:
        """Start the erasure thread's next pass at once (after a new erasure), once it runs."""
        if self._started:
            self._erasure_thread.wake()

    def _stopping(self) -> bool:
        return self._closed

    def shutdown(self, timeout: float = SHUTDOWN_TIMEOUT_S) -> bool:
        """Stop everything within ``timeout`` seconds, whatever the threads are doing.

        Every thread is told to stop first (cleaner rounds abort at their next check, leaving
        only ``.cleaned`` files that recovery removes and no moved checkpoint; the tiering
        pass stops between steps); then each wait gets what is left of one deadline. A thread
        still running at the deadline is abandoned (all are daemons): the logs are then closed
        without the clean-shutdown marker, so the next start recovers them fully. Returns
        whether the stop was clean.
        """
        with self._lock:
            if self._closed:
                return True
            self._closed = True
        deadline = time.monotonic() + timeout

        def left() -> float:
            return max(deadline - time.monotonic(), 0.0)

        for t in self.threads:
            t.initiate_shutdown()
        self.cleaner.initiate_shutdown()
        with self._lock:
            running = list(self._running_cleans)
        for tp in running:  # API cleans: abort the round, bounded by the deadline
            try:
                self.cleaner.manager.abort_and_pause_cleaning(tp, timeout=left())
            except TiercompactError as e:
                logger.warning("%s: could not abort the running clean: %s", tp, e)
        if self.spark is not None:  # cancels running jobs (their uploads are removed), stops the session
            clean_spark = self.spark.shutdown(timeout=min(left(), SHUTDOWN_TIMEOUT_S * 0.6))
        else:
            clean_spark = True
        clean = self.jobs.shutdown(timeout=left()) and clean_spark
        clean = self.cleaner.shutdown(timeout=left()) and clean
        for t in self.threads:
            t.shutdown(timeout=left())
            clean = clean and not t.is_alive()
        self.scheduler.shutdown(timeout=left())
        if not clean:
            logger.warning("node %d: background work did not stop within %.0f s; abandoning it (the logs "
                           "are recovered at the next start)", self.broker_id, timeout)
        clean = self.log_manager.close(clean=clean, timeout=left()) and clean
        for closer in (self.follower.close, self.remote.close, self.metadata.close, self.object_store.close):
            try:
                closer()
            except Exception:  # closing must not stop the rest of the shutdown
                logger.exception("error while closing")
        logger.info("node %d stopped%s", self.broker_id, "" if clean else " (not cleanly)")
        return clean

    def __enter__(self) -> Node:
        return self

    def __exit__(self, *exc: object) -> None:
        self.shutdown()

    def note_error(self, exc: TiercompactError) -> None:
        """Count what metrics report about errors (fenced operations).

        Fenced errors raised out of the RemoteLogManager were already counted by it."""
        if isinstance(exc, FencedLeaderEpochError) and not getattr(exc, COUNTED_BY_RLM, False):
            with self._lock:
                self.fenced_operations += 1

    def metrics(self) -> dict[str, float]:
        """Current metric values by name (service.metrics pulls these at scrape time)."""
        out: dict[str, float] = {}
        with self._lock:  # a leaf lock: read our own counter only, then ask the others
            fenced = self.fenced_operations
        out["fenced_operations_total"] = fenced + self.remote.stats().fenced_operations + self.cleaner.fenced_rounds
        out["remote_segments_skipped_by_bloom_total"] = self.cleaner.segments_skipped_by_bloom_total
        c = self.cleaner
        for name in ("max_compaction_delay_secs", "max_clean_time_secs", "uncleanable_partitions_count",
                     "uncleanable_bytes", "dead_thread_count", "max_buffer_utilization_percent",
                     "cleaner_recopy_percent", "time_since_last_run_ms"):
            out[name] = getattr(c, name)
        out["remote_bytes_uploaded_total"] = self.object_store.bytes_uploaded
        out["remote_bytes_downloaded_total"] = self.object_store.bytes_downloaded
        out["offline_partitions_count"] = len(self.log_manager.offline_partitions())
        out["remote_store_unavailable"] = 1.0 if self.store_breaker.is_open else 0.0
        out["remote_store_outages_total"] = self.store_breaker.times_opened
        out["corrupt_checkpoints_rebuilt_total"] = corrupt_checkpoints_rebuilt(self.log_manager.cleaner_checkpoint_path)
        try:
            out.update(self.erasures.metrics())
        except TiercompactError as e:  # the metadata store is down: the other metrics still answer
            logger.warning("erasure metrics unavailable: %s", e)
        return out

    def run_erasures_once(self) -> None:
        """Drive every unfinished erasure part this node leads (cleaner.erasure_workflow)."""
        self.erasures.run_once(stop=self._stopping)

    # ---- background passes -------------------------------------------------------------
    def run_retention_once(self) -> None:
        """Local retention of non-tiered delete-policy logs (coordinated with cleaning by the
        cleaner's manager, so a round and a retention pass never touch a log at once)."""
        self.cleaner.run_retention()
        for tp, log in self.log_manager.all_logs().items():
            if expired := log.remove_expired_producers():
                logger.info("%s: expired idle producers %s (producer.id.expiration.ms)", tp, expired)
        for tp, res in self.remote.run_once(stop=self._stopping).items():
            if res.copied or res.deleted_local or res.deleted_remote:
                logger.info("%s: tiered %s, deleted local %s, deleted remote %s", tp, res.copied,
                            res.deleted_local, res.deleted_remote)

    def run_force_roll_once(self) -> list[TopicPartition]:
        """KIP-354: roll active segments past segment.ms / max.compaction.lag.ms."""
        rolled = []
        now = self.clock.milliseconds()
        for tp, log in self.log_manager.all_logs().items():
            if log.maybe_roll(now):
                rolled.append(tp)
        return rolled

    # ---- topics ----------------------------------------------------------------------
    def create_topic(self, name: str, partitions: int | None = None, config: dict[str, Any] | None = None, *,
                     join: bool = True) -> Topic:
        """Create a topic of ``partitions`` partitions, by default the node's ``num_partitions`` (Kafka's
        num.partitions) (service.topic_sync.create_topic: ``join`` takes a topic another node stored with the same
        partitions and config as created; without it that topic already exists, as Kafka's CreateTopics)."""
        count = self.config.num_partitions if partitions is None else partitions
        return topic_sync.create_topic(self.log_manager, self.metadata, name, count, config, join=join)

    def topics(self) -> list[Topic]:
        return self.log_manager.topics()

    def topic(self, name: str) -> Topic:
        return self.partitions.topic(name)

    def alter_config(self, name: str, changes: dict[str, Any]) -> Topic:
        validate_topic_name(name)
        return topic_sync.alter_config(self.log_manager, self.metadata, name, changes)

    def delete_topic(self, name: str, *, local_only: bool = False) -> dict[str, Any]:
        """Delete a topic. Returns what was deleted: ``{"topic", "partitions",
        "local_deleted", "remote_deleted"}``.

        By default the topic is deleted everywhere: its remote objects and metadata (shared
        with every node on the same stores), then this node's local logs. Deleting shared
        data is fenced: this node must hold the current leader epoch of every partition that
        has remote state, checked for all partitions before anything is deleted; otherwise
        NotLeaderForPartitionError (409) and nothing is deleted, locally or remotely.

        ``local_only`` drops only this node's local logs and leaves the remote data and
        metadata to the leader (a follower's stale copy); it needs no leadership.
        """
        topic = self.topic(name)
        tps = [TopicPartition(name, p) for p in range(topic.partitions)]
        if not local_only:
            for tp in tps:  # every partition first: a refusal must leave the whole topic untouched
                try:
                    self.remote.check_current_leader(tp, f"deletion of topic {name!r}")
                except FencedLeaderEpochError as e:
                    raise topic_sync.not_deleted(e, name) from None
                except PartitionOfflineError as e:
                    raise PartitionOfflineError(
                        f"topic {name!r} was not deleted: this node cannot check its leadership of the shared "
                        f"remote data while {e}. To drop only this node's copy, DELETE /v1/topics/{name}"
                        f"?scope=local (the leader keeps the remote data)") from None
        manager = self.cleaner.manager
        for tp in tps:
            manager.abort_and_pause_cleaning(tp, timeout=60)
        try:
            if not local_only:
                for tp in tps:  # fenced: see RemoteLogManager.delete_partition_data
                    self.remote.delete_partition_data(tp)
            self.log_manager.delete_topic(name)
            if not local_only:
                topic_sync.forget_topic(self.metadata, self.metadata, name, self.broker_id,
                                        self.topic_deleted_listeners)
        finally:
            for tp in tps:
                manager.forget(tp)
        if local_only:
            logger.info("topic %s: deleted this node's local copy only; its remote data and metadata were kept",
                        name)
        return {"topic": name, "partitions": len(tps), "local_deleted": True, "remote_deleted": not local_only}

    # ---- partitions ------------------------------------------------------------------
    def add_append_listener(self, fn: Callable[[TopicPartition], None]) -> None:
        self._append_listeners.append(fn)

    def remove_append_listener(self, fn: Callable[[TopicPartition], None]) -> None:
        with contextlib.suppress(ValueError):
            self._append_listeners.remove(fn)

    def notify_append(self, tp: TopicPartition) -> None:
        """Tell the append listeners ``tp`` grew (every append path calls it after appending)."""
        for fn in self._append_listeners:
            fn(tp)

    def log(self, topic: str, partition: int) -> LocalLog:
        return self.partitions.log(topic, partition)

    def produce(self, topic: str, partition: int, records: Sequence[RecordSpec], *, compression: str = "none",
                producer_id: int = -1, producer_epoch: int = -1, base_sequence: int = -1,
                transactional: bool = False) -> AppendResult:
        log = self._log_for_produce(topic, partition, len(records))
        res = log.append_records(records, compression=CompressionType.from_name(compression),
                                 producer_id=producer_id, producer_epoch=producer_epoch,
                                 base_sequence=base_sequence, transactional=transactional)
        self.notify_append(log.topic_partition)
        return res

    def produce_columns(self, topic: str, partition: int, keys: list[bytes | None], values: list[bytes | None],
                        timestamps: list[int | None] | None = None, *, compression: str = "none",
                        producer_id: int = -1, producer_epoch: int = -1, base_sequence: int = -1,
                        transactional: bool = False) -> AppendResult:
        """:meth:`produce` for records without headers given as columns (LocalLog.append_columns):
        the same checks and the same batch, without a RecordSpec per record."""
        log = self._log_for_produce(topic, partition, len(keys))
        res = log.append_columns(keys, values, timestamps, compression=CompressionType.from_name(compression),
                                 producer_id=producer_id, producer_epoch=producer_epoch,
                                 base_sequence=base_sequence, transactional=transactional)
        self.notify_append(log.topic_partition)
        return res

    def _log_for_produce(self, topic: str, partition: int, count: int) -> LocalLog:
        if count > self.config.max_records_per_request:
            from service.errors import RequestTooLargeError

            raise RequestTooLargeError(f"{count} records in one request; the limit is "
                                       f"max_records_per_request={self.config.max_records_per_request}")
        log = self.log(topic, partition)
        self.check_leader_for_produce(log)
        return log

    def append_marker(self, topic: str, partition: int, producer_id: int, producer_epoch: int, kind: str) -> int:
        types = {"commit": ControlRecordType.COMMIT, "abort": ControlRecordType.ABORT}
        if kind not in types:
            raise InvalidRequestError(f"marker type {kind!r} is invalid: use commit or abort")
        log = self.log(topic, partition)
        self.check_leader_for_produce(log)
        offset = log.append_marker(producer_id, producer_epoch, types[kind])
        self.notify_append(log.topic_partition)
        return offset

    def read(self, topic: str, partition: int, offset: int, *, max_records: int = 500,
             isolation: str = "read_uncommitted") -> ReadResult:
        """Records from ``offset``; an empty page means the caller reached the high watermark."""
        check_isolation(isolation)
        if not 1 <= max_records <= self.config.max_fetch_records:
            raise InvalidRequestError(f"max_records={max_records} is invalid: must be 1.."
                                      f"{self.config.max_fetch_records}")
        if offset < 0:
            raise InvalidRequestError(f"offset={offset} is invalid: must be >= 0")
        log = self.log(topic, partition)
        if not log.config.remote_storage_enable:
            return read_local_page(log, offset, max_bytes=self.config.max_fetch_bytes, max_records=max_records,
                                   isolation=isolation)
        tp = log.topic_partition
        self.check_leader_for_read(tp)
        res = self.remote.read(tp, offset, max_bytes=self.config.max_fetch_bytes, isolation=isolation,
                               max_records=max_records)
        # a page holding only control batches or aborted records: keep going, so an empty
        # page always means "nothing more to read now"
        for _ in range(MAX_EMPTY_PAGES):
            upper = log.last_stable_offset if isolation == READ_COMMITTED else log.high_watermark
            if res.fields or res.next_offset >= upper or res.next_offset <= offset:
                break
            offset = res.next_offset
            res = self.remote.read(tp, offset, max_bytes=self.config.max_fetch_bytes, isolation=isolation,
                                   max_records=max_records)
        return res

    def roll(self, topic: str, partition: int) -> int:
        return self.log(topic, partition).roll().base_offset

    def partition_info(self, topic: str, partition: int) -> dict[str, Any]:
        """The partition's offsets, ratios and segments; an offline one shows only why."""
        tp = TopicPartition(validate_topic_name(topic), partition)
        reason = self.log_manager.offline_reason(tp)
        if reason is not None:
            return {"topic": tp.topic, "partition": tp.partition, "state": OFFLINE, "error": reason,
                    "log_start_offset": None, "log_end_offset": None, "last_stable_offset": None,
                    "high_watermark": None, "leader_epoch": None, "cleaner_checkpoint": None,
                    "dirty_ratio": None, "must_clean_ratio": None, "local_size_bytes": None,
                    "remote_size_bytes": None, "segments": []}
        log = self.log(topic, partition)
        tp = log.topic_partition
        segs = log.all_segments()
        local_bytes = sum(s.size for s in segs)
        tiered = log.config.remote_storage_enable
        if tiered:
            segments = [{"base_offset": v.base_offset, "end_offset": v.end_offset, "size_bytes": v.size_bytes,
                         "tier": v.tier, "segment_id": v.segment_id, "state": v.state,
                         "max_timestamp": v.max_timestamp} for v in self.remote.segments_view(tp)]
        else:
            segments = [{"base_offset": s.base_offset, "end_offset": s.read_next_offset() - 1, "size_bytes": s.size,
                         "tier": "local", "segment_id": None, "state": None, "max_timestamp": s.largest_timestamp}
                        for s in segs]
        checkpoint = self.cleaner_checkpoint(tp)
        dirty, must = self._ratios(log, checkpoint)
        return {
            "topic": tp.topic, "partition": tp.partition, "state": ONLINE, "error": None,
            "log_start_offset": self.remote.log_start_offset(tp) if tiered else log.log_start_offset,
            "log_end_offset": log.log_end_offset,
            "last_stable_offset": log.last_stable_offset,
            "high_watermark": log.high_watermark,
            "leader_epoch": log.leader_epoch,
            "cleaner_checkpoint": checkpoint,
            "dirty_ratio": dirty,
            "must_clean_ratio": must,
            "local_size_bytes": local_bytes,
            "remote_size_bytes": self.remote.remote_log_size(tp) if tiered else 0,
            "segments": segments,
        }

    def tier(self, topic: str, partition: int) -> dict[str, list[int]]:
        """Copy rolled segments to the object store now and apply local retention."""
        log = self.log(topic, partition)
        if not log.config.remote_storage_enable:
            raise InvalidRequestError(f"topic {topic!r} has remote.storage.enable=false; set it with "
                                      f"PATCH /v1/topics/{topic}/config to tier its segments")
        # a fenced upload was counted by the RemoteLogManager (and marked so); a refusal
        # because another broker leads is counted by the API's error handler
        res = self.remote.tier(log.topic_partition)
        return {"copied": res.copied, "deleted_local": res.deleted_local}

    def become_leader(self, topic: str, partition: int, leader_epoch: int, broker_id: int) -> dict[str, Any]:
        """Register ``broker_id`` as leader at a new epoch (a leadership move); writes under
        older epochs are fenced from then on.

        When ``broker_id`` is this node's, it becomes the leader: it adopts the remote
        cleaner checkpoint (KIP-405 leader failover). For another broker this node records the move and is
        a follower of the partition from then on (its uploads, cleaning publishes, deletes
        and produce requests are refused with 409 naming the leader).
        """
        log = self.log(topic, partition)
        tp = log.topic_partition
        self.remote.become_leader(tp, leader_epoch, broker_id)
        if log.config.remote_storage_enable and broker_id == self.broker_id:
            self.cleaner.adopt_remote_checkpoint(tp, log)
        return self.partition_info(topic, partition)

    def delete_records(self, topic: str, partition: int, offset: int) -> int:
        """Kafka's DeleteRecords: the partition's records below ``offset`` (-1: the high watermark)
        are deleted; returns the new log start offset (Kafka's low watermark).

        Reads below it answer OFFSET_OUT_OF_RANGE at once; the segments wholly below it are removed
        by the next retention pass (the tiered partition's remote ones too). Only for a topic whose
        cleanup.policy contains ``delete``, as Kafka: compacted records go by tombstones (and
        erasures), never by offset. A tiered partition needs this node to lead it (the new start
        is stored, fenced, in the metadata store, where the next leader finds it).

        Raises:
            PolicyViolationError: cleanup.policy has no ``delete``.
            OffsetOutOfRangeError: ``offset`` is below -1 or above the high watermark.
            NotLeaderForPartitionError: another broker leads the tiered partition.
        """
        log = self.log(topic, partition)
        if not log.config.delete:
            raise PolicyViolationError(
                f"records of {log.topic_partition} cannot be deleted by offset: its cleanup.policy is "
                f"{log.config.get('cleanup.policy')!r}, without 'delete' (tombstones and erasures delete the "
                f"records of compacted topics)")
        if offset == -1:
            offset = log.high_watermark
        if log.config.remote_storage_enable:
            return self.remote.delete_records(log.topic_partition, offset)
        start = log.advance_log_start_offset(offset)
        self.cleaner.wakeup()  # its retention pass removes the segments below the new start
        return start

    def check_leader_for_produce(self, log: LocalLog) -> None:
        """A tiered partition another broker leads takes no records here: they could never
        be tiered (this node is fenced), so acknowledging them would lose them."""
        if log.config.remote_storage_enable:
            self.check_leader_for_read(log.topic_partition, "produce")

    def check_leader_for_read(self, tp: TopicPartition, action: str = "read") -> None:
        """A tiered partition another broker leads is not served from this node's copies (Kafka's
        NOT_LEADER_OR_FOLLOWER; 409 naming the leader on HTTP): they may hold what it compacted or erased."""
        if self.remote.is_leader_cached(tp):
            return
        current = self.metadata.leader_state(tp)
        if current is None and action == "read":
            return  # nobody leads it yet: a read registers no leader
        if (current is None or current.broker_id == self.broker_id) and self.remote.is_leader(tp):
            return
        raise NotLeaderForPartitionError(tp, self.broker_id, current.leader_epoch if current else -1,
                                         current.broker_id if current else -1, action)

    def cleaner_checkpoint(self, tp: TopicPartition) -> int | None:
        return self.cleaner.manager.all_cleaner_checkpoints().get(tp)

    def _ratios(self, log: LocalLog, checkpoint: int | None) -> tuple[float, float]:
        """The cleaner's own dirty and must-clean ratios (Kafka's LogToClean)."""
        if not log.config.compact:
            return 0.0, 0.0
        now = self.clock.milliseconds()
        offs = cleanable_offsets(log, checkpoint, now)
        ltc = LogToClean(log.topic_partition, log, offs.first_dirty_offset, offs.first_uncleanable_dirty_offset,
                         now=now)
        return ltc.cleanable_ratio, ltc.must_clean_ratio

    # ---- cleaning --------------------------------------------------------------------
    def clean(self, topic: str, partition: int) -> dict[str, Any]:
        """One cleaning round on the partition now, ignoring the dirty-ratio threshold.

        A tiered partition's round publishes shared state, so this node's leadership is
        checked against the metadata store first: a follower, or a zombie whose cached
        epoch was superseded, is refused with 409 naming the leader (instead of running a
        round that is fenced half way, or that finds nothing and looks like success)."""
        log = self.log(topic, partition)
        tp = log.topic_partition
        if log.config.remote_storage_enable and self.tiered_cleaning:
            self.remote.check_current_leader(tp, "cleaning round")
        with self._lock:
            if self._closed:
                from service.errors import ServiceUnavailableError

                raise ServiceUnavailableError("the node is shutting down; clean again after it restarts")
            self._running_cleans[tp] = self._running_cleans.get(tp, 0) + 1
        try:
            stats = self._clean_when_free(tp)
        except FencedLeaderEpochError:
            self.remote.forget_leader(tp)  # superseded: resolve the leader again before the next write
            raise
        finally:
            with self._lock:
                n = self._running_cleans.pop(tp) - 1
                if n:
                    self._running_cleans[tp] = n
        return stats

    def _clean_when_free(self, tp: TopicPartition) -> dict[str, Any]:
        # A background round on the same partition makes clean_now refuse; an operator's
        # "clean now" should wait for it and then run its own round, not fail.
        for _ in range(CLEAN_BUSY_RETRIES):
            try:
                return clean_partition(self.log_manager, tp, log_cleaner=self.cleaner).as_dict()
            except CleanerStateError:
                if self._closed:
                    raise
                state = self.cleaner.manager.state(tp)
                if state is not None and state.kind is not CleaningStateKind.IN_PROGRESS:
                    raise  # paused (being deleted) or aborted: waiting will not help
                self.clock.sleep(CLEAN_BUSY_WAIT_MS)
        return clean_partition(self.log_manager, tp, log_cleaner=self.cleaner).as_dict()

    def clean_bounded(self, topic: str, partition: int, timeout_s: float) -> tuple[dict[str, Any] | None, Any]:
        """:meth:`clean` waited for at most ``timeout_s``: ``(stats, None)``, or ``(None, job)`` when the round
        goes on past the bound as a job (service/jobs.py ``run_bounded``)."""
        self.log(topic, partition)  # unknown partitions fail now, on the caller's thread
        return self.jobs.run_bounded(topic, partition, lambda: self.clean(topic, partition), timeout_s)

    def submit_clean(self, topic: str, partition: int) -> str:
        self.log(topic, partition)  # unknown partitions fail now, not in the job
        return self.jobs.submit(topic, partition, lambda: self.clean(topic, partition)).job_id

    def submit_spark_clean(self, topic: str, partitions: Sequence[int] | None = None) -> Job:
        """One Spark offload job over ``partitions`` (default all) of a tiered topic."""
        t = self.topic(topic)
        if self.spark is None:
            raise InvalidRequestError("this node has no Spark offload: start it with --spark-master URL "
                                      "(spark://host:7077, local-cluster[2,1,1024], local[2]), or run "
                                      f"'tiercompact spark-clean {topic}' standalone against its stores")
        return self.spark.submit(t.name, list(partitions) if partitions else list(range(t.partitions)))

    def cleaner_status(self) -> dict[str, Any]:
        return self.cleaner.status()
