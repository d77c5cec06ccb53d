"""Executor-side work of the Spark offload: plain-data tasks and the pure functions that run them.

Everything here pickles and holds no live client: a task names its object store by URL and
options (:class:`StoreSpec`), its segments by plain fields (:class:`SegmentRef`), and carries
the cleaning context as ints, strings and tuples. Each executor process opens one
RemoteStorageManager per store (per pid, so a forked worker never shares a parent's boto3
client) and reuses it across tasks. No pyspark import: the driver (:mod:`cleaner.spark.job`)
wraps these functions in RDD operations, and tests call them directly.

The functions reproduce the in-process tiered round (:mod:`cleaner.tiered`) step for step:

* :func:`run_scan` is phase 1 for one segment (:func:`~cleaner.cleaner.build_offset_map_from_segments`
  without a capacity: the map is reduced across executors instead), plus what the driver needs
  to plan phase 2 without reading the segment again: every key digest present in the segment
  (to route map entries to the group that rewrites it) and the headers of its transactional
  and control batches (to replay the round's transaction state, see :class:`TxnState`);
* :func:`run_rewrite` is phase 2 for one group: fetch each source, :func:`~cleaner.cleaner.clean_into`
  it with the group's slice of the offset map, seal the segment and upload it with its indexes
  under the id the driver generated, so a retried task overwrites the same keys.
"""

from __future__ import annotations

import contextlib
import heapq
import os
import shutil
import tempfile
import time
from collections.abc import Iterable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from cleaner.cleaner import CleanContext, clean_into, finish_cleaned_segment, renamed_corruption
from cleaner.offset_map import OffsetMap
from cleaner.stats import CleanerStats
from cleaner.tiered.sources import fetch_verified
from cleaner.transactions import CleanedTransactionMetadata
from log.checkpoint import LeaderEpochCheckpointFile
from log.errors import CorruptRecordError
from log.index.bloom import key_digest
from log.index.key_index import build_segment_indexes
from log.index.txn_index import AbortedTxn, parse_txn_index
from log.locks import RANK_LEAF, ordered_lock
from log.record import ControlRecordType
from log.segment import LogSegment
from log.types import EpochEntry, TopicPartition
from metadata.types import RemoteLogSegmentId, RemoteLogSegmentMetadata, RemoteLogSegmentState
from remote import load_object_store
from remote.segment_state import rewritten_segment_state
from remote.storage_manager import IndexType, LogSegmentData, RemoteStorageManager

#: (producer id, first offset, last offset, last stable offset) of an aborted transaction
AbortedT = tuple[int, int, int, int]


def aborted_to_plain(t: AbortedTxn) -> AbortedT:
    return (t.producer_id, t.first_offset, t.last_offset, t.last_stable_offset)


def aborted_from_plain(t: AbortedT) -> AbortedTxn:
    return AbortedTxn(*t)


# ---- stores and segments as plain data --------------------------------------------------------

@dataclass(frozen=True, slots=True)
class StoreSpec:
    """An object store by URL and options (what :func:`remote.load_object_store` takes)."""

    url: str
    options: tuple[tuple[str, Any], ...] = ()

    def __post_init__(self) -> None:
        if not isinstance(self.url, str) or not self.url:
            raise ValueError("StoreSpec.url must be a non-empty string")

    @staticmethod
    def of(url: str, options: dict[str, Any] | None = None) -> StoreSpec:
        return StoreSpec(url, tuple(sorted((options or {}).items())))

    def open(self) -> RemoteStorageManager:
        """This process's RemoteStorageManager for the store (created once per pid)."""
        key = (os.getpid(), self)
        with _STORES_LOCK:
            rsm = _STORES.get(key)
            if rsm is None:
                rsm = _STORES[key] = RemoteStorageManager(load_object_store(self.url, **dict(self.options)))
            return rsm


_STORES: dict[tuple[int, StoreSpec], RemoteStorageManager] = {}
_STORES_LOCK = ordered_lock("cleaner.spark.stores", RANK_LEAF)


