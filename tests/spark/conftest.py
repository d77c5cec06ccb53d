"""One Spark session per test process (each xdist worker of ``make test`` has its own), and tiered
partitions to clean twice (in-process and Spark)."""

from __future__ import annotations

import random
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from cleaner.tiered import TieredCleaner
from log.clock import MockClock
from log.local_log import RecordSpec
from log.record import CompressionType, ControlRecordType
from log.types import TopicPartition
from tests.tiered.conftest import TIERED, World

#: local[2] with 2 attempts per task, so an injected first-attempt failure is retried
SPARK_MASTER = "local[2,2]"
START_MS = 1_700_000_000_000


#: how a job runs a partition: whole (one partition round per task) or split across tasks
MODES: dict[str, dict[str, Any]] = {"whole": {}, "split": {"split_partition_bytes": 0}}
#: the stages whose first task attempt fails (or dies) in each mode
TASK_STAGES = {"whole": frozenset({"round"}), "split": frozenset({"scan", "rewrite"})}


@pytest.fixture(params=sorted(MODES))
def mode(request: pytest.FixtureRequest) -> str:
    """Both ways a job runs a partition (tests that pin one pass ``MODES[...]`` themselves)."""
    return str(request.param)


def mode_config(mode: str, **kw: Any) -> Any:
    from cleaner.spark.job import SparkCleanConfig

    return SparkCleanConfig(**{"master": SPARK_MASTER, **MODES[mode], **kw})


@pytest.fixture(scope="session")
def spark() -> Iterator[Any]:
    from cleaner.spark.job import SparkCleanConfig, build_session

    session = build_session(SparkCleanConfig(master=SPARK_MASTER, app_name="tiercompact-tests",
                                             max_task_failures=2, shuffle_partitions=4))
    try:
        yield session
    finally:
        session.stop()


def s3_store(moto_url: str) -> tuple[str, dict[str, Any]]:
    """A fresh bucket in moto's HTTP server: (url, options)."""
    import boto3

    bucket = f"b-{uuid.uuid4().hex[:12]}"
    boto3.client("s3", endpoint_url=moto_url, region_name="us-east-1", aws_access_key_id="testing",
                 aws_secret_access_key="testing").create_bucket(Bucket=bucket)
    return f"s3://{bucket}/segments", {"endpoint_url": moto_url, "region": "us-east-1",
                                        "access_key_id": "testing", "secret_access_key": "testing"}


def make_world(root: Path, store: tuple[str, dict[str, Any]], partitions: int = 1,
               config: dict[str, Any] | None = None) -> World:
    """A World whose topic ``t`` has ``partitions`` partitions (World's TP is t-0)."""
    clock = MockClock(START_MS)
    w = World(root, clock, store, f"sqlite:///{root / 'metadata.db'}", create=False)
    w.lm.create_topic("t", partitions, {**TIERED, **(config or {})})
    w.store_spec = store  # type: ignore[attr-defined]
    return w


def partitions_of(w: World) -> list[TopicPartition]:
    return sorted(tp for tp in w.lm.all_logs())


