"""What the Spark driver knows of a partition it cleans: the serving node's live log (a job the
service submits) or the metadata store and object store alone (a standalone job); a job never
opens a node's data dir.

Both views give the driver the same things: the topic config, the leader epoch the job publishes
under, the cleaner checkpoint, the partition as a round reads it (a
:class:`~cleaner.tiered.view.PartitionView`, which :func:`cleaner.tiered.plan_round` and
:class:`cleaner.tiered.RoundTxnIndexes` read), the active producers (whose last batch a round
keeps) and what to do once the fenced publish landed.

The standalone view (:class:`RemoteOnlyView`) sees only the remote tier. Its bounds:

* The config comes from the metadata store's topic configs (shared by every node).
* The epoch is the partition's registered leader epoch: the job publishes as that leader would,
  and is fenced exactly when a leadership change happens during it.
* The producers and the open transactions come from the producer snapshot uploaded with the
  newest remote segment (KIP-405's LogSegmentData). A transaction still open at the remote
  tier's end may have its ABORT marker in the node's untiered local log, which the job cannot
  read, so the round stops below the first offset of any such transaction (a remote "last
  stable offset"); every transaction below that bound has its marker, and so its index entry,
  in the remote tier. A producer whose last batch the node wrote after the remote tier keeps
  its last remote batch here (the in-process round, which sees the local log, may drop it):
  more is kept, never less.
* Nothing local is adopted: the serving node takes the new checkpoint from the cleaner-offset
  vector at its next round, and its local copies below it expire as usual.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from cleaner.retention import ProducerInfo
from cleaner.tiered import TieredCleaner, TieredRoundPlan, plan_round
from cleaner.tiered.view import LinkedCopy, LocalPartition, PartitionView
from log.config import LogConfig
from log.errors import UnknownTopicOrPartitionError
from log.index.txn_index import AbortedTxn, TxnIndexLink
from log.producer_snapshot import decode_snapshot
from log.producer_state import ProducerStateEntry
from log.types import TopicPartition
from metadata.manager import RemoteLogMetadataManager
from metadata.topic_configs import TopicConfigStore
from metadata.types import RemoteLogSegmentMetadata
from remote.storage_manager import RemoteStorageManager

logger = logging.getLogger(__name__)

#: (producer id, last data offset, producer epoch), as a RewriteTask carries them
Producers = tuple[tuple[int, int, int], ...]
_NO_END = 2**63 - 1


class RemoteOnlyMetadata(RemoteLogMetadataManager, TopicConfigStore, Protocol):
    """What a standalone view reads from the metadata store: the partition's leader and
    segments, and its topic's shared config."""


class DriverView(PartitionView, Protocol):
    """The driver's view of one partition (see the module docstring): what a round reads of it
    (a :class:`~cleaner.tiered.view.PartitionView`, which the driver plans from and walks the
    transaction indexes of) and what the driver adds."""

    def leader_epoch(self) -> int: ...

    def checkpoint(self) -> int | None: ...

    def plan(self, rlmm: RemoteLogMetadataManager, *, leader_epoch: int, checkpoint: int | None,
             now: int) -> TieredRoundPlan | None: ...

    def producers(self) -> Producers: ...

    def adopt(self, end: int) -> None: ...


@dataclass
class LocalLogView(LocalPartition):
    """A partition of the node that runs the driver (the service submits the job): its live log
    bounds the round exactly as the in-process tiered round's does, and the result is adopted
    there (checkpoint written, stale local copies dropped)."""

    leader_epoch: Callable[[], int]
    checkpoint: Callable[[], int | None] = lambda: None
    write_checkpoint: Callable[[int], None] = lambda end: None

    def plan(self, rlmm: RemoteLogMetadataManager, *, leader_epoch: int, checkpoint: int | None,
             now: int) -> TieredRoundPlan | None:
        return plan_round(self.topic_partition, self, rlmm, leader_epoch=leader_epoch,
                          local_checkpoint=checkpoint, now=now)

    def producers(self) -> Producers:
        return tuple((pid, e.last_data_offset, e.producer_epoch) for pid, e in sorted(self.active_producers().items()))

    def adopt(self, end: int) -> None:
        self.write_checkpoint(end)
        TieredCleaner.drop_stale_local_copies(self, end)


