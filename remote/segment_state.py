"""The state that travels with a remote segment (KIP-405's LogSegmentData): the producer
snapshot and the leader-epoch checkpoint, and restoring a partition from them.

Copy side (:func:`producer_snapshot_for`, :func:`rewritten_segment_state`): every segment
copied by the RemoteLogManager carries the producer state after its last offset (the
``<next offset>.snapshot`` the LocalLog writes at every roll, or, where that file is gone,
the same state rebuilt from an older snapshot and the local batches after it) and the
leader-epoch checkpoint up to its end. A segment rewritten by the tiered cleaner keeps the
offsets of the segments it replaces, so it carries the state of the last one of them.

Restore side (:func:`restore_from_remote`): a node whose local log ends at or below the
remote tier's end (it lost its data dir, or never had the partition) cannot know the
producers and epochs of the remote data from its own files. As Kafka's follower does in
``buildRemoteLogAuxState``, it takes the newest remote segment's snapshot and checkpoint,
truncates the local log fully and restarts it just after that segment. From then on a
retried batch of a producer seen only in remote segments is recognised as a duplicate, an
out-of-order one rejected, an open transaction still bounds the last stable offset, and the
epoch cache holds the lineage the remote data was written under.
"""

from __future__ import annotations

import logging

from log.errors import CorruptRecordError
from log.local_log import LocalLog
from log.producer_snapshot import decode_snapshot, encode_snapshot, list_snapshots, snapshot_path
from log.producer_state import ProducerStateEntry, ProducerStateManager
from log.record import iter_batches
from log.types import EpochEntry
from metadata.types import RemoteLogSegmentMetadata
from remote.storage_manager import RemoteStorageManager

logger = logging.getLogger(__name__)


def render_epoch_checkpoint(entries: list[EpochEntry]) -> bytes:
    """A ``leader-epoch-checkpoint`` file's bytes (version 0)."""
    return (f"0\n{len(entries)}\n" + "".join(f"{e.epoch} {e.start_offset}\n" for e in entries)).encode()


def parse_epoch_checkpoint(data: bytes, *, source: str | None = None) -> list[EpochEntry]:
    """Entries of a ``leader-epoch-checkpoint`` file (version 0).

    Raises:
        CorruptRecordError: not a version-0 checkpoint, or the count does not match.
    """
    try:
        lines = data.decode("ascii").splitlines()
        if len(lines) < 2 or lines[0].strip() != "0":
            raise ValueError("expected version 0")
        count = int(lines[1])
        entries = []
        for line in lines[2:]:
            if line.strip():
                epoch, start = line.split()
                entries.append(EpochEntry(int(epoch), int(start)))
        if count != len(entries):
            raise ValueError(f"header says {count} entries, file holds {len(entries)}")
    except (UnicodeDecodeError, ValueError) as e:
        raise CorruptRecordError(f"leader-epoch checkpoint is invalid: {e}", source=source) from None
    return entries


def producer_snapshot_for(log: LocalLog, next_offset: int) -> bytes | None:
    """The producer snapshot after every batch below ``next_offset`` (Kafka's format).

    Call under ``log.lock``. The ``<next_offset>.snapshot`` file the log wrote at the roll is
    used as is; where it is gone (replaced segments, an older data dir) the state is rebuilt
    from the newest snapshot below and the local batches up to ``next_offset``. None when
    neither is possible (no usable snapshot and the log no longer starts at 0).
    """
    exact = snapshot_path(log.dir, next_offset)
    if exact.exists():
        data = exact.read_bytes()
        try:
            decode_snapshot(data, source=str(exact))
            return data
        except CorruptRecordError as e:
            logger.warning("%s: %s; rebuilding the state from the log", log.topic_partition, e)
    start = log.log_start_offset
    state = ProducerStateManager()
    replay_from: int | None = 0 if start == 0 else None
    for off, path in reversed(list_snapshots(log.dir)):
        if start <= off < next_offset:
            try:
                state.load(decode_snapshot(path.read_bytes(), source=str(path)))
            except CorruptRecordError:
                continue
            replay_from = off
            break
    if replay_from is None:
        return None
    for seg in log.all_segments():
        if seg.read_next_offset() <= replay_from or seg.base_offset >= next_offset:
            continue
        for _pos, batch in seg.batches():
            if batch.base_offset < replay_from or batch.base_offset >= next_offset:
                continue
            if batch.is_control:
                state.on_control_batch(batch)
            else:
                state.on_data_batch(batch)
    return encode_snapshot(state.producers)


def rewritten_segment_state(rsm: RemoteStorageManager, replaced: list[RemoteLogSegmentMetadata],
                            fallback_checkpoint: bytes) -> tuple[bytes, bytes | None]:
    """(leader-epoch checkpoint, producer snapshot) for a segment that replaces ``replaced``
    (same offsets, compacted): those of the last replaced segment, whose end is the new
    segment's; the checkpoint falls back to ``fallback_checkpoint`` and the snapshot to None
    for a segment copied without them (by an older version). For the tiered cleaner's upload.

    Raises:
        RemoteStorageError: a read failed after retries.
    """
    last = max(replaced, key=lambda m: m.end_offset)
    state = rsm.fetch_segment_state(last)
    return state.leader_epoch_checkpoint or fallback_checkpoint, state.producer_snapshot


