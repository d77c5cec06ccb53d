"""Contract: deleting a partition's remote state is a fenced operation,
on every metadata backend (SQLite memory/file, forced rowcount/re-read fencing, PostgreSQL
marked ``postgres``)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from log.clock import MockClock
from log.types import TopicPartition
from metadata.errors import FencedLeaderEpochError
from metadata.sql import SqlRemoteLogMetadataManager
from metadata.types import RemoteLogSegmentId, RemoteLogSegmentMetadata, RemoteLogSegmentState
from tests.contract.conftest import open_manager

S = RemoteLogSegmentState
TP = TopicPartition("orders", 0)


@pytest.fixture
def mdm(metadata_backend: str, tmp_path: Path) -> Iterator[SqlRemoteLogMetadataManager]:
    m = open_manager(metadata_backend, tmp_path, clock=MockClock())
    yield m
    m.close()


def _seg(start: int, end: int) -> RemoteLogSegmentMetadata:
    return RemoteLogSegmentMetadata(RemoteLogSegmentId.generate(TP), start, end, max_timestamp_ms=end, broker_id=0,
                                    event_timestamp_ms=0, segment_size_in_bytes=100,
                                    segment_leader_epochs={0: start})


def _populate(m: SqlRemoteLogMetadataManager) -> dict[str, S]:
    m.become_leader(TP, 0, 0)
    done, started = _seg(0, 9), _seg(10, 19)
    for md in (done, started):
        m.add_remote_log_segment_metadata(md, leader_epoch=0)
    m.update_remote_log_segment_state(done.remote_log_segment_id, S.COPY_SEGMENT_FINISHED, leader_epoch=0,
                                      event_timestamp_ms=1, broker_id=0)
    m.publish_cleaner_offsets(TP, leader_epoch=0, cleaner_offsets={0: 5})
    m.become_leader(TP, 1, 1, start_offset=20)  # broker 1 takes over
    return {done.id: S.COPY_SEGMENT_FINISHED, started.id: S.COPY_SEGMENT_STARTED}


def _states(m: SqlRemoteLogMetadataManager) -> dict[str, S]:
    return {x.id: x.state for x in m.list_remote_log_segments(TP, include_superseded=True, states=list(S))}


def test_a_superseded_epoch_can_neither_tombstone_nor_drop_the_partition(mdm: SqlRemoteLogMetadataManager) -> None:
    states = _populate(mdm)
    assert mdm.remote_log_size(TP) == 100
    with pytest.raises(FencedLeaderEpochError, match="fenced by broker 1 at leader epoch 1"):
        mdm.begin_partition_deletion(TP, leader_epoch=0, broker_id=0, event_timestamp_ms=5)
    with pytest.raises(FencedLeaderEpochError, match="fenced by broker 1 at leader epoch 1"):
        mdm.delete_partition(TP, leader_epoch=0)
    assert _states(mdm) == states and mdm.cleaner_offsets(TP) == {0: 5}
    assert mdm.leader_state(TP) is not None and mdm.remote_log_size(TP) == 100


def test_the_leader_tombstones_then_drops_the_partition(mdm: SqlRemoteLogMetadataManager) -> None:
    states = _populate(mdm)
    todo = mdm.begin_partition_deletion(TP, leader_epoch=1, broker_id=1, event_timestamp_ms=5)
    assert {m.id for m in todo} == set(states)
    assert all(m.state is S.DELETE_SEGMENT_STARTED and m.broker_id == 1 for m in todo)
    assert set(_states(mdm).values()) == {S.DELETE_SEGMENT_STARTED}
    assert mdm.list_remote_log_segments(TP) == [] and mdm.remote_log_size(TP) == 0  # readers stop seeing them
    again = mdm.begin_partition_deletion(TP, leader_epoch=1, broker_id=1, event_timestamp_ms=6)
    assert {m.id for m in again} == set(states)  # a retry after a crash finds the same work
    mdm.delete_partition(TP, leader_epoch=1)
    mdm.delete_partition(TP, leader_epoch=1)  # idempotent: the partition is gone
    assert mdm.partitions() == [] and mdm.leader_state(TP) is None and _states(mdm) == {}