@dataclass(frozen=True, slots=True)
class SegmentRef:
    """The fields of a RemoteLogSegmentMetadata a task needs (keys, offsets, size, epochs)."""

    topic: str
    partition: int
    segment_id: str
    start_offset: int
    end_offset: int
    size: int
    max_timestamp_ms: int
    leader_epochs: tuple[tuple[int, int], ...]

    def __post_init__(self) -> None:
        if self.end_offset < self.start_offset or self.size < 0 or not self.leader_epochs:
            raise ValueError(f"invalid segment reference {self!r}")

    @staticmethod
    def of(md: RemoteLogSegmentMetadata) -> SegmentRef:
        tp = md.topic_partition
        return SegmentRef(tp.topic, tp.partition, md.id, md.start_offset, md.end_offset, md.segment_size_in_bytes,
                          md.max_timestamp_ms, tuple(md.segment_leader_epochs.items()))

    @property
    def topic_partition(self) -> TopicPartition:
        return TopicPartition(self.topic, self.partition)

    def metadata(self) -> RemoteLogSegmentMetadata:
        """Metadata good for object keys and fetches (state and timestamps are not the stored ones)."""
        return RemoteLogSegmentMetadata(
            RemoteLogSegmentId(self.topic_partition, self.segment_id), self.start_offset, self.end_offset,
            self.max_timestamp_ms, 0, 0, self.size, dict(self.leader_epochs))


# ---- transaction state as plain data ------------------------------------------------------------

@dataclass(frozen=True, slots=True)
class TxnBatchHeader:
    """What :class:`CleanedTransactionMetadata` reads of a batch (duck-types RecordBatch for it)."""

    producer_id: int
    last_offset: int
    is_transactional: bool
    is_control: bool
    records_count: int
    control_code: int = -1

    def control_type(self) -> ControlRecordType:
        return ControlRecordType(self.control_code)


@dataclass(frozen=True, slots=True)
class TxnState:
    """A snapshot of a CleanedTransactionMetadata (without its cleaned index), to ship to a task.

    The round's transaction state flows through the groups in log order; the driver replays it
    from the batch headers the scan tasks return and hands each rewrite task the state at its
    group's start. CleanedTransactionMetadata has no public snapshot API, so this reads its
    fields; ``tests/spark/test_tasks.py`` pins the round trip.
    """

    heap: tuple[tuple[int, int, int, AbortedT], ...] = ()
    added: tuple[AbortedT, ...] = ()
    ongoing_aborted: tuple[tuple[int, AbortedT, int], ...] = ()  # (pid, txn, last batch offset or -1)
    ongoing_committed: tuple[int, ...] = ()

    @staticmethod
    def capture(m: CleanedTransactionMetadata) -> TxnState:
        return TxnState(
            heap=tuple((f, lo, p, aborted_to_plain(t)) for f, lo, p, t in m._heap),
            added=tuple(sorted(aborted_to_plain(t) for t in m._added)),
            ongoing_aborted=tuple(sorted((pid, aborted_to_plain(e[0]), -1 if e[1] is None else e[1])
                                         for pid, e in m._ongoing_aborted.items())),
            ongoing_committed=tuple(sorted(m._ongoing_committed)))

    def restore(self) -> CleanedTransactionMetadata:
        m = CleanedTransactionMetadata()
        m._heap = [(f, lo, p, aborted_from_plain(t)) for f, lo, p, t in self.heap]
        heapq.heapify(m._heap)  # already a heap (copied in array order); cheap insurance
        m._added = {aborted_from_plain(t) for t in self.added}
        m._ongoing_aborted = {pid: [aborted_from_plain(t), None if last < 0 else last]
                              for pid, t, last in self.ongoing_aborted}
        m._ongoing_committed = set(self.ongoing_committed)
        return m


def replay_segment(m: CleanedTransactionMetadata, own_aborted: Iterable[AbortedT],
                   headers: Iterable[TxnBatchHeader]) -> None:
    """Advance ``m`` over one rewritten segment as clean_into would (driver side).

    Only transactional and control batches are replayed: other batches only move aborted
    transactions from the pending heap to "ongoing" earlier than the next transactional batch
    would, which changes no decision (offsets grow, and every reader consumes up to its own
    offset first).
    """
    m.add_aborted(aborted_from_plain(t) for t in own_aborted)
    for h in headers:
        if h.is_control:
            m.on_control_batch_read(h)  # type: ignore[arg-type]
        else:
            m.on_batch_read(h)  # type: ignore[arg-type]


