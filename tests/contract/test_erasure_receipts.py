"""Erasure receipts in the metadata store: stored, read back, listed, updated per
partition (fenced by the leader epoch when given), kept across reopen and schema upgrade;
on every backend (SQLite memory/file, PostgreSQL)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from sqlalchemy import create_engine, delete, insert, inspect

from log.types import TopicPartition
from metadata.erasures import COMPLETE, FAILED, PENDING, VALUES_REMOVED, ErasurePartition, ErasureRecord
from metadata.errors import FencedLeaderEpochError
from metadata.sql import SqlRemoteLogMetadataManager
from metadata.sql.schema import erasure_partitions, erasures, schema_version
from tests.contract.conftest import open_manager

TOPIC = "users"


@pytest.fixture
def mdm(metadata_backend: str, tmp_path: Path) -> Iterator[SqlRemoteLogMetadataManager]:
    m = open_manager(metadata_backend, tmp_path)
    yield m
    m.close()


def record(eid: str, created: int, *, parts: tuple[int, ...] = (0, 1), topic: str = TOPIC) -> ErasureRecord:
    detail = {"keys": [{"key": "alice", "tombstone_offset": 7, "segments": [], "rounds": [], "deleted": [],
                        "verified_ms": None}]}
    return ErasureRecord(eid, topic, created, created + 60_000, ("alice", "b\u00f6b"), "utf-8",
                         tuple(ErasurePartition(p, PENDING, created, detail) for p in parts))


def test_create_get_list_and_update(mdm: SqlRemoteLogMetadataManager) -> None:
    assert mdm.get_erasure("nope") is None
    mdm.create_erasure(record("e1", 1000))
    mdm.create_erasure(record("e2", 2000, parts=(0,), topic="other"))
    got = mdm.get_erasure("e1")
    assert got == record("e1", 1000)
    assert got is not None and got.state == PENDING and got.keys == ("alice", "b\u00f6b")
    assert [r.erasure_id for r in mdm.list_erasures()] == ["e2", "e1"]  # newest first
    assert [r.erasure_id for r in mdm.list_erasures(topic=TOPIC)] == ["e1"]
    detail = {"keys": [{"key": "alice", "verified_ms": 5}], "values_removed_ms": 5}
    mdm.update_erasure_partition("e1", TOPIC, ErasurePartition(0, VALUES_REMOVED, 5, detail))
    got = mdm.get_erasure("e1")
    assert got is not None and got.state == PENDING  # the least advanced partition decides
    assert got.partitions[0].detail == detail
    mdm.update_erasure_partition("e1", TOPIC, ErasurePartition(1, COMPLETE, 6, {}))
    assert mdm.get_erasure("e1").state == VALUES_REMOVED  # type: ignore[union-attr]
    assert [r.erasure_id for r in mdm.list_erasures(states=[PENDING])] == ["e2"]
    mdm.update_erasure_partition("e2", "other", ErasurePartition(0, FAILED, 7, {}, "topic deleted"))
    failed = mdm.get_erasure("e2")
    assert failed is not None and failed.state == FAILED and failed.error == "partition 0: topic deleted"


def test_progress_is_fenced_by_the_leader_epoch(mdm: SqlRemoteLogMetadataManager) -> None:
    tp = TopicPartition(TOPIC, 0)
    mdm.become_leader(tp, 0, broker_id=0)
    mdm.create_erasure(record("e1", 1000))
    mdm.update_erasure_partition("e1", TOPIC, ErasurePartition(0, PENDING, 2, {"n": 1}), leader_epoch=0)
    mdm.become_leader(tp, 1, broker_id=1)
    with pytest.raises(FencedLeaderEpochError):  # the old leader's progress is rejected
        mdm.update_erasure_partition("e1", TOPIC, ErasurePartition(0, VALUES_REMOVED, 3, {"n": 2}), leader_epoch=0)
    assert mdm.get_erasure("e1").partitions[0].detail == {"n": 1}  # type: ignore[union-attr]
    mdm.update_erasure_partition("e1", TOPIC, ErasurePartition(0, VALUES_REMOVED, 4, {"n": 3}), leader_epoch=1)
    assert mdm.get_erasure("e1").partitions[0].state == VALUES_REMOVED  # type: ignore[union-attr]


def test_receipts_survive_reopen(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path}/metadata.db"
    with SqlRemoteLogMetadataManager(url) as m:
        m.create_erasure(record("e1", 1000))
    with SqlRemoteLogMetadataManager(url) as m:
        assert m.get_erasure("e1") == record("e1", 1000)


def test_a_version_3_store_gets_the_erasure_tables(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path}/metadata.db"
    SqlRemoteLogMetadataManager(url).close()
    engine = create_engine(url)
    erasure_partitions.drop(engine)
    erasures.drop(engine)
    with engine.begin() as conn:
        conn.execute(delete(schema_version))
        conn.execute(insert(schema_version).values(version=3))
    assert not inspect(engine).has_table("tc_erasures")
    with SqlRemoteLogMetadataManager(url) as m:
        m.create_erasure(record("e1", 1000))
        assert m.get_erasure("e1") == record("e1", 1000)
    engine.dispose()