def needs_restore(log: LocalLog, remote: list[RemoteLogSegmentMetadata]) -> bool:
    """Whether the local log lies behind the remote tier (lost or never had the data)."""
    if not remote:
        return False
    return log.log_end_offset <= max(m.end_offset for m in remote)


def _decoded_state(rsm: RemoteStorageManager, md: RemoteLogSegmentMetadata
                   ) -> tuple[dict[int, ProducerStateEntry], list[EpochEntry], bool]:
    """(producers, epoch entries, whether a snapshot was there) copied with ``md``.

    Raises:
        CorruptRecordError: the snapshot or the checkpoint is damaged.
        RemoteStorageError: a read failed after retries.
    """
    state = rsm.fetch_segment_state(md)
    producers = {} if state.producer_snapshot is None else decode_snapshot(
        state.producer_snapshot, source=rsm.object_key(md) + " (producer snapshot)")
    if state.leader_epoch_checkpoint is not None:
        entries = parse_epoch_checkpoint(state.leader_epoch_checkpoint, source=rsm.object_key(md))
    else:  # copied without one: the segment's own epochs are the best lineage there is
        entries = [EpochEntry(e, o) for e, o in sorted(md.segment_leader_epochs.items())]
    return producers, entries, state.producer_snapshot is not None


def _state_after(rsm: RemoteStorageManager, remote: list[RemoteLogSegmentMetadata]
                 ) -> tuple[dict[int, ProducerStateEntry], list[EpochEntry], bool]:
    """The producer state and epoch lineage after the newest remote segment.

    Normally that segment's own snapshot and checkpoint. Where they are damaged, the newest
    older segment whose state is intact is the base (none: empty state), and the segments
    after it are downloaded and replayed on top, as Kafka rebuilds producer state from the log
    when a snapshot is unusable; their epochs extend the lineage.

    Raises:
        CorruptRecordError: a replayed segment is damaged too (nothing was changed).
        RemoteStorageError: a read failed after retries.
    """
    ordered = sorted(remote, key=lambda m: (m.end_offset, m.start_offset), reverse=True)
    replay: list[RemoteLogSegmentMetadata] = []
    producers: dict[int, ProducerStateEntry] = {}
    entries: list[EpochEntry] = []
    had_snapshot = False
    for md in ordered:
        try:
            producers, entries, had_snapshot = _decoded_state(rsm, md)
            break
        except CorruptRecordError as e:
            logger.warning("%s: %s; rebuilding that state from the segments before it", md.topic_partition, e)
            replay.append(md)
    if not replay:
        return producers, entries, had_snapshot
    state = ProducerStateManager()
    state.load(producers)
    for md in reversed(replay):  # oldest first
        key = rsm.object_key(md)
        for pos, batch in iter_batches(rsm.fetch_log_segment(md, 0)):
            if not batch.is_valid():
                raise CorruptRecordError("record batch is corrupt (CRC mismatch) while rebuilding producer state",
                                         source=key, position=pos)
            if batch.is_control:
                state.on_control_batch(batch)
            else:
                state.on_data_batch(batch)
        last = entries[-1].epoch if entries else -1
        entries += [EpochEntry(e, o) for e, o in sorted(md.segment_leader_epochs.items()) if e > last]
    logger.info("%s: producer state rebuilt by replaying %d remote segment(s) after a damaged snapshot",
                ordered[0].topic_partition, len(replay))
    return state.producers, entries, True


def restore_from_remote(log: LocalLog, rsm: RemoteStorageManager, remote: list[RemoteLogSegmentMetadata]) -> bool:
    """If the local log is behind the remote tier, restart it after the newest remote segment
    with that segment's producer state and leader-epoch cache; returns whether it did.
    A damaged snapshot or checkpoint is rebuilt from older segments (see :func:`_state_after`).

    Raises:
        RemoteStorageError: the state objects could not be read (nothing was changed).
        CorruptRecordError: they and the segments to rebuild them from are damaged (nothing was changed).
    """
    if not needs_restore(log, remote):
        return False
    newest = max(remote, key=lambda m: (m.end_offset, m.start_offset))
    producers, entries, had_snapshot = _state_after(rsm, remote)
    start = newest.end_offset + 1
    with log.lock:
        if not needs_restore(log, remote):
            return False
        dropped = log.log_end_offset - log.log_start_offset
        log.truncate_fully_and_start_at(start, producers, entries)
    if not had_snapshot:
        logger.warning("%s: remote segment %s has no producer snapshot (copied by an older version); producer "
                       "state starts empty at %d", log.topic_partition, newest.id, start)
    logger.info("%s: local log was behind the remote tier; restarted at %d with %d producers and %d leader "
                "epochs from remote segment %s (dropped %d stale local offsets)", log.topic_partition, start,
                len(producers), len(entries), newest.id, dropped)
    return True
