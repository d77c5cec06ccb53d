"""The Spark side of a job: its configuration, the session, and shipping tiercompact's packages to
the executors."""

from __future__ import annotations

import contextlib
import logging
import os
import sys
import tempfile
import zipfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from pyspark.sql import SparkSession

PACKAGES = ("log", "metadata", "remote", "cleaner")


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
    #: test the exact key index of clean segments the bloom filter cannot rule out
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
