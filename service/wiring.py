"""The node's builder: assembles, from a ServiceConfig, the collaborators a Node is given.

:func:`build_parts` opens the Scheduler and LogManager (local logs, recovered on open, the
data-dir lock held), removes temp files a ``kill -9`` left, opens the object store (behind a
circuit breaker, counting bytes for metrics), the RemoteStorageManager and metadata store, the
LogCleaner and RemoteLogManager (each asks the other one question, answered through a closure
over the other), the job registry and, with a ``spark_master``, the Spark offload handed to
the cleaner as its tiered pool's offload hook. Nothing is wired by setting attributes later.
"""

from __future__ import annotations

import logging
import os
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from cleaner.config import CleanerConfig
from cleaner.log_cleaner import LogCleaner
from cleaner.ports import LogPartitions
from cleaner.tiered import TieredContext
from log.clock import Clock
from log.locks import RANK_LEAF, ordered_lock
from log.log_manager import LogManager
from log.scheduler import Scheduler
from log.types import TopicPartition
from metadata import load_metadata_manager
from metadata.store import MetadataStore
from remote import load_object_store
from remote.breaker import BreakerObjectStore, CircuitBreaker
from remote.log_manager import RemoteLogManager
from remote.object_store import ForwardingObjectStore, ObjectStore, PutData
from remote.storage_manager import RemoteStorageManager
from service import topic_sync
from service.config import ServiceConfig, store_options
from service.jobs import JobRegistry
from service.spark_offload import SparkOffloader

logger = logging.getLogger(__name__)

REMOTE_CACHE_DIR = "remote-cache"
TIERED_TEMP_DIR = "tiered-tmp"  # the tiered cleaner's downloads and output (emptied at each round)


class CountingObjectStore(ForwardingObjectStore):
    """Forwards to a store and counts the bytes moved (remote_bytes_*_total metrics)."""

    def __init__(self, inner: ObjectStore) -> None:
        super().__init__(inner)
        self._lock = ordered_lock("service.counting_store", RANK_LEAF)
        self.bytes_uploaded = 0
        self.bytes_downloaded = 0

    def _up(self, n: int) -> int:
        with self._lock:
            self.bytes_uploaded += n
        return n

    def _down(self, n: int) -> int:
        with self._lock:
            self.bytes_downloaded += n
        return n

    def put(self, key: str, data: PutData) -> int:
        return self._up(self.inner.put(key, data))

    def get(self, key: str) -> bytes:
        data = self.inner.get(key)
        self._down(len(data))
        return data

    def get_range(self, key: str, start: int, end_exclusive: int) -> bytes:
        data = self.inner.get_range(key, start, end_exclusive)
        self._down(len(data))
        return data

    def get_to_file(self, key: str, path: str | os.PathLike[str], start: int = 0, end: int | None = None) -> int:
        return self._down(self.inner.get_to_file(key, path, start, end))


@dataclass
class NodeParts:
    """Everything a Node runs, built and connected (see the module docstring)."""

    scheduler: Scheduler
    log_manager: LogManager
    store_breaker: CircuitBreaker
    object_store: CountingObjectStore
    storage_manager: RemoteStorageManager
    metadata: MetadataStore
    cleaner: LogCleaner
    remote: RemoteLogManager
    jobs: JobRegistry
    spark: SparkOffloader | None


def cleaner_config(config: ServiceConfig) -> CleanerConfig:
    kwargs: dict[str, Any] = {"threads": max(config.cleaner_threads, 1), "enable": config.cleaner_threads > 0,
                              "dedupe_buffer_size": config.dedupe_buffer_size, "backoff_ms": config.cleaner_backoff_ms}
    if config.io_max_bytes_per_second is not None:
        kwargs["io_max_bytes_per_second"] = config.io_max_bytes_per_second
    return CleanerConfig(**kwargs)


