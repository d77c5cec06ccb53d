"""A whole tiered round of one partition as one Spark task: the in-process round's own code on
an executor, its metadata writes handed back to the driver.

Most jobs clean many partitions of moderate size: there, spreading one partition's map over a
shuffle costs more than it saves (every key crosses the network as a pickled Python tuple, twice).
A *partition round* runs :meth:`cleaner.tiered.TieredCleaner.clean` itself on an executor, with
the compiled record kernels and a :class:`~cleaner.offset_map.CompactOffsetMap`, so its output is
the in-process round's by construction: same plan, same map passes, same skip tests (bloom
filter, then the exact key index), same grouping, same bytes. Partitions run in parallel across
the cluster; the driver (:mod:`cleaner.spark.job`) decides which partitions run this way and which
are split across tasks.

What the executor gets, as plain data (:class:`PartitionRoundTask`): the driver's plan, the topic
config, the active producers, the transaction-index entries of the partition's local segments
above the remote tier (an ABORT marker of a remote transaction may still sit there), and the
bloom filters of the plan's segments. It reads segments and key indexes from the object store
and uploads new segments under ids carrying the job's tag (:mod:`remote.orphans` leases protect
them by that prefix, and sweep what a failed attempt left). Every metadata write is recorded
(:class:`~cleaner.round_metadata.DeferredRoundMetadata`) and replayed by the driver under the
epoch it captured at the job's start, so a zombie's job is fenced exactly as an in-process round.

No pyspark import: tests call :func:`run_partition_round` directly.
"""

from __future__ import annotations

import contextlib
import functools
import os
import shutil
import tempfile
import uuid
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from cleaner.config import CleanerConfig
from cleaner.offset_map import CompactOffsetMap
from cleaner.retention import ProducerInfo
from cleaner.round_metadata import DeferredRoundMetadata, RoundWrites
from cleaner.stats import CleanerStats
from cleaner.tiered import TieredCleaner, TieredRoundPlan
from cleaner.tiered.view import LinkedCopy, PartitionView, partition_view
from log.clock import SYSTEM_CLOCK
from log.config import LogConfig
from log.index.txn_index import AbortedTxn, TxnIndexLink
from log.local_log import LocalLog
from log.producer_state import ProducerStateEntry
from log.types import TopicPartition
from metadata.types import RemoteLogSegmentId, RemoteLogSegmentMetadata

#: (producer id, last data offset, producer epoch)
ProducerT = tuple[int, int, int]
#: (producer id, first offset, last offset, last stable offset) of an aborted transaction
AbortedT = tuple[int, int, int, int]
#: a local segment above the remote tier: (where its part above the remote tier starts, its
#: aborted transactions)
LocalTxnSegment = tuple[int, tuple[AbortedT, ...]]

#: hex digits of a segment id that carry the job's tag (the rest stay random)
TAG_LENGTH = 12


def tagged_segment_id(tag: str) -> Any:
    """A segment id factory: ``tag`` followed by random hex, 32 digits in all."""
    if len(tag) != TAG_LENGTH or any(c not in "0123456789abcdef" for c in tag):
        raise ValueError(f"a segment tag is {TAG_LENGTH} lowercase hex digits, got {tag!r}")

    def new(tp: TopicPartition) -> RemoteLogSegmentId:
        return RemoteLogSegmentId(tp, tag + uuid.uuid4().hex[TAG_LENGTH:])
    return new


@dataclass(frozen=True, slots=True)
class PartitionRoundTask:
    """One partition's round, as the driver planned it (see the module docstring)."""

    key: int
    store: Any  # cleaner.spark.tasks.StoreSpec (imported lazily: that module imports this one's users)
    plan: TieredRoundPlan
    config: tuple[tuple[str, Any], ...]  # the topic config's overrides
    producers: tuple[ProducerT, ...]
    local_txn_segments: tuple[LocalTxnSegment, ...]
    blooms: tuple[tuple[str, bytes], ...]
    now_ms: int
    segment_tag: str
    broker_id: int = 0
    dedupe_buffer_size: int = 128 * 1024 * 1024
    io_buffer_size: int = 512 * 1024
    bloom_skip: bool = True
    use_key_index: bool = True
    #: where the round downloads and writes on the executor (None: see :func:`scratch_root`)
    temp_dir: str | None = None

    def __post_init__(self) -> None:
        tagged_segment_id(self.segment_tag)  # validates the tag

    @property
    def topic_partition(self) -> TopicPartition:
        return self.plan.topic_partition

    @property
    def source_bytes(self) -> int:
        """The bytes the round may read: every referenced segment below its upper bound."""
        return sum(s.segment_size_in_bytes for s in self.plan.segments if s.start_offset < self.plan.upper)


@dataclass(frozen=True, slots=True)
class PartitionRoundResult:
    key: int
    #: the new checkpoint (below the plan's upper bound when the offset map filled)
    end: int
    stats: CleanerStats
    writes: RoundWrites
    #: the Spark task attempt that made this result (0: the first, so no earlier attempt of its
    #: task uploaded anything); None when not run by a Spark task
    attempt: int | None = None


