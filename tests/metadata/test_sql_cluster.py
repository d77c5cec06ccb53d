"""The cluster registry's SQL store: registration, duplicate broker ids, heartbeats, liveness, stable topic ids."""

from __future__ import annotations

from pathlib import Path

import pytest

from metadata.cluster import BrokerRegistration, DuplicateBrokerError
from metadata.sql.cluster import SqlClusterRegistry
from tests.support.old_store import store_at_version


def _reg(broker: int, incarnation: str, now: int, port: int = 9092) -> BrokerRegistration:
    return BrokerRegistration(broker, "127.0.0.1", port, incarnation, now)


def test_brokers_register_beat_and_expire(shared_store_url: str) -> None:
    url = shared_store_url
    a, b = SqlClusterRegistry(url), SqlClusterRegistry(url)  # two nodes, one store
    try:
        a.register(_reg(1, "a1", 1_000), session_timeout_ms=500)
        b.register(_reg(2, "b1", 1_000, 9093), session_timeout_ms=500)
        assert [(r.broker_id, r.port) for r in a.brokers()] == [(1, 9092), (2, 9093)]
        with pytest.raises(DuplicateBrokerError, match="broker id 1 is registered by a live node"):
            b.register(_reg(1, "other", 1_200), session_timeout_ms=500)
        assert a.heartbeat(1, "a1", 1_400)
        assert not a.heartbeat(1, "stale-incarnation", 1_400)
        live = [r.broker_id for r in b.brokers() if r.alive(1_700, 500)]
        assert live == [1]  # broker 2 last beat at 1_000
        b.register(_reg(2, "b2", 2_000, 9094), session_timeout_ms=500)  # expired: the id may be taken again
        assert {r.broker_id: r.incarnation for r in a.brokers()} == {1: "a1", 2: "b2"}
        a.deregister(1, "a1")
        assert [r.broker_id for r in b.brokers()] == [2]
    finally:
        a.close()
        b.close()


def test_a_restart_over_the_same_data_dir_takes_its_entry_over_at_once(shared_store_url: str) -> None:
    """An incarnation names its data dir: a new process over the same dir (which holds the dir's lock, so the old
    one is gone) replaces a live-looking entry at once, as after a kill -9; another dir's must wait for expiry."""
    from metadata.cluster import new_incarnation, same_directory

    first, again, other = new_incarnation("d" * 32), new_incarnation("d" * 32), new_incarnation("e" * 32)
    assert same_directory(first, again) and not same_directory(first, other)
    assert not same_directory(new_incarnation(), new_incarnation())  # no data dir named: never the same
    reg = SqlClusterRegistry(shared_store_url)
    try:
        reg.register(_reg(3, first, 1_000), session_timeout_ms=9_000)
        reg.register(_reg(3, again, 1_100), session_timeout_ms=9_000)  # 100 ms later: still "alive", same dir
        assert {r.broker_id: r.incarnation for r in reg.brokers()}[3] == again
        with pytest.raises(DuplicateBrokerError, match="broker id 3 is registered by a live node"):
            reg.register(_reg(3, other, 1_200), session_timeout_ms=9_000)
    finally:
        reg.close()


def test_topic_ids_are_stable_and_shared(shared_store_url: str) -> None:
    url = shared_store_url
    a, b = SqlClusterRegistry(url), SqlClusterRegistry(url)
    try:
        tid = a.topic_id("orders")
        assert b.topic_id("orders") == tid == a.topic_id("orders")
        assert a.topic_id("other") != tid
        assert b.topic_ids() == {"orders": tid, "other": a.topic_id("other")}
        a.forget_topic_id("orders")
        assert b.topic_id("orders") != tid  # a topic created again under the name is another topic
    finally:
        a.close()
        b.close()


def test_the_cluster_id_is_kafka_shaped_shared_and_kept(shared_store_url: str, tmp_path: Path) -> None:
    """Kafka's cluster.id: a random UUID in base64url (22 characters), one per cluster: every node of the store
    reads the one the first node created, and another store has another."""
    import base64
    from concurrent.futures import ThreadPoolExecutor

    nodes = [SqlClusterRegistry(shared_store_url) for _ in range(4)]
    other = SqlClusterRegistry(f"sqlite:///{tmp_path / 'other.db'}")
    try:
        with ThreadPoolExecutor(4) as pool:  # nodes starting at once agree on one id
            ids = set(pool.map(lambda r: r.cluster_id(), nodes))
        (cid,) = ids
        assert len(cid) == 22 and len(base64.urlsafe_b64decode(cid + "==")) == 16
        assert nodes[0].cluster_id() == cid and other.cluster_id() != cid
    finally:
        for r in (*nodes, other):
            r.close()


def test_a_version_9_store_gets_the_cluster_id_table(tmp_path: Path) -> None:
    from metadata.sql.schema import cluster

    with store_at_version(tmp_path, 9, cluster) as url:
        reg = SqlClusterRegistry(url)
        try:
            assert len(reg.cluster_id()) == 22
        finally:
            reg.close()


def test_a_version_4_store_gets_the_cluster_and_producer_id_tables(tmp_path: Path) -> None:
    from metadata.producer_ids import ProducerIdAllocator
    from metadata.sql import SqlRemoteLogMetadataManager
    from metadata.sql.schema import brokers, producer_id_blocks, topic_ids

    with store_at_version(tmp_path, 4, brokers, topic_ids, producer_id_blocks) as url:
        with SqlRemoteLogMetadataManager(url) as m:  # one store, one engine: every protocol on it
            m.register(_reg(1, "a1", 1_000), session_timeout_ms=500)
            assert [r.broker_id for r in m.brokers()] == [1]
            assert m.topic_id("orders") == m.topic_ids()["orders"]
            assert ProducerIdAllocator(m, broker_id=1, block_size=5).next_id() == 0
