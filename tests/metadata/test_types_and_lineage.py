"""Pure metadata rules: value-object invariants, the state machine, the tiered-compaction KIP draft's vector
validation and Kafka's isRemoteSegmentWithinLeaderEpochs (no database)."""

from __future__ import annotations

import pickle

import pytest

from log.errors import InvalidRequestError
from log.types import TopicPartition
from metadata.errors import CleanerOffsetLineageError, FencedLeaderEpochError, InvalidStateTransitionError
from metadata.lineage import is_segment_within_leader_epochs, resolve_checkpoint, validate_cleaner_offsets
from metadata.types import RemoteLogSegmentId, RemoteLogSegmentMetadata, RemoteLogSegmentState

S = RemoteLogSegmentState
TP = TopicPartition("t", 0)


def md(**kw: object) -> RemoteLogSegmentMetadata:
    base: dict[str, object] = {"remote_log_segment_id": RemoteLogSegmentId.generate(TP), "start_offset": 0,
                                   "end_offset": 9, "max_timestamp_ms": 1, "broker_id": 1, "event_timestamp_ms": 1,
                                   "segment_size_in_bytes": 10, "segment_leader_epochs": {0: 0}}
    base.update(kw)
    return RemoteLogSegmentMetadata(**base)  # type: ignore[arg-type]


def test_kafka_state_machine() -> None:
    valid = {(S.COPY_SEGMENT_STARTED, S.COPY_SEGMENT_FINISHED), (S.COPY_SEGMENT_STARTED, S.DELETE_SEGMENT_STARTED),
             (S.COPY_SEGMENT_FINISHED, S.DELETE_SEGMENT_STARTED), (S.DELETE_SEGMENT_STARTED, S.DELETE_SEGMENT_FINISHED)}
    for a in S:
        for b in S:
            assert S.is_valid_transition(a, b) == (a is b or (a, b) in valid), (a, b)
    assert S.is_valid_transition(None, S.COPY_SEGMENT_STARTED)
    assert not S.is_valid_transition(None, S.COPY_SEGMENT_FINISHED)


def test_metadata_invariants_and_immutability() -> None:
    with pytest.raises(InvalidRequestError, match="end_offset"):
        md(start_offset=10, end_offset=9)
    with pytest.raises(InvalidRequestError, match=">= 0"):
        md(segment_size_in_bytes=-1)
    with pytest.raises(InvalidRequestError, match="must not be empty"):
        md(segment_leader_epochs={})
    with pytest.raises(InvalidRequestError):
        md(segment_leader_epochs={0: 20})
    with pytest.raises(InvalidRequestError):
        RemoteLogSegmentId(TP, "not-hex")
    m = md(cleaner_offsets={1: 5, 0: 3})
    assert list(m.cleaner_offsets) == [0, 1]
    with pytest.raises(TypeError):
        m.cleaner_offsets[2] = 1  # type: ignore[index]
    assert pickle.loads(pickle.dumps(m)) == m and hash(m) == hash(pickle.loads(pickle.dumps(m)))
    f = m.with_state(S.COPY_SEGMENT_FINISHED, event_timestamp_ms=9)
    assert f.state is S.COPY_SEGMENT_FINISHED and f.event_timestamp_ms == 9 and m.state is S.COPY_SEGMENT_STARTED
    assert f.is_referenced and not f.with_state(S.COPY_SEGMENT_FINISHED, superseded_by="x" * 32).is_referenced
    with pytest.raises(InvalidStateTransitionError, match="COPY_SEGMENT_FINISHED -> COPY_SEGMENT_STARTED"):
        f.with_state(S.COPY_SEGMENT_STARTED)
    assert RemoteLogSegmentId.generate(TP) != RemoteLogSegmentId.generate(TP)


def test_seed_004_vector_rules() -> None:
    lineage = {0: 0, 1: 150}
    validate_cleaner_offsets(TP, 1, {0: 100, 1: 155}, {0: 100}, lineage)
    with pytest.raises(CleanerOffsetLineageError, match="LE-0") as ei:
        validate_cleaner_offsets(TP, 1, {0: 123, 1: 155}, {0: 100}, lineage)
    assert isinstance(ei.value, FencedLeaderEpochError)
    with pytest.raises(CleanerOffsetLineageError, match="not in the lineage"):
        validate_cleaner_offsets(TP, 3, {3: 10}, {}, lineage)
    with pytest.raises(CleanerOffsetLineageError, match="backwards"):
        validate_cleaner_offsets(TP, 1, {0: 100}, {0: 100, 1: 155}, lineage)
    assert resolve_checkpoint({0: 100, 1: 155}) == 155 and resolve_checkpoint({}) is None


def test_is_segment_within_leader_epochs_kafka_cases() -> None:
    lineage = {5: 10, 7: 15, 9: 100}
    assert is_segment_within_leader_epochs({5: 10, 7: 15}, 50, lineage)
    assert is_segment_within_leader_epochs({5: 14, 7: 15, 9: 100}, 150, lineage)  # overlapping upload
    assert not is_segment_within_leader_epochs({5: 10, 7: 15}, 100, lineage)  # passes epoch 9's start
    assert not is_segment_within_leader_epochs({5: 10, 8: 15}, 50, lineage)  # unknown epoch
    assert not is_segment_within_leader_epochs({3: 0}, 5, lineage)  # before the lineage
    assert not is_segment_within_leader_epochs({7: 12}, 20, lineage)  # starts before epoch 7 did
    assert not is_segment_within_leader_epochs({9: 100}, 150, lineage, log_end_offset=150)
    assert is_segment_within_leader_epochs({9: 100}, 149, lineage, log_end_offset=150)
    # an epoch with no records in the segment is ignored (buildFilteredLeaderEpochMap)
    assert is_segment_within_leader_epochs({5: 10, 6: 15, 7: 15}, 50, lineage)