# ---- an offset map over a slice of the reduced map ----------------------------------------------

class DigestOffsetMap(OffsetMap):
    """An OffsetMap holding given ``MD5(key) -> offset`` entries (a group's slice of the job's map).

    It never fills: the job's map is reduced across executors, and a rewrite task only receives
    the entries of keys its group may hold.
    """

    def __init__(self, entries: Iterable[tuple[bytes, int]] = (), latest_offset: int = -1) -> None:
        self._d: dict[bytes, int] = dict(entries)
        self._latest = latest_offset

    @property
    def slots(self) -> int:
        return max(len(self._d), 1)

    @property
    def size(self) -> int:
        return len(self._d)

    def put(self, key: bytes, offset: int) -> None:
        self._d[key_digest(key)] = offset
        self._latest = offset

    def get(self, key: bytes) -> int:
        return self._d.get(key_digest(key), -1)

    def get_all(self, keys: Sequence[bytes]) -> list[int]:
        get = self._d.get
        return [get(key_digest(k), -1) for k in keys]

    def clear(self) -> None:
        self._d.clear()
        self._latest = -1

    def digests(self) -> list[bytes]:
        return list(self._d)


# ---- stage: scan (phase 1 of a dirty segment; headers and keys of a clean one) -------------------

@dataclass(frozen=True, slots=True)
class ScanTask:
    """Read one segment. ``map_start`` set: it is a dirty segment, map its records at offsets
    >= map_start. ``with_txn_index``: also fetch its transaction index (it may have one)."""

    key: int  # the driver's segment number
    store: StoreSpec
    segment: SegmentRef
    map_start: int | None = None
    with_txn_index: bool = True
    #: leave the download on this executor's disk for the rewrite task (see :func:`keep_download`)
    keep: bool = False


@dataclass(frozen=True, slots=True)
class ScanResult:
    """What the driver needs of a segment without reading it again.

    ``keys``: every key digest present -> the latest offset >= map_start of a
    non-transactional record with that key, or -1. ``txn_keys``: (digest, offset, batch last
    offset) of transactional records at offsets >= map_start; whether they are mapped depends
    on whether their batch is aborted, which the driver decides by replaying the round's
    transaction state over ``txn_headers`` in log order (a batch's transaction may be aborted
    by a marker in a later segment).
    """

    key: int
    txn_headers: tuple[TxnBatchHeader, ...]
    aborted: tuple[AbortedT, ...]
    keys: dict[bytes, int] = field(default_factory=dict)
    txn_keys: tuple[tuple[bytes, int, int], ...] = ()
    bytes_read: int = 0


def run_scan(task: ScanTask, temp_dir: str | os.PathLike[str] | None = None) -> ScanResult:
    """Fetch the segment (and its transaction index) and walk it once."""
    ref = task.segment
    md = ref.metadata()
    rsm = task.store.open()
    aborted: tuple[AbortedT, ...] = ()
    n = 0
    if task.with_txn_index:
        data = rsm.fetch_index(md, IndexType.TRANSACTION)
        aborted = tuple(aborted_to_plain(t) for t in parse_txn_index(data, source=md.id))
        n += len(data)
    tmp = Path(tempfile.mkdtemp(prefix="tiercompact-scan-", dir=temp_dir))
    try:
        path = tmp / f"{ref.start_offset:020d}.log"
        n += fetch_verified(rsm, md, path)  # damaged on the way: fetched once more, as remote reads do
        seg = LogSegment(tmp, ref.start_offset)
        try:
            with _named(path, f"remote segment {rsm.object_key(md)}"):
                result = scan_segment(task.key, seg, task.map_start, aborted, n)
        finally:
            seg.close()
        if task.keep:
            keep_download(path, ref.segment_id)
        return result
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


