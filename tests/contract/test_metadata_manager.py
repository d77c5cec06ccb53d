"""RemoteLogMetadataManager contract on SQLite (memory, file, forced rowcount / re-read
fencing) and PostgreSQL (marked ``postgres``; required when CI=true)."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from log.clock import MockClock
from log.errors import InvalidConfigError, InvalidRequestError
from log.types import TopicPartition
from metadata import load_metadata_manager
from metadata.errors import (
    CleanerOffsetLineageError,
    FencedLeaderEpochError,
    InvalidStateTransitionError,
    MetadataStoreError,
    RemoteSegmentNotFoundError,
)
from metadata.sql import SqlRemoteLogMetadataManager
from metadata.types import RemoteLogSegmentId, RemoteLogSegmentMetadata, RemoteLogSegmentState
from tests.contract.conftest import open_manager

S = RemoteLogSegmentState
TP = TopicPartition("orders", 0)


@pytest.fixture
def mclock() -> MockClock:
    return MockClock()


@pytest.fixture
def mdm(metadata_backend: str, tmp_path: Path, mclock: MockClock) -> Iterator[SqlRemoteLogMetadataManager]:
    m = open_manager(metadata_backend, tmp_path, clock=mclock)
    yield m
    m.close()


def seg(start: int, end: int, *, size: int = 1000, epochs: dict[int, int] | None = None, broker: int = 1,
        tp: TopicPartition = TP) -> RemoteLogSegmentMetadata:
    return RemoteLogSegmentMetadata(RemoteLogSegmentId.generate(tp), start, end, max_timestamp_ms=end,
                                    broker_id=broker, event_timestamp_ms=0, segment_size_in_bytes=size,
                                    segment_leader_epochs=epochs or {0: start})


def finish(m: SqlRemoteLogMetadataManager, md: RemoteLogSegmentMetadata, epoch: int = 0) -> None:
    m.add_remote_log_segment_metadata(md, leader_epoch=epoch)
    m.update_remote_log_segment_state(md.remote_log_segment_id, S.COPY_SEGMENT_FINISHED, leader_epoch=epoch,
                                      event_timestamp_ms=1, broker_id=md.broker_id)


# ---------------------------------------------------------------- leadership


def test_log_start_offset_only_moves_forward_and_only_for_the_registered_epoch(
        mdm: SqlRemoteLogMetadataManager) -> None:
    assert mdm.log_start_offset(TP) == 0  # never set (and no row yet)
    mdm.become_leader(TP, 0, 1)
    assert mdm.log_start_offset(TP) == 0
    assert mdm.advance_log_start_offset(TP, 10, leader_epoch=0) == 10
    assert mdm.advance_log_start_offset(TP, 4, leader_epoch=0) == 10  # never backwards
    mdm.become_leader(TP, 1, 2)
    with pytest.raises(FencedLeaderEpochError):
        mdm.advance_log_start_offset(TP, 20, leader_epoch=0)  # a zombie moves nothing
    assert mdm.log_start_offset(TP) == 10
    assert mdm.advance_log_start_offset(TP, 20, leader_epoch=1) == 20 == mdm.log_start_offset(TP)
    with pytest.raises(InvalidRequestError):
        mdm.advance_log_start_offset(TP, -1, leader_epoch=1)
    assert mdm.log_start_offset(TopicPartition("other", 0)) == 0


def test_a_version_7_store_gets_the_log_start_offset_column(tmp_path: Path) -> None:
    from sqlalchemy import create_engine, delete, insert, inspect, text

    from metadata.sql.schema import SCHEMA_VERSION, schema_version

    url = f"sqlite:///{tmp_path / 'metadata.db'}"
    with SqlRemoteLogMetadataManager(url) as m:
        m.become_leader(TP, 3, 1)
    engine = create_engine(url)
    with engine.begin() as conn:
        conn.execute(text("ALTER TABLE tc_leaders DROP COLUMN log_start_offset"))
        conn.execute(delete(schema_version))
        conn.execute(insert(schema_version).values(version=7))
    assert "log_start_offset" not in {c["name"] for c in inspect(engine).get_columns("tc_leaders")}
    with SqlRemoteLogMetadataManager(url) as m:
        assert m.leader_state(TP) is not None and m.log_start_offset(TP) == 0
        assert m.advance_log_start_offset(TP, 7, leader_epoch=3) == 7
    with SqlRemoteLogMetadataManager(url) as m:
        assert m.log_start_offset(TP) == 7
    with engine.connect() as conn:
        assert [r[0] for r in conn.execute(text("SELECT version FROM tc_schema_version"))] == [SCHEMA_VERSION]
    engine.dispose()


def test_become_leader_requires_strictly_increasing_epochs(mdm: SqlRemoteLogMetadataManager) -> None:
    assert mdm.leader_state(TP) is None
    assert mdm.become_leader(TP, 0, 1).leader_epoch == 0
    mdm.become_leader(TP, 2, 2, start_offset=50)
    for epoch in (2, 1):
        with pytest.raises(FencedLeaderEpochError, match="must strictly increase"):
            mdm.become_leader(TP, epoch, 3, start_offset=60)
    state = mdm.leader_state(TP)
    assert state is not None and (state.leader_epoch, state.broker_id) == (2, 2)
    assert mdm.leader_epochs(TP) == [(0, 0), (2, 50)]
    with pytest.raises(InvalidRequestError, match="previous epoch 2 started at 50"):
        mdm.become_leader(TP, 3, 1, start_offset=10)
    assert mdm.leader_epochs(TP) == [(0, 0), (2, 50)]  # rolled back with the failed txn
    assert mdm.leader_state(TP).leader_epoch == 2  # type: ignore[union-attr]


def test_writes_need_the_registered_epoch(mdm: SqlRemoteLogMetadataManager) -> None:
    with pytest.raises(FencedLeaderEpochError, match="no registered leader"):
        mdm.add_remote_log_segment_metadata(seg(0, 9), leader_epoch=0)
    mdm.become_leader(TP, 3, 1)
    with pytest.raises(FencedLeaderEpochError, match="call become_leader with the new epoch"):
        mdm.add_remote_log_segment_metadata(seg(0, 9), leader_epoch=4)
    with pytest.raises(FencedLeaderEpochError, match="fenced by broker 1 at leader epoch 3"):
        mdm.add_remote_log_segment_metadata(seg(0, 9), leader_epoch=2)
    assert mdm.list_remote_log_segments(TP, states=list(S)) == []


# ---------------------------------------------------------------- segment lifecycle


def test_segment_lifecycle_listing_lookup_and_size(mdm: SqlRemoteLogMetadataManager) -> None:
    mdm.become_leader(TP, 0, 1)
    a, b, c = seg(0, 99, size=100), seg(100, 199, size=200), seg(200, 299, size=400)
    for md in (a, b):
        finish(mdm, md)
    mdm.add_remote_log_segment_metadata(c, leader_epoch=0)
    mdm.add_remote_log_segment_metadata(c, leader_epoch=0)  # a retried add is a no-op
    assert [s.start_offset for s in mdm.list_remote_log_segments(TP)] == [0, 100]
    assert mdm.remote_log_size(TP) == 300
    assert [s.state for s in mdm.list_remote_log_segments(TP, states=[S.COPY_SEGMENT_STARTED])] == \
        [S.COPY_SEGMENT_STARTED]
    got = mdm.remote_log_segment_metadata(TP, 150)
    assert got is not None and got.remote_log_segment_id == b.remote_log_segment_id
    assert got.state is S.COPY_SEGMENT_FINISHED and got.event_timestamp_ms == 1
    assert mdm.remote_log_segment_metadata(TP, 250) is None  # c is not finished
    finish_c = mdm.update_remote_log_segment_state(c.remote_log_segment_id, S.COPY_SEGMENT_FINISHED,
                                                   leader_epoch=0, event_timestamp_ms=5, broker_id=1)
    assert finish_c.state is S.COPY_SEGMENT_FINISHED
    assert mdm.remote_log_size(TP) == 700
    mdm.update_remote_log_segment_state(a.remote_log_segment_id, S.DELETE_SEGMENT_STARTED, leader_epoch=0,
                                        event_timestamp_ms=6, broker_id=1)
    assert mdm.remote_log_size(TP) == 600
    assert [s.start_offset for s in mdm.list_remote_log_segments(TP)] == [100, 200]
    assert mdm.remote_log_segment_metadata(TP, 0).start_offset == 100  # type: ignore[union-attr]
    mdm.update_remote_log_segment_state(a.remote_log_segment_id, S.DELETE_SEGMENT_FINISHED, leader_epoch=0,
                                        event_timestamp_ms=7, broker_id=1)
    # the cache agrees with a fresh SUM
    mdm.invalidate_caches()
    assert mdm.remote_log_size(TP) == 600


def test_invalid_transitions_are_rejected(mdm: SqlRemoteLogMetadataManager) -> None:
    mdm.become_leader(TP, 0, 1)
    md = seg(0, 9)
    finished = md.with_state(S.COPY_SEGMENT_FINISHED)
    with pytest.raises(InvalidStateTransitionError):
        mdm.add_remote_log_segment_metadata(finished, leader_epoch=0)
    finish(mdm, md)
    sid = md.remote_log_segment_id
    with pytest.raises(InvalidStateTransitionError, match="COPY_SEGMENT_FINISHED -> COPY_SEGMENT_STARTED"):
        mdm.update_remote_log_segment_state(sid, S.COPY_SEGMENT_STARTED, leader_epoch=0, event_timestamp_ms=1,
                                            broker_id=1)
    with pytest.raises(InvalidStateTransitionError):
        mdm.update_remote_log_segment_state(sid, S.DELETE_SEGMENT_FINISHED, leader_epoch=0,
                                            event_timestamp_ms=1, broker_id=1)
    # self transitions are valid (idempotent retries)
    mdm.update_remote_log_segment_state(sid, S.COPY_SEGMENT_FINISHED, leader_epoch=0, event_timestamp_ms=1,
                                        broker_id=1)
    with pytest.raises(InvalidStateTransitionError, match="already exists"):
        mdm.add_remote_log_segment_metadata(md, leader_epoch=0)
    with pytest.raises(RemoteSegmentNotFoundError):
        mdm.update_remote_log_segment_state(RemoteLogSegmentId.generate(TP), S.COPY_SEGMENT_FINISHED,
                                            leader_epoch=0, event_timestamp_ms=1, broker_id=1)
    mdm.become_leader(TopicPartition("other", 0), 0, 1)
    other_tp = RemoteLogSegmentId(TopicPartition("other", 0), sid.id)
    with pytest.raises(RemoteSegmentNotFoundError):
        mdm.update_remote_log_segment_state(other_tp, S.COPY_SEGMENT_FINISHED, leader_epoch=0,
                                            event_timestamp_ms=1, broker_id=1)


def test_zombie_cannot_start_deleting_or_finish_an_upload(mdm: SqlRemoteLogMetadataManager) -> None:
    mdm.become_leader(TP, 0, 1)
    live, pending = seg(0, 99), seg(100, 199)
    finish(mdm, live)
    mdm.add_remote_log_segment_metadata(pending, leader_epoch=0)
    mdm.become_leader(TP, 1, 2, start_offset=200)
    with pytest.raises(FencedLeaderEpochError, match="fenced by broker 2 at leader epoch 1"):
        mdm.update_remote_log_segment_state(live.remote_log_segment_id, S.DELETE_SEGMENT_STARTED,
                                            leader_epoch=0, event_timestamp_ms=1, broker_id=1)
    with pytest.raises(FencedLeaderEpochError):
        mdm.update_remote_log_segment_state(pending.remote_log_segment_id, S.COPY_SEGMENT_FINISHED,
                                            leader_epoch=0, event_timestamp_ms=1, broker_id=1)
    # the new leader may not adopt the zombie's upload either: it is an orphan
    with pytest.raises(FencedLeaderEpochError, match="orphan"):
        mdm.update_remote_log_segment_state(pending.remote_log_segment_id, S.COPY_SEGMENT_FINISHED,
                                            leader_epoch=1, event_timestamp_ms=1, broker_id=2)
    assert [s.remote_log_segment_id for s in mdm.list_remote_log_segments(TP)] == [live.remote_log_segment_id]
    assert [s.remote_log_segment_id for s in mdm.unreferenced_segments(TP)] == [pending.remote_log_segment_id]


# ---------------------------------------------------------------- compaction and the tiered-compaction KIP draft


def test_publish_compaction_swaps_segments_atomically(mdm: SqlRemoteLogMetadataManager) -> None:
    mdm.become_leader(TP, 0, 1)
    olds = [seg(0, 99, size=1000), seg(100, 199, size=1000), seg(200, 299, size=1000)]
    for md in olds:
        finish(mdm, md)
    new = seg(0, 199, size=600)
    mdm.add_remote_log_segment_metadata(new, leader_epoch=0)
    assert mdm.remote_log_size(TP) == 3000
    args = {"leader_epoch": 0, "new_segment_ids": [new.remote_log_segment_id],
                "replaced_segment_ids": [o.remote_log_segment_id for o in olds[:2]], "cleaner_offsets": {0: 200}}
    mdm.publish_compaction(TP, **args)  # type: ignore[arg-type]
    listed = mdm.list_remote_log_segments(TP)
    assert [(s.start_offset, s.end_offset) for s in listed] == [(0, 199), (200, 299)]
    assert dict(listed[0].cleaner_offsets) == {0: 200}
    assert mdm.remote_log_size(TP) == 1600
    assert mdm.cleaner_offsets(TP) == {0: 200} and mdm.resolve_cleaner_checkpoint(TP) == 200
    sup = mdm.list_remote_log_segments(TP, include_superseded=True)
    assert len(sup) == 4
    assert {s.superseded_by for s in sup if s.superseded_by} == {new.id}
    unref = mdm.unreferenced_segments(TP)
    assert {s.id for s in unref} == {olds[0].id, olds[1].id}
    # a retried publish that already committed is a no-op
    mdm.publish_compaction(TP, **args)  # type: ignore[arg-type]
    assert mdm.remote_log_size(TP) == 1600
    mdm.invalidate_caches(TP)
    assert mdm.remote_log_size(TP) == 1600
    # replacing an already-replaced segment with something else is refused
    other = seg(0, 99, size=10)
    mdm.add_remote_log_segment_metadata(other, leader_epoch=0)
    with pytest.raises(InvalidStateTransitionError, match="already superseded"):
        mdm.publish_compaction(TP, leader_epoch=0, new_segment_ids=[other.remote_log_segment_id],
                               replaced_segment_ids=[olds[0].remote_log_segment_id], cleaner_offsets={0: 200})
    # the failed publish changed nothing
    assert mdm.list_remote_log_segments(TP, states=[S.COPY_SEGMENT_STARTED])[0].id == other.id
    # deferred delete of a superseded segment
    old0 = olds[0].remote_log_segment_id
    mdm.update_remote_log_segment_state(old0, S.DELETE_SEGMENT_STARTED, leader_epoch=0, event_timestamp_ms=9,
                                        broker_id=1)
    assert mdm.remote_log_size(TP) == 1600
    mdm.update_remote_log_segment_state(old0, S.DELETE_SEGMENT_FINISHED, leader_epoch=0, event_timestamp_ms=9,
                                        broker_id=1)
    assert old0.id not in {s.id for s in mdm.unreferenced_segments(TP)}


def test_publish_compaction_that_emptied_segments_and_gap_lookup(mdm: SqlRemoteLogMetadataManager) -> None:
    mdm.become_leader(TP, 0, 1)
    a, b, c = seg(0, 99), seg(100, 199), seg(200, 299)
    for md in (a, b, c):
        finish(mdm, md)
    mdm.publish_compaction(TP, leader_epoch=0, new_segment_ids=[], replaced_segment_ids=[b.remote_log_segment_id],
                           cleaner_offsets={0: 200})
    found = mdm.remote_log_segment_metadata(TP, 150)  # the gap left by compaction
    assert found is not None and found.id == c.id
    assert mdm.remote_log_segment_metadata(TP, 300) is None
    sup = [s for s in mdm.list_remote_log_segments(TP, include_superseded=True) if s.superseded_by is not None]
    assert [(s.id, s.superseded_by) for s in sup] == [(b.id, "")]


def test_cleaner_offsets_never_go_backwards_and_lower_epochs_are_final(mdm: SqlRemoteLogMetadataManager) -> None:
    mdm.become_leader(TP, 0, 1)
    mdm.publish_cleaner_offsets(TP, leader_epoch=0, cleaner_offsets={0: 100})
    with pytest.raises(CleanerOffsetLineageError, match="backwards"):
        mdm.publish_cleaner_offsets(TP, leader_epoch=0, cleaner_offsets={0: 90})
    mdm.publish_cleaner_offsets(TP, leader_epoch=0, cleaner_offsets={0: 100})  # idempotent
    mdm.become_leader(TP, 1, 2, start_offset=150)
    with pytest.raises(CleanerOffsetLineageError, match="earlier epochs"):
        mdm.publish_cleaner_offsets(TP, leader_epoch=1, cleaner_offsets={0: 123, 1: 155})
    with pytest.raises(CleanerOffsetLineageError, match="earlier epochs"):
        mdm.publish_cleaner_offsets(TP, leader_epoch=1, cleaner_offsets={1: 155})
    with pytest.raises(CleanerOffsetLineageError, match="after the publisher"):
        mdm.publish_cleaner_offsets(TP, leader_epoch=1, cleaner_offsets={0: 100, 1: 155, 2: 170})
    with pytest.raises(CleanerOffsetLineageError, match="never decrease"):
        mdm.publish_cleaner_offsets(TP, leader_epoch=1, cleaner_offsets={0: 100, 1: 90})
    mdm.publish_cleaner_offsets(TP, leader_epoch=1, cleaner_offsets={0: 100, 1: 155})
    assert mdm.cleaner_offsets(TP) == {0: 100, 1: 155}
    assert mdm.resolve_cleaner_checkpoint(TP) == 155


@pytest.mark.parametrize("order", ["new_leader_first", "zombie_first"])
def test_seed_004_zombie_table(mdm: SqlRemoteLogMetadataManager, order: str) -> None:
    """The tiered-compaction KIP draft's table: A (LE-0) publishes Seg-0 at CO-100, B takes over at LE-1 and
    publishes Seg-2 {LE-0->100, LE-1->155}; zombie A publishes Seg-1 {LE-0->123}. Seg-1 is
    rejected and readers never see it, whatever the arrival order."""
    a_broker, b_broker = 1, 2
    mdm.become_leader(TP, 0, a_broker, start_offset=0)
    seg0 = seg(0, 99, size=500, broker=a_broker)
    mdm.add_remote_log_segment_metadata(seg0, leader_epoch=0)
    mdm.publish_compaction(TP, leader_epoch=0, new_segment_ids=[seg0.remote_log_segment_id],
                           replaced_segment_ids=[], cleaner_offsets={0: 100})
    # A uploads Seg-1 then stalls before publishing
    seg1 = seg(100, 149, size=300, broker=a_broker)
    mdm.add_remote_log_segment_metadata(seg1, leader_epoch=0)
    # B becomes leader and resolves the checkpoint it continues from
    mdm.become_leader(TP, 1, b_broker, start_offset=150)
    assert mdm.resolve_cleaner_checkpoint(TP) == 100
    b_vector = {**mdm.cleaner_offsets(TP), 1: 155}
    assert b_vector == {0: 100, 1: 155}
    seg2 = seg(100, 154, size=400, broker=b_broker, epochs={0: 100, 1: 150})
    mdm.add_remote_log_segment_metadata(seg2, leader_epoch=1)

    def b_publishes() -> None:
        mdm.publish_compaction(TP, leader_epoch=1, new_segment_ids=[seg2.remote_log_segment_id],
                               replaced_segment_ids=[], cleaner_offsets=b_vector)

    def a_publishes() -> None:
        with pytest.raises(FencedLeaderEpochError, match="fenced by broker 2 at leader epoch 1"):
            mdm.publish_compaction(TP, leader_epoch=0, new_segment_ids=[seg1.remote_log_segment_id],
                                   replaced_segment_ids=[], cleaner_offsets={0: 123})
        # even re-labelled with B's epoch, the LE-0 -> 123 claim contradicts the lineage
        with pytest.raises(FencedLeaderEpochError):
            mdm.publish_compaction(TP, leader_epoch=1, new_segment_ids=[seg1.remote_log_segment_id],
                                   replaced_segment_ids=[], cleaner_offsets={0: 123, 1: 155})
        with pytest.raises(CleanerOffsetLineageError):
            mdm.publish_cleaner_offsets(TP, leader_epoch=1, cleaner_offsets={0: 123})
        with pytest.raises(FencedLeaderEpochError):
            mdm.add_remote_log_segment_metadata(seg(150, 160, broker=a_broker), leader_epoch=0)

    if order == "new_leader_first":
        b_publishes()
        a_publishes()
    else:
        a_publishes()
        b_publishes()
    readers = mdm.list_remote_log_segments(TP)
    assert [s.id for s in readers] == [seg0.id, seg2.id]
    assert dict(readers[1].cleaner_offsets) == {0: 100, 1: 155}
    assert mdm.cleaner_offsets(TP) == {0: 100, 1: 155}
    assert mdm.resolve_cleaner_checkpoint(TP) == 155
    assert mdm.remote_log_size(TP) == 900
    # the zombie's upload is an orphan for the deferred-delete loop, deletable only by B
    assert [s.id for s in mdm.unreferenced_segments(TP)] == [seg1.id]
    with pytest.raises(FencedLeaderEpochError):
        mdm.update_remote_log_segment_state(seg1.remote_log_segment_id, S.DELETE_SEGMENT_STARTED,
                                            leader_epoch=0, event_timestamp_ms=1, broker_id=a_broker)
    mdm.update_remote_log_segment_state(seg1.remote_log_segment_id, S.DELETE_SEGMENT_STARTED, leader_epoch=1,
                                        event_timestamp_ms=1, broker_id=b_broker)
    assert [s.state for s in mdm.unreferenced_segments(TP)] == [S.DELETE_SEGMENT_STARTED]


def test_publish_rejects_segments_uploaded_under_another_epoch(mdm: SqlRemoteLogMetadataManager) -> None:
    mdm.become_leader(TP, 0, 1)
    old_upload = seg(0, 9)
    mdm.add_remote_log_segment_metadata(old_upload, leader_epoch=0)
    mdm.become_leader(TP, 1, 2, start_offset=10)
    with pytest.raises(FencedLeaderEpochError, match="uploaded under leader epoch 0"):
        mdm.publish_compaction(TP, leader_epoch=1, new_segment_ids=[old_upload.remote_log_segment_id],
                               replaced_segment_ids=[], cleaner_offsets={1: 10})
    assert mdm.cleaner_offsets(TP) == {}


def test_orphan_uploads_after_grace_period(mdm: SqlRemoteLogMetadataManager, mclock: MockClock) -> None:
    mdm.become_leader(TP, 0, 1)
    crashed = seg(0, 9)
    mdm.add_remote_log_segment_metadata(crashed, leader_epoch=0)
    assert mdm.unreferenced_segments(TP, orphan_grace_ms=60_000) == []
    mclock.advance(60_001)
    assert [s.id for s in mdm.unreferenced_segments(TP, orphan_grace_ms=60_000)] == [crashed.id]


# ---------------------------------------------------------------- concurrency


def test_concurrent_fenced_writers_from_threads(mdm: SqlRemoteLogMetadataManager) -> None:
    """Brokers race to take leadership and publish: every accepted publish carried the
    epoch that was current when it committed, and the final vector is consistent."""
    mdm.become_leader(TP, 0, 0)
    lock = threading.Lock()
    accepted: list[tuple[int, int]] = []
    fenced = 0
    errors: list[BaseException] = []
    barrier = threading.Barrier(4)

    def broker(bid: int) -> None:
        nonlocal fenced
        barrier.wait()
        for i in range(8):
            epoch = bid * 100 + i + 1
            try:
                mdm.become_leader(TP, epoch, bid, start_offset=0)
            except FencedLeaderEpochError:
                with lock:
                    fenced += 1
                continue
            except BaseException as e:  # noqa: BLE001
                errors.append(e)
                return
            try:
                vector = {**mdm.cleaner_offsets(TP)}
                lower = {e: o for e, o in vector.items() if e < epoch}
                md = seg(0, 9)
                mdm.add_remote_log_segment_metadata(md, leader_epoch=epoch)
                mdm.publish_compaction(TP, leader_epoch=epoch, new_segment_ids=[md.remote_log_segment_id],
                                       replaced_segment_ids=[], cleaner_offsets={**lower, epoch: 10})
                with lock:
                    accepted.append((epoch, bid))
            except FencedLeaderEpochError:
                with lock:
                    fenced += 1
            except BaseException as e:  # noqa: BLE001
                errors.append(e)
                return

    threads = [threading.Thread(target=broker, args=(b,)) for b in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    assert accepted, "at least one publish must win"
    final = mdm.leader_state(TP)
    assert final is not None
    vector = mdm.cleaner_offsets(TP)
    # every epoch in the stored vector is one whose publish was accepted, and each
    # accepted publish's epoch was the registered one: its segment is visible
    assert set(vector) <= {e for e, _ in accepted}
    visible = mdm.list_remote_log_segments(TP)
    assert len(visible) == len(accepted)
    assert {s.cleaner_offsets.get(max(s.cleaner_offsets)) for s in visible} == {10}
    assert mdm.remote_log_size(TP) == 1000 * len(accepted)
    mdm.invalidate_caches()
    assert mdm.remote_log_size(TP) == 1000 * len(accepted)


# ---------------------------------------------------------------- misc


def test_bloom_filters_live_in_the_metadata_store(mdm: SqlRemoteLogMetadataManager) -> None:
    mdm.become_leader(TP, 0, 1)
    md = seg(0, 9)
    finish(mdm, md)
    sid = md.remote_log_segment_id
    assert mdm.get_bloom_filter(sid) is None
    mdm.put_bloom_filter(sid, b"\x00\x01bloom")
    mdm.put_bloom_filter(sid, b"\x02bloom-v2")
    assert mdm.get_bloom_filter(sid) == b"\x02bloom-v2"
    with pytest.raises(RemoteSegmentNotFoundError):
        mdm.put_bloom_filter(RemoteLogSegmentId.generate(TP), b"x")
    for st in (S.DELETE_SEGMENT_STARTED, S.DELETE_SEGMENT_FINISHED):
        mdm.update_remote_log_segment_state(sid, st, leader_epoch=0, event_timestamp_ms=1, broker_id=1)
    assert mdm.get_bloom_filter(sid) is None


def test_segments_registered_together_with_their_blooms_all_or_nothing(mdm: SqlRemoteLogMetadataManager) -> None:
    mdm.become_leader(TP, 3, 1)
    a, b = seg(0, 9, epochs={3: 0}), seg(10, 19, epochs={3: 10})
    mdm.add_remote_log_segments([(a, b"bloom-a"), (b, None)], leader_epoch=3)
    rows = {m.id: m.state for m in mdm.list_remote_log_segments(TP, include_superseded=True, states=[S.COPY_SEGMENT_STARTED])}
    assert rows == {a.id: S.COPY_SEGMENT_STARTED, b.id: S.COPY_SEGMENT_STARTED}
    assert mdm.get_bloom_filter(a.remote_log_segment_id) == b"bloom-a"
    assert mdm.get_bloom_filter(b.remote_log_segment_id) is None
    mdm.add_remote_log_segments([(a, b"bloom-a"), (b, None)], leader_epoch=3)  # a retry changes nothing
    # fenced: nothing of the batch is written
    c, d = seg(20, 29, epochs={2: 20}), seg(30, 39, epochs={2: 30})
    with pytest.raises(FencedLeaderEpochError):
        mdm.add_remote_log_segments([(c, b"c"), (d, b"d")], leader_epoch=2)
    # one bad segment (an id reused with other content) rolls the whole batch back
    e = seg(40, 49, epochs={3: 40})
    clash = RemoteLogSegmentMetadata(a.remote_log_segment_id, 0, 5, 5, 1, 0, 1, {3: 0})
    with pytest.raises(InvalidStateTransitionError):
        mdm.add_remote_log_segments([(e, b"e"), (clash, None)], leader_epoch=3)
    ids = {m.id for m in mdm.list_remote_log_segments(TP, include_superseded=True, states=list(S))}
    assert ids == {a.id, b.id}
    with pytest.raises(InvalidRequestError, match="one partition"):
        mdm.add_remote_log_segments([(e, None), (seg(0, 1, tp=TopicPartition("other", 0)), None)], leader_epoch=3)
    mdm.add_remote_log_segments([], leader_epoch=3)


def test_within_leader_epochs_uses_the_stored_lineage(mdm: SqlRemoteLogMetadataManager) -> None:
    mdm.become_leader(TP, 5, 1, start_offset=10)
    mdm.become_leader(TP, 7, 2, start_offset=15)
    mdm.become_leader(TP, 9, 1, start_offset=100)
    good = seg(10, 50, epochs={5: 10, 7: 15})
    assert mdm.is_segment_within_leader_epochs(good, TP)
    assert not mdm.is_segment_within_leader_epochs(good, TP, log_end_offset=50)
    assert not mdm.is_segment_within_leader_epochs(seg(10, 120, epochs={5: 10, 7: 15}), TP)  # 7 ended at 99
    assert not mdm.is_segment_within_leader_epochs(seg(10, 50, epochs={5: 10, 6: 15}), TP)


def test_partitions_and_delete_partition(mdm: SqlRemoteLogMetadataManager) -> None:
    other = TopicPartition("users", 3)
    for tp in (TP, other):
        mdm.become_leader(tp, 0, 1)
        md = seg(0, 9, tp=tp)
        finish(mdm, md)
        mdm.put_bloom_filter(md.remote_log_segment_id, b"b")
        mdm.publish_cleaner_offsets(tp, leader_epoch=0, cleaner_offsets={0: 10})
    assert mdm.partitions() == sorted([TP, other])
    assert mdm.remote_log_size(TP) == 1000
    mdm.delete_partition(TP)
    mdm.delete_partition(TP)
    assert mdm.partitions() == [other]
    assert mdm.list_remote_log_segments(TP, states=list(S)) == []
    assert mdm.remote_log_size(TP) == 0 and mdm.cleaner_offsets(TP) == {} and mdm.leader_epochs(TP) == []
    assert mdm.remote_log_size(other) == 1000
    mdm.become_leader(TP, 0, 1)  # the partition can be recreated from scratch


def test_closed_manager_raises_store_error(mdm: SqlRemoteLogMetadataManager) -> None:
    mdm.close()
    mdm.close()
    with pytest.raises(MetadataStoreError):
        mdm.leader_state(TP)


def test_state_survives_reopen(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path}/reopen.db"
    with load_metadata_manager(url) as m:
        m.become_leader(TP, 2, 1)
        finish(m, seg(0, 9), epoch=2)
        m.publish_cleaner_offsets(TP, leader_epoch=2, cleaner_offsets={2: 7})
    with load_metadata_manager(url) as m:
        assert m.leader_state(TP).leader_epoch == 2  # type: ignore[union-attr]
        assert m.remote_log_size(TP) == 1000 and m.resolve_cleaner_checkpoint(TP) == 7


def test_load_metadata_manager_urls(tmp_path: Path) -> None:
    with pytest.raises(InvalidConfigError, match="not supported"):
        load_metadata_manager("mysql://x/y")
    with pytest.raises(InvalidConfigError, match="not supported"):
        load_metadata_manager("/just/a/path")
    from metadata.sql import normalize_url

    assert normalize_url("postgresql://u:p@h/db") == "postgresql+psycopg://u:p@h/db"
    assert normalize_url("postgres://u:p@h/db") == "postgresql+psycopg://u:p@h/db"
    assert normalize_url("postgresql+psycopg2://u@h/db") == "postgresql+psycopg://u@h/db"
    assert normalize_url("sqlite:///x.db") == "sqlite:///x.db"


def test_database_failures_are_translated(tmp_path: Path) -> None:
    with pytest.raises(MetadataStoreError, match="retriable"):
        load_metadata_manager("postgresql://nobody:pw@127.0.0.1:1/nodb")
