"""Dry runs: what a cleaning round on a partition would do, with nothing changed.

``POST .../clean?dry_run=true`` answers :func:`dry_run`'s plan: the segments the round would
download, rewrite and skip (and the test that skipped each), the estimated bytes down and up,
and the records and bytes it would reclaim (by reason).

The plan runs the round's own code, so it cannot drift from what a round does:

* **local**: the cleanable range and the map pass as :meth:`~cleaner.cleaner.Cleaner.do_clean`
  computes them, then :func:`~cleaner.cleaner.clean_into` into a sink that only counts bytes
  (no file is written, no segment swapped, no checkpoint moved);
* **tiered**: the round itself (:meth:`~cleaner.tiered.TieredCleaner.clean`: plan, map pass,
  skip tests, rewrite, each upload built and measured) over a metadata store and a remote
  storage manager that drop every write, and without removing stale local copies. It reads
  what the round would read, so segments the skip tests rule out are never downloaded;
  downloads and the cleaned output go to a private temporary directory removed afterwards.
  Nothing is uploaded or published: no object, metadata row, checkpoint or local file changes
  (a key index the plan fetches may stay in the node's remote read cache, as any read's does).

The partition is held IN_PROGRESS in the cleaner manager meanwhile (a background round waits,
as it would for a real round), and released without a checkpoint.
"""

from __future__ import annotations

import shutil
import uuid
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast

from cleaner.cleaner import CleanContext, build_offset_map_from_segments, clean_into, group_segments_by_size
from cleaner.log_to_clean import cleanable_offsets
from cleaner.offset_map import max_map_entries
from cleaner.round_metadata import TieredMetadata
from cleaner.stats import CleanerStats, SegmentAccount
from cleaner.tiered import TieredCleaner, plan_round
from cleaner.tiered.view import PartitionView
from cleaner.transactions import CleanedTransactionMetadata
from log.errors import InvalidRequestError
from log.local_log import LocalLog
from log.types import TopicPartition
from metadata.errors import NotLeaderForPartitionError
from metadata.reports import ACTION_CARRIED_FORWARD
from metadata.types import RemoteLogSegmentMetadata
from remote.storage_manager import RemoteSegmentState, RemoteStorageManager

if TYPE_CHECKING:
    from cleaner.log_cleaner import LogCleaner

#: the tests that rule a segment's rewrite out (DryRunSegment.skipped_by)
SKIP_TESTS = {"skipped-by-bloom": "bloom", "skipped-by-key-index": "key-index"}
NOT_DIRTY = "not-dirty"
COST_GATE = "cost-gate"


def dry_run(lc: LogCleaner, tp: TopicPartition) -> dict[str, Any]:
    """The plan of a round on ``tp`` now (ignoring min.cleanable.dirty.ratio, as the admin
    API's clean does); see the module docstring.

    Raises:
        InvalidRequestError: the topic's cleanup.policy does not include compact.
        CleanerStateError: a round is running on the partition, or it is paused.
    """
    log = lc.log_manager.get_log(tp)
    if not log.config.compact:
        raise InvalidRequestError(f"{tp}: cleanup.policy={log.config.get('cleanup.policy')} does not include "
                                  f"'compact'; there is nothing to clean")
    lc.manager.start_cleaning(tp)
    try:
        if lc.tiered is not None and log.config.remote_storage_enable:
            return _tiered_plan(lc, tp, log)
        return _local_plan(lc, tp, log)
    finally:
        lc.manager.done_cleaning(tp, None)


# ---- local --------------------------------------------------------------------------------------

class _CountingSink:
    """A clean_into destination that keeps nothing but the byte count."""

    index_interval_bytes = 4096

    def __init__(self) -> None:
        self.size = 0

    def append(self, data: bytes | bytearray | memoryview, *, largest_offset: int, largest_timestamp: int,
               offset_of_largest_timestamp: int) -> int:
        pos = self.size
        self.size += len(data)
        return pos

    def append_chunks(self, data: bytes | bytearray | memoryview,
                      chunks: Sequence[tuple[int, int, int, int]]) -> None:
        """The compiled cleaner's batched appends (LogSegment.append_chunks): counted alike."""
        self.size += len(data)

    @staticmethod
    def can_hold(last_offset: int) -> bool:
        return True  # nothing is written: a real round's group never exceeds a segment's offset range