# ---- a scan's download handed to the rewrite on the same host ------------------------------------
#
# Every dirty segment is read twice: by its scan and by the rewrite of its group. When both land
# on the same host (always in local and local-cluster modes; on a cluster when the scheduler
# places them together), the scan leaves its verified download in a per-user directory and the
# rewrite takes it (an atomic rename) instead of fetching the object again. A file is used at
# most once; one the rewrite never took (another host ran it, or the job failed) expires after
# KEPT_MAX_AGE_S. Kept only while the disk keeps 3x its size free.

KEPT_MAX_AGE_S = 3600.0


def _kept_dir() -> Path:
    d = Path(tempfile.gettempdir()) / f"tiercompact-spark-kept-{os.getuid()}"
    d.mkdir(mode=0o700, exist_ok=True)
    return d


def keep_download(path: Path, segment_id: str) -> bool:
    """Leave a scanned segment's file for the rewrite; returns whether it was kept."""
    try:
        d = _kept_dir()
        size = path.stat().st_size
        if shutil.disk_usage(d).free < 3 * size:
            return False
        now = time.time()
        for old in d.iterdir():  # expire what no rewrite took
            with contextlib.suppress(OSError):
                if now - old.stat().st_mtime > KEPT_MAX_AGE_S:
                    old.unlink()
        os.replace(path, d / f"{segment_id}.log")  # same file system (both under the temp dir)
        return True
    except OSError:
        return False


def take_kept(segment_id: str, dest: Path) -> bool:
    """Move the kept download of ``segment_id`` to ``dest``; False when there is none."""
    try:
        os.replace(_kept_dir() / f"{segment_id}.log", dest)
        return True
    except OSError:
        return False


def drop_kept(segment_ids: Iterable[str]) -> None:
    """Remove kept downloads no rewrite took (the driver, once the job ended; same host only)."""
    d = _kept_dir()
    for sid in segment_ids:
        with contextlib.suppress(OSError):
            (d / f"{sid}.log").unlink()


@contextmanager
def _named(path: Path, name: str) -> Iterator[None]:
    """Corruption found in the downloaded copy at ``path`` names the object it came from."""
    try:
        yield
    except CorruptRecordError as e:
        if e.source == str(path):
            raise renamed_corruption(e, name) from e
        raise


def scan_segment(key: int, seg: LogSegment, map_start: int | None, aborted: tuple[AbortedT, ...] = (),
                 bytes_read: int = 0) -> ScanResult:
    """The walk of :func:`run_scan` over a segment already on disk.

    Every batch's CRC is verified first (CorruptRecordError naming the file and byte position):
    keys read from a corrupt batch must not reach the map, as in the in-process map pass.
    """
    keys: dict[bytes, int] = {}
    txn_keys: list[tuple[bytes, int, int]] = []
    headers: list[TxnBatchHeader] = []
    source = str(seg.log_path)
    for pos, b in seg.batches():
        b.ensure_valid(source=source, position=pos)
        if b.is_transactional or b.is_control:
            code = int(b.control_type()) if b.is_control and b.records_count else -1
            headers.append(TxnBatchHeader(b.producer_id, b.last_offset, b.is_transactional, b.is_control,
                                          b.records_count, code))
        if b.is_control:
            continue
        mapping = map_start is not None and b.last_offset >= map_start
        txn = b.is_transactional
        for off, k, _has_value in b.iter_key_offsets():
            if k is None:
                continue
            d = key_digest(k)
            if mapping and off >= map_start:  # type: ignore[operator]
                if txn:
                    txn_keys.append((d, off, b.last_offset))
                    keys.setdefault(d, -1)
                else:
                    keys[d] = off  # offsets grow: the last one is the latest
            elif d not in keys:
                keys[d] = -1
    return ScanResult(key, tuple(headers), aborted, keys, tuple(txn_keys), bytes_read)