def remove_temp_files(data_dir: Path, store: ObjectStore) -> None:
    """Temp files a ``kill -9`` left: the tiered cleaner's work dir (emptied at each round
    anyway) and the file object store's dead uploads. Runs once the data-dir lock is held
    and before any background thread starts. The remote cache dir (REMOTE_CACHE_DIR, beside
    TIERED_TEMP_DIR, never inside it) is not emptied: the read cache re-adopts its immutable
    entries, key indexes included, and deletes only its own temp and damaged files."""
    tmp = data_dir / TIERED_TEMP_DIR
    if tmp.exists():
        shutil.rmtree(tmp, ignore_errors=True)
        logger.info("removed %s left by the previous run", tmp)
    clear_temp = getattr(store, "clear_temp", None)
    if callable(clear_temp):
        removed = clear_temp()
        if removed:
            logger.info("removed %d temp files of interrupted uploads from %s", removed, store.url)


def build_parts(config: ServiceConfig, clock: Clock) -> NodeParts:
    """Open the stores and build the node's collaborators (local recovery runs as logs open)."""
    data_dir = config.data_dir
    scheduler = Scheduler(clock, name="tiercompact-delete-scheduler")
    log_manager = LogManager(data_dir, clock=clock, scheduler=scheduler,
                             page_cache_window=config.page_cache_window_bytes)
    inner_store = load_object_store(config.remote_url, **store_options(config))
    remove_temp_files(data_dir, inner_store)
    # the breaker fails calls fast once the store is known to be down (503 + Retry-After)
    breaker = CircuitBreaker(failure_threshold=config.remote_breaker_failures,
                             cooldown_s=config.remote_breaker_cooldown_ms / 1000)
    object_store = CountingObjectStore(BreakerObjectStore(inner_store, breaker))
    storage_manager = RemoteStorageManager(object_store, clock=clock, max_attempts=config.remote_retry_attempts,
                                           max_total_ms=config.remote_timeout_ms)
    metadata = load_metadata_manager(config.metadata_url, lock_timeout_ms=config.metadata_lock_timeout_ms,
                                     statement_timeout_ms=config.metadata_statement_timeout_ms)
    spark: SparkOffloader | None = None

    def leader_epoch(tp: TopicPartition) -> int:
        return remote.leader_epoch(tp)

    def cleaner_checkpoint(tp: TopicPartition) -> int | None:
        return cleaner.manager.all_cleaner_checkpoints().get(tp)

    def offload(ltc: Any) -> bool:
        return spark is not None and spark.offer(ltc)

    tiered = TieredContext(rlmm=metadata, rsm=storage_manager, leader_epoch=leader_epoch,
                           temp_dir=data_dir / TIERED_TEMP_DIR, broker_id=config.broker_id,
                           threads=config.tiered_cleaner_threads)
    # the Spark offload (with a spark_master): tiered-pool rounds and API requests as jobs
    with_spark = bool(config.spark_master)
    cleaner = LogCleaner(cleaner_config(config), log_manager, clock=clock, tiered=tiered,
                         offload=offload if with_spark else None)
    remote = RemoteLogManager(log_manager, metadata, storage_manager, broker_id=config.broker_id, clock=clock,
                              cache_dir=data_dir / REMOTE_CACHE_DIR, cache_bytes=config.remote_cache_bytes,
                              cleaner_checkpoint=cleaner_checkpoint, request_timeout_ms=config.request_timeout_ms,
                              topic_deleted=lambda topic: metadata.topic_deleted_ms(topic) is not None)
    jobs = JobRegistry()
    # topic configs live in the metadata store, shared by every node and Spark job
    topic_sync.sync_at_start(log_manager, metadata)
    if with_spark:
        spark = SparkOffloader(config, jobs=jobs, partitions=LogPartitions(log_manager), manager=cleaner.manager,
                               reporter=cleaner.reporter, wakeup=cleaner.wakeup, leadership=remote,
                               metadata=metadata, clock=clock)
    return NodeParts(scheduler=scheduler, log_manager=log_manager, store_breaker=breaker, object_store=object_store,
                     storage_manager=storage_manager, metadata=metadata, cleaner=cleaner, remote=remote, jobs=jobs,
                     spark=spark)
