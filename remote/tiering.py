"""Tiering: a RemoteLogManager copies rolled segments to remote storage (KIP-405's copy path, with
the key bloom filter and key index built on the way; see :mod:`remote.log_manager`)."""

from __future__ import annotations

import dataclasses
import logging
import os
import shutil
import uuid
from pathlib import Path

from log.errors import TiercompactError
from log.index.bloom import KeyBloomFilter
from log.index.key_index import build_segment_indexes
from log.local_log import LocalLog
from log.segment import LogSegment
from log.types import TopicPartition
from metadata.errors import FencedLeaderEpochError
from metadata.types import RemoteLogSegmentId, RemoteLogSegmentMetadata
from metadata.types import RemoteLogSegmentState as S
from remote.leadership import Leadership
from remote.segment_state import producer_snapshot_for, render_epoch_checkpoint
from remote.storage_manager import LogSegmentData

logger = logging.getLogger(__name__)


class Tiering(Leadership):
    """Copies a partition's rolled segments, oldest first, one upload in flight per partition."""

    _staging: Path
    _copying: set[TopicPartition]

    def copy_rolled_segments(self, tp: TopicPartition) -> list[RemoteLogSegmentMetadata]:
        """Copy every rolled, stable, not yet covered segment, oldest first; returns the new
        (COPY_SEGMENT_FINISHED) metadata. A failure abandons that upload and raises.

        The partition lock is held to pick each segment, not across its upload (a slow store
        must not keep requests waiting for the partition): one copy per partition is in flight
        at a time, and a second caller meanwhile returns what it copied so far (the copy in
        flight goes on with the rest)."""
        copied: list[RemoteLogSegmentMetadata] = []
        while True:
            with self._lock(tp):
                log = self._log(tp)
                if not log.config.remote_storage_enable:
                    return copied
                with self._guard:
                    if tp in self._copying:
                        return copied
                epoch = self.leader_epoch(tp)
                seg = self._next_to_copy(log, self._highest_remote_offset(tp))
                if seg is None:
                    return copied
                with self._guard:
                    self._copying.add(tp)
            try:
                log.sync_rolled()  # a segment goes to the remote tier only once it is on the local disk
                md = self._copy_segment(tp, log, seg, epoch)
            finally:
                with self._guard:
                    self._copying.discard(tp)
            if md is None:  # replaced by the cleaner meanwhile: the next run copies its successor
                return copied
            copied.append(md)

    @staticmethod
    def _next_to_copy(log: LocalLog, highest: int) -> LogSegment | None:
        """The oldest rolled segment above ``highest`` (the remote tier's end), if it is stable."""
        for seg in log.all_segments()[:-1]:
            if seg.size == 0:
                continue
            nxt = seg.read_next_offset()
            if nxt - 1 <= highest:
                continue
            if nxt > log.last_stable_offset:
                return None  # later segments are above the LSO too
            return seg
        return None

    def _stage(self, log: LocalLog, seg: LogSegment, into: Path) -> tuple[LogSegmentData, int, int] | None:
        """Link the segment's files into ``into`` under the log's lock; (data, size, next offset)."""
        with log.lock:
            if seg not in log.segments:
                return None
            seg.flush()
            into.mkdir(parents=True)
            staged: dict[str, Path | None] = {}
            for name, src in (("log", seg.log_path), ("index", seg.offset_index.path),
                              ("timeindex", seg.time_index.path), ("txnindex", seg.txn_index.path)):
                dst = into / src.name
                if not src.exists():
                    if name == "txnindex":
                        staged[name] = None
                        continue
                    dst.write_bytes(b"")  # an index never written (no entries) is an empty index
                else:
                    try:
                        os.link(src, dst)
                    except OSError:
                        shutil.copyfile(src, dst)
                staged[name] = dst
            nxt = seg.read_next_offset()
            entries = [e for e in log.epoch_entries if e.start_offset < nxt]
            snapshot = producer_snapshot_for(log, nxt)
            if snapshot is None:
                logger.warning("%s: no producer state for offset %d; segment %d is copied without a snapshot",
                               log.topic_partition, nxt, seg.base_offset)
            log_path = staged["log"]
            assert log_path is not None and staged["index"] is not None and staged["timeindex"] is not None
            data = LogSegmentData(log_path, staged["index"], staged["timeindex"], staged["txnindex"],
                                  render_epoch_checkpoint(entries), snapshot)
            return data, log_path.stat().st_size, nxt

    def _copy_segment(self, tp: TopicPartition, log: LocalLog, seg: LogSegment,
                      epoch: int) -> RemoteLogSegmentMetadata | None:
        staging = self._staging / uuid.uuid4().hex
        try:
            staged = self._stage(log, seg, staging)
            if staged is None:
                return None
            data, size, nxt = staged
            bloom, key_index = self._build_indexes(tp, data.log_segment,
                                                   float(log.config.get("remote.compaction.bloom.fpp")))
            if key_index is not None:
                data = dataclasses.replace(data, key_index=key_index)
            md = RemoteLogSegmentMetadata(
                remote_log_segment_id=RemoteLogSegmentId.generate(tp), start_offset=seg.base_offset,
                end_offset=nxt - 1, max_timestamp_ms=seg.largest_timestamp, broker_id=self.broker_id, event_timestamp_ms=self.clock.milliseconds(),
                segment_size_in_bytes=size, segment_leader_epochs=log.epochs_for_range(seg.base_offset, nxt),
                key_index_bytes=None if key_index is None else len(key_index))
            try:
                self.metadata.add_remote_log_segment_metadata(md, leader_epoch=epoch)
            except FencedLeaderEpochError as e:
                self._count_fenced(e, tp)
                raise
            try:
                self.rsm.copy_log_segment_data(md, data)
                if bloom is not None:
                    self._put_bloom(md, bloom)
                done = self.metadata.update_remote_log_segment_state(
                    md.remote_log_segment_id, S.COPY_SEGMENT_FINISHED, leader_epoch=epoch,
                    event_timestamp_ms=self.clock.milliseconds(), broker_id=self.broker_id)
            except Exception as e:
                self._bump("copy_failures")
                if isinstance(e, FencedLeaderEpochError):
                    self._count_fenced(e, tp)
                logger.warning("%s: copy of segment %d as %s failed (%s); abandoning the upload",
                               tp, seg.base_offset, md.id, e)
                self._abandon(md, epoch)
                raise
            uploaded = sum(p.stat().st_size for p in (data.log_segment, data.offset_index, data.time_index,
                                                      data.transaction_index) if p is not None)
            uploaded += len(data.key_index or b"")
            self._bump("bytes_uploaded", uploaded + len(data.leader_epoch_index))
            self._bump("segments_copied")
            logger.info("%s: copied segment [%d, %d] (%d bytes) as %s", tp, md.start_offset, md.end_offset,
                        size, md.id)
            return done
        finally:
            shutil.rmtree(staging, ignore_errors=True)

    @staticmethod
    def _build_indexes(tp: TopicPartition, log_path: Path, fpp: float) -> tuple[KeyBloomFilter | None, bytes | None]:
        """The bloom filter and the serialized key index of a staged segment, from one scan. A
        missing one only costs the cleaner a download (it builds them lazily), so a failure
        here is logged, not fatal to the copy."""
        try:
            bloom, key_index = build_segment_indexes(log_path, fpp)
        except TiercompactError as e:
            logger.warning("%s: could not build the key indexes of %s: %s", tp, log_path, e)
            return None, None
        return bloom, key_index.to_bytes()

    def _put_bloom(self, md: RemoteLogSegmentMetadata, bloom: KeyBloomFilter) -> None:
        """Like a missing key index, a missing filter only costs the cleaner a download."""
        try:
            self.metadata.put_bloom_filter(md.remote_log_segment_id, bloom.to_bytes())
        except TiercompactError as e:
            logger.warning("%s: could not store the bloom filter of %s: %s", md.topic_partition, md.id, e)

    def _abandon(self, md: RemoteLogSegmentMetadata, epoch: int) -> None:
        try:
            self._delete_remote(md, epoch)
        except Exception as e:  # noqa: BLE001 - retried by run_once / the orphan rules
            logger.warning("%s: could not abandon upload %s yet (%s); will retry", md.topic_partition, md.id, e)
            with self._guard:
                self._abandoned.setdefault(md.topic_partition, {})[md.id] = md