def _local_plan(lc: LogCleaner, tp: TopicPartition, log: LocalLog) -> dict[str, Any]:
    now = lc.clock.milliseconds()
    # cleanable_offsets, not the manager's log_to_clean: that one may rewrite an out-of-range checkpoint
    offs = cleanable_offsets(log, lc.manager.all_cleaner_checkpoints().get(tp), now)
    start, upper = offs.first_dirty_offset, offs.first_uncleanable_dirty_offset
    stats = CleanerStats(lc.clock, tp, first_dirty_offset=start)
    end = start
    if upper > start:
        omap = lc._new_map()
        io_buf = lc.config.io_buffer_per_thread
        map_txn = CleanedTransactionMetadata()
        map_txn.add_aborted(log.collect_aborted_transactions(start, upper))
        stats.map_full = build_offset_map_from_segments(
            log.segments_in_range(start, upper), start, upper, omap, map_txn,
            max_entries=max_map_entries(omap, lc.config.load_factor), stats=stats, io_buffer_size=io_buf)
        end = max(omap.latest_offset + 1, start)
        with log.lock:
            producers = log.producer_state.active_producers()
        delete_retention = int(log.config.get("delete.retention.ms"))
        ctx = CleanContext(now_ms=now, delete_retention_ms=delete_retention, upper_bound_of_round=upper,
                           active_producers=producers, txn_metadata=CleanedTransactionMetadata(),
                           io_buffer_size=io_buf)
        groups = group_segments_by_size(log.segments_in_range(0, end), log.config.segment_bytes,
                                        int(log.config.get("segment.index.bytes")), upper)
        for group in groups:
            sink = _CountingSink()
            for i, seg in enumerate(group):
                seg_upper = group[i + 1].base_offset if i + 1 < len(group) else seg.read_next_offset()
                ctx.txn_metadata.add_aborted(log.collect_aborted_transactions(seg.base_offset, seg_upper))
                account = stats.account(f"{seg.base_offset:020d}", "cleaned-local", seg.base_offset, seg_upper - 1)
                with stats.measure(account):
                    clean_into(seg, sink, omap, ctx, stats)  # type: ignore[arg-type]
    accounts = {a.segment_id: a for a in stats.segment_accounts}
    with log.lock:
        local = [(s.base_offset, s.read_next_offset() - 1, s.size) for s in log.all_segments()]
    segments = []
    for base, last, size in local:
        a = accounts.get(f"{base:020d}")
        segments.append(_segment(f"{base:020d}", base, last, size, "local", a, download=False, end=end))
    return _plan(tp, "local", log.leader_epoch, start, end, stats, segments)


# ---- tiered -------------------------------------------------------------------------------------

class _ReadOnly:
    """A store as a dry run sees it: attribute reads go to ``inner``; subclasses bind their
    write methods to :meth:`_drop`."""

    def __init__(self, inner: Any) -> None:
        self._inner = inner

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)

    def _drop(self, *args: Any, **kw: Any) -> None:
        return None


class _ReadOnlyMetadata(_ReadOnly):
    """The metadata store as a dry run sees it: reads go through, writes are dropped."""

    _drop = _ReadOnly._drop
    publish_compaction = publish_cleaner_offsets = add_remote_log_segment_metadata = add_remote_log_segments = _drop
    update_remote_log_segment_state = put_bloom_filter = set_key_index = record_compaction_report = _drop


class _ReadOnlyStorage(_ReadOnly):
    """The remote storage manager as a dry run sees it: fetches go through, writes are dropped."""

    _drop = _ReadOnly._drop
    copy_log_segment_data = delete_log_segment_data = put_key_index = _drop

    def fetch_segment_state(self, md: RemoteLogSegmentMetadata) -> RemoteSegmentState:
        # read only to be uploaded with the new segment, and the round does not count those bytes
        return RemoteSegmentState(None, None)


class _DryRunTieredCleaner(TieredCleaner):
    """A tiered round over stores that drop writes: it cleans, builds and measures each upload
    as the round would, but nothing is uploaded or published, and local copies stay."""

    def _abandon(self, uploaded: list[RemoteLogSegmentMetadata], epoch: int, *, fenced: bool) -> None:
        return None

    @staticmethod
    def drop_stale_local_copies(log: PartitionView | LocalLog, end: int) -> list[int]:
        return []


