"""The Kafka read path's leader cache (service/kafka/leader_cache.py), through real Fetch requests to an in-process
node with its cluster registry: leaders read in bulk, refreshed off the request path, a stalled metadata store not
holding up the reads of local data, and the staleness bound while the store fails."""

from __future__ import annotations

import threading
import time
from pathlib import Path
from typing import Any

import pytest

from log.local_log import RecordSpec
from log.types import TopicPartition
from metadata.errors import MetadataStoreError
from service.kafka.leader_cache import leader_cache
from tests.kafka.wire import InProcessNode, Wire, fetch_from_start, record_bulk_leader_reads, wait_until

TOPIC, PARTITIONS = "cached", 6


def _fetch(w: Wire, partitions: range = range(PARTITIONS)) -> list[tuple[int, int]]:
    return fetch_from_start(w, TOPIC, partitions)


@pytest.fixture
def node(tmp_path: Path) -> Any:
    n = InProcessNode(tmp_path / "data", f"sqlite:///{tmp_path / 'metadata.db'}", broker_id=3, cleaner_threads=0)
    n.node.create_topic(TOPIC, partitions=PARTITIONS)
    for p in range(PARTITIONS):
        n.node.produce(TOPIC, p, [RecordSpec(b"k%d" % p, b"v")])
    n.node.metadata.become_leader(TopicPartition(TOPIC, 2), 5, 3)
    yield n
    n.stop()


def test_fetch_reads_its_partitions_leaders_in_one_query_and_refreshes_them_off_the_request_path(
        node: InProcessNode, monkeypatch: pytest.MonkeyPatch) -> None:
    """Regression: every Fetch read each partition's leader from the metadata store once its one-second cache
    entry expired, one query per partition: a consumer of a thousand partitions cost the store a thousand queries
    a second, and each one waited on the request path."""
    store = node.node.metadata
    bulk = record_bulk_leader_reads(store, monkeypatch)
    w = node.wire()
    try:
        first = _fetch(w)
        assert [code for code, _ in first] == [0] * PARTITIONS and all(size > 0 for _, size in first)
        assert bulk == [[TOPIC]]  # the six partitions' leaders in one query
        cache = leader_cache(node.node, None)
        time.sleep(cache.ttl_s + 0.1)
        refreshes = cache.refreshes
        assert _fetch(w) == first  # answered from the cache while one refresh reads every leader again
        wait_until(lambda: cache.refreshes > refreshes, what="a background refresh")
        assert bulk == [[TOPIC], [TOPIC]]
    finally:
        w.close()


def test_a_stalled_store_does_not_hold_up_fetches_and_a_failing_one_is_trusted_for_a_bounded_time(
        node: InProcessNode, monkeypatch: pytest.MonkeyPatch) -> None:
    """Regression: once its partition's cached leader was a second old, a Fetch waited on the metadata store for the
    leader: a store that stalls held every read of local data for as long as it stalled."""
    store = node.node.metadata
    w = node.wire()
    released = threading.Event()
    try:
        first = _fetch(w)
        read_at = time.monotonic()  # the leaders were read by that fetch
        cache = leader_cache(node.node, None)
        assert cache.stale_limit_s == 9.0  # the cluster's broker session timeout (broker_session_timeout_ms)
        cache._stale_limit_s = 3.0  # the test's bound

        def stalled(*_args: Any, **_kwargs: Any) -> Any:
            released.wait(30)
            raise MetadataStoreError("injected: the metadata store stalled", retriable=True)

        monkeypatch.setattr(store, "partition_versions", stalled)
        monkeypatch.setattr(store, "leader_state", stalled)
        time.sleep(cache.ttl_s + 0.1)
        t0 = time.monotonic()
        assert _fetch(w) == first
        assert time.monotonic() - t0 < 2  # not the stall's 30 s: answered from the leaders read last
        released.set()  # the store now fails at once: past the bound, its error is the answer

        def failing(*_args: Any, **_kwargs: Any) -> Any:
            raise MetadataStoreError("injected: the metadata store is unreachable", retriable=True)

        monkeypatch.setattr(store, "partition_versions", failing)
        monkeypatch.setattr(store, "leader_state", failing)
        assert _fetch(w, range(2)) == first[:2]  # within the bound
        time.sleep(max(0.0, read_at + 3.3 - time.monotonic()))
        assert all(code != 0 and size == 0 for code, size in _fetch(w, range(2)))  # past it: the store's error
        monkeypatch.undo()
        time.sleep(cache.ttl_s + 0.1)  # a failed read is answered for ttl_s without asking the store again
        assert _fetch(w) == first  # the store answers again
    finally:
        released.set()
        w.close()


def test_partitions_not_cached_while_the_store_stalls_wait_for_it_once_per_request(
        node: InProcessNode, monkeypatch: pytest.MonkeyPatch) -> None:
    """The leaders a Fetch needs and the cache lacks are read in one query; when that read fails after a stall, the
    request's other partitions answer its error at once instead of each waiting out the stall again."""
    store = node.node.metadata
    node.node.create_topic("uncached", partitions=4)
    calls: list[float] = []

    def slow_failure(*_args: Any, **_kwargs: Any) -> Any:
        calls.append(time.monotonic())
        time.sleep(1.0)
        raise MetadataStoreError("injected: the metadata store stalled, then failed", retriable=True)

    monkeypatch.setattr(store, "partition_versions", slow_failure)
    monkeypatch.setattr(store, "leader_state", slow_failure)
    w = node.wire()
    try:
        t0 = time.monotonic()
        answers = fetch_from_start(w, "uncached", range(4))
        assert time.monotonic() - t0 < 2.5  # one stalled read, not five
        assert len(calls) == 1 and all(code != 0 for code, _ in answers)
    finally:
        w.close()