@dataclass
class RemoteOnlyView:
    """A partition known only from the metadata store and the object store (a standalone job).

    As a :class:`~cleaner.tiered.view.PartitionView` its log ends where the remote tier ends
    (nothing local), is stable up to ``last_stable_offset`` and has no local segments."""

    topic_partition: TopicPartition
    config: LogConfig
    epoch: int
    last_stable_offset: int
    remote_end: int
    _producers: dict[int, ProducerStateEntry]

    @staticmethod
    def open(tp: TopicPartition, rlmm: RemoteOnlyMetadata, rsm: RemoteStorageManager) -> RemoteOnlyView:
        """Read the partition's config, leader epoch and newest producer snapshot.

        Raises:
            UnknownTopicOrPartitionError: the metadata store holds no config for the topic, or the
                topic has no such partition.
        """
        stored = rlmm.get_topic_config(tp.topic)
        if stored is None:
            raise UnknownTopicOrPartitionError(
                f"unknown topic {tp.topic!r}: the metadata store holds no config for it (topics created before "
                f"topic configs were shared appear once a node serving them restarts on this metadata store)")
        if not 0 <= tp.partition < stored.partitions:
            raise UnknownTopicOrPartitionError(f"unknown partition {tp}; topic {tp.topic!r} has "
                                               f"{stored.partitions} partitions")
        config = LogConfig.from_dict(stored.config)
        state = rlmm.leader_state(tp)
        epoch = state.leader_epoch if state is not None else -1
        segments = rlmm.list_remote_log_segments(tp) if epoch >= 0 else []  # no leader: nothing was tiered
        remote_end = segments[-1].end_offset + 1 if segments else 0
        producers: dict[int, ProducerStateEntry] = {}
        if segments:
            newest = max(segments, key=lambda m: (m.end_offset, m.start_offset))
            snap = rsm.fetch_segment_state(newest).producer_snapshot
            if snap is None:
                logger.warning("%s: newest remote segment %s has no producer snapshot (copied by an older "
                               "version): transactions open at the remote tier's end cannot bound the round",
                               tp, newest.id)
            else:
                producers = decode_snapshot(snap, source=rsm.object_key(newest) + " (producer snapshot)")
        open_txns = [e.current_txn_first_offset for e in producers.values() if e.current_txn_first_offset is not None]
        lso = min([remote_end, *open_txns])
        return RemoteOnlyView(tp, config, epoch, lso, remote_end, producers)

    # ---- the round's view ----------------------------------------------------------------
    @property
    def log_end_offset(self) -> int:
        return _NO_END

    @property
    def active_base_offset(self) -> int:
        return self.remote_end

    def local_bytes_above(self, remote_end: int) -> int:
        return 0

    def active_producers(self) -> Mapping[int, ProducerInfo]:
        return self._producers

    def local_txn_links(self, remote_end: int) -> list[TxnIndexLink]:
        return []

    def local_copy_txns(self, md: RemoteLogSegmentMetadata) -> list[AbortedTxn] | None:
        return None

    def link_local_copy(self, md: RemoteLogSegmentMetadata, into: Path) -> LinkedCopy | None:
        return None

    def drop_local_copies_below(self, end: int) -> list[int]:
        return []

    # ---- the driver's ------------------------------------------------------------------------

    def leader_epoch(self) -> int:
        return self.epoch

    def checkpoint(self) -> int | None:
        return None  # the remote cleaner-offset vector is the checkpoint (plan_round resolves it)

    def plan(self, rlmm: RemoteLogMetadataManager, *, leader_epoch: int, checkpoint: int | None,
             now: int) -> TieredRoundPlan | None:
        return plan_round(self.topic_partition, self, rlmm, leader_epoch=leader_epoch,
                          local_checkpoint=checkpoint, now=now)

    def producers(self) -> Producers:
        return tuple((pid, e.last_data_offset, e.producer_epoch) for pid, e in sorted(self._producers.items()))

    def adopt(self, end: int) -> None:
        pass