def aborted_batches(dirty: Sequence[tuple[int, int, Sequence[TxnBatchHeader]]], round_aborted: Iterable[AbortedT],
                    ) -> set[int]:
    """Last offsets of the data batches the round's map skips as aborted.

    ``dirty`` is (start offset, end offset, headers) of each dirty segment in log order;
    ``round_aborted`` the aborted transactions of the dirty range. This replays
    build_offset_map_from_segments' transaction state exactly (see :func:`replay_segment` for
    why only transactional and control batches are needed).
    """
    m = CleanedTransactionMetadata()
    m.add_aborted(aborted_from_plain(t) for t in round_aborted)
    out: set[int] = set()
    for _start, _end, headers in dirty:
        for h in headers:
            if h.is_control:
                m.on_control_batch_read(h)  # type: ignore[arg-type]
            elif m.on_batch_read(h):  # type: ignore[arg-type]
                out.add(h.last_offset)
    return out


# ---- stage: rewrite one group ----------------------------------------------------------------------

@dataclass(slots=True)  # not frozen: cleaner.cleaner.ProducerInfo declares plain (settable) attributes
class _Producer:
    last_data_offset: int
    producer_epoch: int


@dataclass(frozen=True, slots=True)
class RewriteTask:
    """Clean one group into one new segment uploaded under ``new_segment_id``.

    ``aborted[i]`` are the aborted transactions the in-process round adds before ``sources[i]``:
    collected forward over both tiers from the source's base to the next source's base (or its
    end), not only from its own index (:meth:`cleaner.tiered.RoundTxnIndexes.for_sources`);
    ``txn_state`` is the round's transaction
    state at the group's first offset; ``latest_offset`` is the mapped end - 1.
    """

    key: int  # the driver's group number
    store: StoreSpec
    new_segment_id: str
    sources: tuple[SegmentRef, ...]
    aborted: tuple[tuple[AbortedT, ...], ...]
    now_ms: int
    delete_retention_ms: int
    upper_bound_of_round: int
    latest_offset: int
    active_producers: tuple[tuple[int, int, int], ...]  # (producer id, last data offset, epoch)
    txn_state: TxnState
    fpp: float
    index_interval_bytes: int
    io_buffer_size: int
    broker_id: int = 0
    #: take a source from this host's kept scan downloads when there (see :func:`keep_download`)
    use_kept: bool = True

    def __post_init__(self) -> None:
        if not self.sources or len(self.aborted) != len(self.sources):
            raise ValueError("a rewrite task needs its sources and one aborted-transaction list per source")

    @property
    def start_offset(self) -> int:
        return self.sources[0].start_offset

    @property
    def end_offset(self) -> int:
        return self.sources[-1].end_offset

    def leader_epochs(self) -> dict[int, int]:
        """The group's epoch -> first offset map (the smallest start of each epoch)."""
        epochs: dict[int, int] = {}
        for s in self.sources:
            for e, off in s.leader_epochs:
                epochs[e] = min(off, epochs.get(e, off))
        return epochs

    def new_metadata(self, size: int, max_timestamp_ms: int, event_timestamp_ms: int,
                     key_index_bytes: int | None = None) -> RemoteLogSegmentMetadata:
        tp = self.sources[0].topic_partition
        return RemoteLogSegmentMetadata(
            remote_log_segment_id=RemoteLogSegmentId(tp, self.new_segment_id), start_offset=self.start_offset,
            end_offset=self.end_offset, max_timestamp_ms=max_timestamp_ms, broker_id=self.broker_id,
            event_timestamp_ms=event_timestamp_ms, segment_size_in_bytes=size,
            segment_leader_epochs=self.leader_epochs(), state=RemoteLogSegmentState.COPY_SEGMENT_STARTED,
            key_index_bytes=key_index_bytes)


@dataclass(frozen=True, slots=True)
class RewriteResult:
    key: int
    new_segment_id: str
    start_offset: int
    end_offset: int
    size: int
    max_timestamp_ms: int
    bloom: bytes
    bytes_downloaded: int
    bytes_uploaded: int
    messages_read: int
    messages_written: int
    segments_cleaned: int
    #: records removed by reason (superseded, tombstone, aborted, marker), for the round report
    removed: tuple[int, int, int, int] = (0, 0, 0, 0)
    #: object-store calls made: one per source fetched, two state reads, one per object written
    requests: int = 0
    #: size of the key index uploaded beside the new segment (the driver records it in its metadata)
    key_index_bytes: int | None = None