def _tiered_plan(lc: LogCleaner, tp: TopicPartition, log: LocalLog) -> dict[str, Any]:
    ctx = lc.tiered
    assert ctx is not None
    try:
        epoch = ctx.leader_epoch(tp)
    except NotLeaderForPartitionError:
        epoch = -1  # a follower may still ask what a round would do
    temp = Path(ctx.temp_dir) / f"dry-run-{uuid.uuid4().hex}"  # never a real round's directory
    rlmm = cast(TieredMetadata, _ReadOnlyMetadata(ctx.rlmm))
    cleaner = _DryRunTieredCleaner(rlmm, cast(RemoteStorageManager, _ReadOnlyStorage(ctx.rsm)),
                                   lc._new_map(tiered=True), lc.config, temp_dir=temp, broker_id=ctx.broker_id,
                                   clock=lc.clock, free_disk=ctx.free_disk, bloom_skip=ctx.bloom_skip)
    checkpoint = lc.manager.all_cleaner_checkpoints().get(tp)
    now = lc.clock.milliseconds()
    plan = plan_round(tp, log, rlmm, leader_epoch=epoch, local_checkpoint=checkpoint, now=now)
    try:
        end, stats = cleaner.clean(log, leader_epoch=epoch, local_checkpoint=checkpoint, now=now, plan=plan)
    finally:
        shutil.rmtree(temp, ignore_errors=True)
    accounts = {a.segment_id: a for a in stats.segment_accounts}
    segments = []
    for md in (plan.segments if plan is not None else ()):
        a = accounts.get(md.id)
        segments.append(_segment(md.id, md.start_offset, md.end_offset, md.segment_size_in_bytes, "remote", a,
                                 download=a is not None and a.log_downloads > 0, end=end))
    first = plan.first_dirty_offset if plan is not None else stats.first_dirty_offset
    return _plan(tp, "tiered", epoch, first, end, stats, segments)


# ---- the answer ---------------------------------------------------------------------------------

def _segment(segment_id: str, base: int, last: int, size: int, tier: str, a: SegmentAccount | None, *,
             download: bool, end: int) -> dict[str, Any]:
    rewrite = a is not None and a.action in ("rewritten", "cleaned-local")
    skipped_by = None
    if not rewrite:
        # a carried-forward segment was ruled out by the cost gate; one the round never weighed (past its end, or
        # nothing dirty to clean) holds nothing it would change
        action = a.action if a is not None and base < end else None
        skipped_by = COST_GATE if action == ACTION_CARRIED_FORWARD else SKIP_TESTS.get(action or "", NOT_DIRTY)
    return {"segment_id": segment_id, "base_offset": base, "end_offset": last, "size_bytes": size, "tier": tier,
            "action": "rewrite" if rewrite else "skip", "skipped_by": skipped_by, "download": download,
            "records_reclaimable": (a.superseded + a.tombstone + a.aborted + a.marker) if rewrite and a else 0,
            "bytes_reclaimable": max(a.bytes_in - a.bytes_out, 0) if rewrite and a else 0}


def _plan(tp: TopicPartition, engine: str, epoch: int, first_dirty: int, end: int, stats: CleanerStats,
          segments: Sequence[dict[str, Any]]) -> dict[str, Any]:
    return {
        "dry_run": True, "topic": tp.topic, "partition": tp.partition, "engine": engine, "leader_epoch": epoch,
        "first_dirty_offset": first_dirty, "end_offset": end, "map_full": stats.map_full,
        "segments": list(segments),
        "segments_to_download": [s["segment_id"] for s in segments if s["download"]],
        "segments_to_rewrite": [s["segment_id"] for s in segments if s["action"] == "rewrite"],
        "segments_skipped": {s["segment_id"]: s["skipped_by"] for s in segments if s["action"] == "skip"},
        "estimated_bytes_down": stats.bytes_downloaded, "estimated_bytes_up": stats.bytes_uploaded,
        "records_reclaimable": sum(s["records_reclaimable"] for s in segments),
        "bytes_reclaimable": sum(s["bytes_reclaimable"] for s in segments),
        "records_removed": stats.records_removed,
    }