class Workload:
    """A seeded mix of updates, tombstones, keyless records, idempotent producers and committed
    and aborted transactions (some spanning a roll), in multi-record batches of mixed codecs."""

    def __init__(self, seed: int, keys: int = 30, pid_base: int = 0) -> None:
        self.rnd = random.Random(seed)
        self.keys = keys
        self.pid_base = pid_base
        self.seq: dict[int, int] = {}

    def _records(self, n: int, clock: MockClock, keyless: float = 0.05) -> list[RecordSpec]:
        rnd = self.rnd
        out = []
        for _ in range(n):
            key = None if rnd.random() < keyless else f"k{rnd.randrange(self.keys):03d}".encode()
            value = None if key is not None and rnd.random() < 0.12 else f"v{rnd.random():.8f}".encode() * 3
            out.append(RecordSpec(key, value, timestamp=clock.milliseconds()))
        return out

    def _append(self, w: World, tp: TopicPartition, pid: int = -1, transactional: bool = False) -> None:
        log = w.lm.get_log(tp)
        specs = self._records(self.rnd.randint(1, 6), w.clock)
        codec = self.rnd.choice([CompressionType.NONE, CompressionType.NONE, CompressionType.LZ4,
                                 CompressionType.GZIP])
        if pid < 0:
            log.append_records(specs, compression=codec)
            return
        seq = self.seq.get(pid, 0)
        log.append_records(specs, compression=codec, producer_id=pid, producer_epoch=0, base_sequence=seq,
                           transactional=transactional)
        self.seq[pid] = seq + len(specs)

    def round(self, w: World, tp: TopicPartition, batches: int = 12) -> None:
        """Append a segment's worth (or two) of batches to ``tp``, then roll and tier."""
        rnd = self.rnd
        log = w.lm.get_log(tp)
        spanning: tuple[int, ControlRecordType] | None = None
        for i in range(batches):
            kind = rnd.random()
            if kind < 0.45:
                self._append(w, tp)
            elif kind < 0.6:
                self._append(w, tp, pid=self.pid_base + rnd.choice([10, 11]))
            else:
                pid = self.pid_base + rnd.choice([20, 21, 22])
                if spanning is not None and spanning[0] == pid:
                    continue
                for _ in range(rnd.randint(1, 3)):
                    self._append(w, tp, pid=pid, transactional=True)
                outcome = ControlRecordType.ABORT if rnd.random() < 0.4 else ControlRecordType.COMMIT
                if spanning is None and i < batches - 2 and rnd.random() < 0.3:
                    spanning = (pid, outcome)  # closed after a roll: the transaction spans segments
                    log.roll()
                else:
                    log.append_marker(pid, 0, outcome)
            w.clock.advance(rnd.randint(1, 50))
        if spanning is not None:
            log.append_marker(spanning[0], 0, spanning[1])
        log.roll()
        w.clock.advance(1)
        w.rlm.tier(tp)


def build(world: World, seed: int, rounds: int = 5) -> None:
    for tp in partitions_of(world):
        wl = Workload(seed * 1000 + tp.partition)
        for _ in range(rounds):
            wl.round(world, tp)


def clean_in_process(w: World, tp: TopicPartition) -> int:
    cleaner: TieredCleaner = w.cleaner(dedupe=8 << 20)  # never fills with these workloads
    end, _stats = cleaner.clean(w.lm.get_log(tp), leader_epoch=w.rlm.leader_epoch(tp),
                                local_checkpoint=w.checkpoints.get(tp))
    w.checkpoints[tp] = end
    return end


def spark_job(spark: Any, w: World, **kw: Any) -> Any:
    from cleaner.spark.job import SparkCleanJob

    url, opts = w.store_spec  # type: ignore[attr-defined]
    return SparkCleanJob(spark, logs=w.lm.get_log, rlmm=w.rlmm, store_url=url, store_options=opts,
                         leader_epoch=w.rlm.leader_epoch, checkpoint=w.checkpoints.get,
                         write_checkpoint=w.checkpoints.__setitem__, broker_id=w.broker_id, clock=w.clock, **kw)


def remote_image(w: World, tp: TopicPartition) -> list[tuple[Any, ...]]:
    """Every referenced remote segment of ``tp`` as (start, end, size, log bytes, index bytes, bloom)."""
    from remote.storage_manager import IndexType

    out = []
    for md in w.rlmm.list_remote_log_segments(tp):
        idx = tuple(w.rsm.fetch_index(md, t) for t in (IndexType.OFFSET, IndexType.TIMESTAMP, IndexType.TRANSACTION,
                                                         IndexType.LEADER_EPOCH))
        out.append((md.start_offset, md.end_offset, md.segment_size_in_bytes, md.max_timestamp_ms,
                    dict(md.segment_leader_epochs), w.rsm.fetch_log_segment(md, 0), idx,
                    w.rlmm.get_bloom_filter(md.remote_log_segment_id)))
    return out