# ---- the partition as an executor sees it -------------------------------------------------------

_PLANNED = "a round on an executor runs the plan its driver made; it never plans"


@dataclass
class ShippedPartition:
    """The partition as a round on an executor sees it (a :class:`~cleaner.tiered.view.PartitionView`):
    its config and producers, its local segments' transaction indexes, no local copies of remote
    data, nothing to delete. The bounds are never read: the driver shipped the plan."""

    topic_partition: TopicPartition
    config: LogConfig
    producers: dict[int, ProducerStateEntry]
    #: the local segments above the remote tier: (start, aborted transactions)
    local: list[tuple[int, list[AbortedTxn]]] = field(default_factory=list)

    @staticmethod
    def of(task: PartitionRoundTask) -> ShippedPartition:
        return ShippedPartition(
            task.topic_partition, LogConfig.from_dict(dict(task.config)),
            {pid: ProducerStateEntry(pid, epoch, last_data_offset=last) for pid, last, epoch in task.producers},
            [(start, [AbortedTxn(*t) for t in txns]) for start, txns in task.local_txn_segments])

    @property
    def log_end_offset(self) -> int:
        raise RuntimeError(_PLANNED)

    @property
    def last_stable_offset(self) -> int:
        raise RuntimeError(_PLANNED)

    @property
    def active_base_offset(self) -> int:
        raise RuntimeError(_PLANNED)

    def local_bytes_above(self, remote_end: int) -> int:
        return 0

    def active_producers(self) -> Mapping[int, ProducerInfo]:
        return self.producers

    def local_txn_links(self, remote_end: int) -> list[TxnIndexLink]:
        return [(max(start, remote_end), functools.partial(list, txns)) for start, txns in self.local]

    def local_copy_txns(self, md: RemoteLogSegmentMetadata) -> list[AbortedTxn] | None:
        return None  # an executor holds no local copy of a remote segment

    def link_local_copy(self, md: RemoteLogSegmentMetadata, into: Path) -> LinkedCopy | None:
        return None

    def drop_local_copies_below(self, end: int) -> list[int]:
        return []  # the driver drops the node's stale local copies once the publish landed


def local_txn_segments(log: PartitionView | LocalLog, remote_end: int) -> tuple[LocalTxnSegment, ...]:
    """What a round on an executor needs of the driver's partition: the transaction index of
    each local segment reaching above the remote tier (driver side)."""
    return tuple((start, tuple((t.producer_id, t.first_offset, t.last_offset, t.last_stable_offset)
                               for t in load()))
                 for start, load in partition_view(log).local_txn_links(remote_end))


# ---- the task ----------------------------------------------------------------------------------------

def scratch_root(temp_dir: str | Path | None = None) -> str | None:
    """Where a round on this executor keeps its downloads: ``temp_dir`` if given, else the first
    of Spark's local dirs (``SPARK_LOCAL_DIRS``, set on cluster executors), else the system's
    temporary directory (None)."""
    if temp_dir is not None:
        return str(temp_dir)
    local = [d for d in os.environ.get("SPARK_LOCAL_DIRS", "").split(",") if d]
    return local[0] if local else None


@contextlib.contextmanager
def _scratch(temp_dir: str | Path | None) -> Iterator[Path]:
    tmp = Path(tempfile.mkdtemp(prefix="tiercompact-round-", dir=scratch_root(temp_dir)))
    try:
        yield tmp
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def run_partition_round(task: PartitionRoundTask, temp_dir: str | Path | None = None) -> PartitionRoundResult:
    """Run the planned round on this executor (see the module docstring).

    A failure removes what the round uploaded (TieredCleaner's own cleanup) and raises; Spark
    retries the task, and the driver's sweep removes anything a killed attempt left.
    """
    rsm = task.store.open()
    meta = DeferredRoundMetadata(dict(task.blooms))
    partition = ShippedPartition.of(task)
    config = CleanerConfig(dedupe_buffer_size=task.dedupe_buffer_size, io_buffer_size=task.io_buffer_size)
    with _scratch(temp_dir if temp_dir is not None else task.temp_dir) as tmp:
        cleaner = TieredCleaner(meta, rsm, CompactOffsetMap(config.dedupe_buffer_per_thread), config,
                                temp_dir=tmp, broker_id=task.broker_id, clock=SYSTEM_CLOCK,
                                bloom_skip=task.bloom_skip, use_key_index=task.use_key_index,
                                segment_ids=tagged_segment_id(task.segment_tag))
        end, stats = cleaner.clean(partition, leader_epoch=task.plan.leader_epoch,
                                   local_checkpoint=task.plan.first_dirty_offset, now=task.now_ms, plan=task.plan)
    stats.clock = SYSTEM_CLOCK
    return PartitionRoundResult(task.key, end, stats, meta.writes())
