"""The metadata follower on in-process nodes sharing one metadata store and one object store: one
query per pass, a changed token only when something was written, a deposed leader refuses produce
requests and reads after one pass, and a follower drops the local copies the new leader compacted."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from log.local_log import RecordSpec
from log.types import TopicPartition
from metadata.errors import NotLeaderForPartitionError
from service.config import load_config
from service.node import Node

TOPIC = "follow"
TP = TopicPartition(TOPIC, 0)
CONFIG = {"cleanup.policy": "compact", "remote.storage.enable": True, "local.retention.ms": 0,
          "min.cleanable.dirty.ratio": 0.01}


def _node(root: Path, name: str, broker_id: int) -> Node:
    return Node(load_config({
        "data_dir": root / name, "broker_id": broker_id, "remote": (root / "objects").as_uri(),
        "metadata": f"sqlite:///{root / 'metadata.db'}", "cleaner_threads": 0,
        "tiering_interval_ms": 3_600_000, "roll_check_interval_ms": 3_600_000,
        "metadata_sync_interval_ms": 3_600_000}, env={})).start()  # the test drives every pass


@pytest.fixture
def nodes(tmp_path: Path) -> Iterator[tuple[Node, Node]]:
    a, b = _node(tmp_path, "a", 0), _node(tmp_path, "b", 1)
    try:
        yield a, b
    finally:
        a.shutdown()
        b.shutdown()


def _fill(node: Node, generations: int, keys: int = 10) -> None:
    for g in range(generations):
        node.produce(TOPIC, 0, [RecordSpec(f"k{i}".encode(), f"v{g}-{i}".encode()) for i in range(keys)])
        node.roll(TOPIC, 0)
    node.tier(TOPIC, 0)


def test_the_token_changes_with_writes_only(nodes: tuple[Node, Node]) -> None:
    a, _b = nodes
    a.create_topic(TOPIC, 1, CONFIG)
    _fill(a, 1)
    first = a.metadata.partition_versions([TOPIC])[TP]
    assert (first.leader_epoch, first.broker_id) == (0, 0)
    assert a.metadata.partition_versions([TOPIC])[TP] == first  # reading changes nothing
    _fill(a, 1)  # an upload is a fenced write of the partition
    assert a.metadata.partition_versions([TOPIC])[TP].token != first.token
    assert a.metadata.partition_versions(["other"]) == {}


def test_a_deposed_leader_refuses_produce_and_reads_after_one_pass(nodes: tuple[Node, Node]) -> None:
    a, b = nodes
    a.create_topic(TOPIC, 1, CONFIG)
    b.create_topic(TOPIC, 1, CONFIG)
    _fill(a, 2)
    a.follower.run_once()
    assert a.remote.is_leader_cached(TP)
    b.become_leader(TOPIC, 0, 1, 1)
    assert a.remote.is_leader_cached(TP)  # A has not looked yet: a zombie
    a.follower.run_once()
    with pytest.raises(NotLeaderForPartitionError, match="broker 1"):
        a.produce(TOPIC, 0, [RecordSpec(b"k", b"late")])
    with pytest.raises(NotLeaderForPartitionError):
        a.read(TOPIC, 0, 0)
    assert b.read(TOPIC, 0, 0, max_records=1000).records  # B serves (restored from the remote tier)


def test_a_follower_drops_the_copies_the_leader_compacted(nodes: tuple[Node, Node]) -> None:
    a, b = nodes
    a.create_topic(TOPIC, 1, CONFIG)
    b.create_topic(TOPIC, 1, CONFIG)
    _fill(a, 4)
    held = [s for s in a.log(TOPIC, 0).all_segments() if s.size]
    assert len(held) == 4
    b.become_leader(TOPIC, 0, 1, 1)
    b.produce(TOPIC, 0, [RecordSpec(f"k{i}".encode(), f"b-{i}".encode()) for i in range(10)])
    b.roll(TOPIC, 0)
    b.tier(TOPIC, 0)
    b.clean(TOPIC, 0)  # publishes a compaction of the remote tier
    cp = b.metadata.resolve_cleaner_checkpoint(TP)
    assert cp is not None and cp > 0
    passes = a.follower.passes
    a.follower.run_once()
    assert a.follower.passes == passes + 1
    left = [s for s in a.log(TOPIC, 0).all_segments() if s.size and s.read_next_offset() <= cp]
    assert left == []  # nothing the leader compacted stays here
    assert a.cleaner_checkpoint(TP) == cp
    a.follower.run_once()  # nothing changed: nothing to do
