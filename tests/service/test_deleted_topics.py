"""A deleted topic stays deleted: two nodes share one metadata store and one object store; the
leader deletes a topic another node still holds a stale local copy of. That copy is never
registered, uploaded or published again, and the node drops it when it starts."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from log.errors import UnknownTopicOrPartitionError
from log.local_log import RecordSpec
from log.types import TopicPartition
from service.config import load_config
from service.node import Node

TIERED = {"cleanup.policy": "compact", "remote.storage.enable": True, "local.retention.ms": -1}
TP = TopicPartition("t", 0)


def _node(tmp_path: Path, name: str, broker_id: int, **options: Any) -> Node:
    return Node(load_config({"data_dir": tmp_path / name, "remote": (tmp_path / "objects").as_uri(),
                             "metadata": f"sqlite:///{tmp_path}/metadata.db", "broker_id": broker_id,
                             "cleaner_threads": 0, "tiered_cleaner_threads": 0,
                             "tiering_interval_ms": 3_600_000, **options}, env={}))


def _objects(tmp_path: Path) -> list[Path]:
    return [p for p in (tmp_path / "objects").rglob("*") if p.is_file() and "t-0" in str(p)]


def test_a_followers_stale_copy_of_a_deleted_topic_never_comes_back(tmp_path: Path) -> None:
    a = _node(tmp_path, "a", 0)
    b: Node | None = None
    try:
        a.create_topic("t", 1, TIERED)
        a.become_leader("t", 0, 0, 0)
        a.produce("t", 0, [RecordSpec(b"k%d" % i, b"v%d" % i) for i in range(20)])
        a.roll("t", 0)
        a.tier("t", 0)
        b = _node(tmp_path, "b", 1)  # learns t from the metadata store: a follower of it
        stale = b.log_manager.get_log(TP)
        stale.append_records([RecordSpec(b"k%d" % i, b"stale-%d" % i) for i in range(20)])
        stale.roll()
        assert _objects(tmp_path)

        a.delete_topic("t")
        assert not _objects(tmp_path) and a.metadata.leader_state(TP) is None
        assert "t" in a.metadata.deleted_topics()

        # the follower's background pass neither registers itself as leader nor uploads its copy
        res = b.remote.run_once()
        assert "topic 't' was deleted" in " ".join(res[TP].errors)
        assert b.metadata.leader_state(TP) is None and not _objects(tmp_path)
        with pytest.raises(UnknownTopicOrPartitionError):
            b.remote.copy_rolled_segments(TP)
        assert b.metadata.get_topic_config("t") is None and not _objects(tmp_path)

        # at its next start the node drops the stale copy and does not publish it
        b.shutdown()
        b = _node(tmp_path, "b", 1)
        assert [t.name for t in b.log_manager.topics()] == []
        assert not (tmp_path / "b" / "t-0").exists()
        assert b.metadata.get_topic_config("t") is None and b.metadata.leader_state(TP) is None

        # creating the topic again is a new topic: it is not "deleted" any more
        a.create_topic("t", 1, TIERED)
        assert "t" not in a.metadata.deleted_topics()
        a.produce("t", 0, [RecordSpec(b"new", b"1")])
        a.roll("t", 0)
        assert a.tier("t", 0)["copied"] == [0]
    finally:
        if b is not None:
            b.shutdown()
        a.shutdown()