def run_rewrite(task: RewriteTask, entries: Iterable[tuple[bytes, int]],
                temp_dir: str | os.PathLike[str] | None = None) -> RewriteResult:
    """Clean ``task``'s group with the map slice ``entries`` and upload the result.

    Idempotent: a retry writes the same bytes under the same keys.
    """
    rsm = task.store.open()
    omap = DigestOffsetMap(entries, latest_offset=task.latest_offset)
    txn = task.txn_state.restore()
    producers = {pid: _Producer(last, epoch) for pid, last, epoch in task.active_producers}
    ctx = CleanContext(now_ms=task.now_ms, delete_retention_ms=task.delete_retention_ms,
                       upper_bound_of_round=task.upper_bound_of_round, active_producers=producers,
                       txn_metadata=txn, io_buffer_size=task.io_buffer_size)
    stats = CleanerStats()
    downloaded = 0
    tmp = Path(tempfile.mkdtemp(prefix="tiercompact-rewrite-", dir=temp_dir))
    try:
        src_dir, out_dir = tmp / "src", tmp / "out"
        src_dir.mkdir()
        dest = LogSegment(out_dir, task.start_offset, index_interval_bytes=task.index_interval_bytes, create=True)
        txn.cleaned_index = dest.txn_index
        try:
            for ref, aborted in zip(task.sources, task.aborted, strict=True):
                path = src_dir / f"{ref.start_offset:020d}.log"
                if not (task.use_kept and take_kept(ref.segment_id, path)):
                    downloaded += fetch_verified(rsm, ref.metadata(), path)  # damaged: fetched once more
                src = LogSegment(src_dir, ref.start_offset, index_interval_bytes=task.index_interval_bytes)
                try:
                    txn.add_aborted(aborted_from_plain(t) for t in aborted)
                    with _named(path, f"remote segment {rsm.object_key(ref.metadata())}"):
                        clean_into(src, dest, omap, ctx, stats)
                finally:
                    src.close()
                    for f in src.files():
                        f.unlink(missing_ok=True)
            finish_cleaned_segment(dest, task.now_ms)
            max_ts = (dest.max_timestamp_so_far if dest.max_timestamp_so_far >= 0
                      else max(s.max_timestamp_ms for s in task.sources))
            bloom_filter, key_index = build_segment_indexes(dest, task.fpp)  # one scan: both key indexes
            key_index_data = key_index.to_bytes()
            md = task.new_metadata(dest.size, max_ts, task.now_ms, key_index_bytes=len(key_index_data))
            for index in (dest.offset_index, dest.time_index):  # an empty index is still uploaded
                index.flush()
                index.path.touch(exist_ok=True)
            txn_path = dest.txn_index.path if dest.txn_index.entries else None
            epochs = [EpochEntry(e, o) for e, o in sorted(task.leader_epochs().items())]
            # KIP-405 LogSegmentData: the replaced segments' producer snapshot and epoch checkpoint
            checkpoint, snapshot = rewritten_segment_state(rsm, [s.metadata() for s in task.sources],
                                                           LeaderEpochCheckpointFile.render(epochs))
            rsm.copy_log_segment_data(md, LogSegmentData(
                dest.log_path, dest.offset_index.path, dest.time_index.path, txn_path, checkpoint, snapshot,
                key_index=key_index_data))
            bloom = bloom_filter.to_bytes()
            uploaded = (dest.size + dest.offset_index.size_in_bytes + dest.time_index.size_in_bytes
                        + len(key_index_data))
            return RewriteResult(task.key, task.new_segment_id, task.start_offset, task.end_offset, dest.size,
                                 max_ts, bloom, downloaded, uploaded, stats.messages_read,
                                 stats.messages_written, len(task.sources),
                                 removed=(stats.removed_superseded, stats.removed_tombstone, stats.removed_aborted,
                                          stats.removed_marker),
                                 requests=len(task.sources) + 2 + 5 + (txn_path is not None)
                                 + (snapshot is not None), key_index_bytes=len(key_index_data))
        finally:
            txn.cleaned_index = None
            dest.close()
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
