"""How a job's work is cut into Spark tasks: the split path's skip decisions and segment groups,
the rewrite bins, and the executor-side wrapper each task runs (module level: pickled by reference)."""

from __future__ import annotations

import dataclasses
import logging
import os
import signal
from collections.abc import Iterable, Iterator, Sequence
from typing import Any

import numpy as np
from pyspark import TaskContext

from cleaner.spark.partition_round import (
    PartitionRoundResult,
    PartitionRoundTask,
    run_partition_round,
)
from cleaner.spark.publish import JobPartition
from cleaner.spark.tasks import (
    RewriteResult,
    RewriteTask,
    ScanResult,
    ScanTask,
    StoreSpec,
    run_rewrite,
    run_scan,
)
from cleaner.tiered import group_remote_segments
from log.errors import TiercompactError
from log.index.key_index import KeyIndex, stable_hashes
from metadata.types import RemoteLogSegmentMetadata
from remote.storage_manager import IndexType

logger = logging.getLogger(__name__)


def maybe_fail(stage: str, inject: frozenset[str]) -> None:
    if stage in inject or f"kill:{stage}" in inject:
        ctx = TaskContext.get()
        if ctx is not None and ctx.attemptNumber() == 0:
            if f"kill:{stage}" in inject:
                os.kill(os.getpid(), signal.SIGKILL)
            raise RuntimeError(f"injected failure of the first attempt of a {stage} task")


def scan_stage(task: ScanTask, inject: frozenset[str]) -> ScanResult:
    res = run_scan(task)
    maybe_fail("scan", inject)
    return res


def round_stage(task: PartitionRoundTask, inject: frozenset[str]) -> PartitionRoundResult:
    res = run_partition_round(task)
    maybe_fail("round", inject)  # after the uploads: the retry uploads under new ids, the sweep ends these
    ctx = TaskContext.get()
    return res if ctx is None else dataclasses.replace(res, attempt=ctx.attemptNumber())


def rewrite_stage(task: RewriteTask, entries: Iterable[tuple[bytes, int]], inject: frozenset[str]) -> RewriteResult:
    res = run_rewrite(task, entries)
    maybe_fail("rewrite", inject)  # after the upload: the retry overwrites the same keys
    return res


def rewrite_bin_stage(groups: Sequence[int], entries: Iterable[tuple[int, tuple[bytes, int]]],
                      tasks: dict[int, RewriteTask], inject: frozenset[str]) -> list[RewriteResult]:
    """One Spark task: the rewrite of each group of a bin, with its slice of the map."""
    by_group: dict[int, list[tuple[bytes, int]]] = {g: [] for g in groups}
    for g, e in entries:
        by_group[g].append(e)
    out = []
    for g in groups:
        out.append(rewrite_stage(tasks[g], by_group.pop(g), inject))
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


def map_combiner(v: tuple[int, int]) -> tuple[int, set[int]]:
    return v[1], {v[0]}


def map_merge_value(acc: tuple[int, set[int]], v: tuple[int, int]) -> tuple[int, set[int]]:
    acc[1].add(v[0])
    return (acc[0] if acc[0] >= v[1] else v[1]), acc[1]


def map_merge_combiners(a: tuple[int, set[int]], b: tuple[int, set[int]]) -> tuple[int, set[int]]:
    return (a[0] if a[0] >= b[0] else b[0]), a[1] | b[1]


def segment_groups(p: JobPartition, hit_segments: set[int], now: int, *, bloom_skip: bool) -> list[list[int]]:
    """Skip decisions and grouping, as TieredCleaner._rewrite makes them."""
    runs: list[list[RemoteLogSegmentMetadata]] = [[]]
    number = {md.id: i for i, md in p.segs.items()}
    for i, md in p.segs.items():
        bf = p.blooms[i]
        skip = (bloom_skip and p.is_clean_region(md) and bf is not None
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


def key_index_hits(sc: Any, store: StoreSpec, owner: dict[int, JobPartition], hits: set[int],
                   offset_map: Any, broadcasts: list[Any]) -> set[int]:
    """The bloom hits whose exact key index holds a mapped digest (or that have no usable index).

    The driver fetches the key index of each hit segment (about 1% of its bytes) and
    broadcasts the hashes; each map partition looks its digests up in the indexes of the
    segments its bloom probes hit."""
    rsm = store.open()
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
