"""Each partition's leader as the Kafka read APIs trust it: read in bulk, refreshed off the request path.

Fetch, ListOffsets, OffsetForLeaderEpoch, DescribeProducers and DescribeLogDirs answer only for the partitions this
node leads, and the leader is the partition's record in the shared metadata store. Reading it per partition per
request would cost a store round trip for every partition of every Fetch; it is cached instead, per node:

* a partition not cached yet is read when a request first needs it, every such partition of the request in one
  query (:meth:`LeaderCache.ensure`);
* an entry older than ``LEADER_TTL_S`` is still answered, and one background refresh reads every cached
  partition's record in one query (stale-while-revalidate: a request never waits for the store once its
  partitions are known, so a slow store does not hold up the read path);
* while the store fails (or stalls), the entries go on being answered until ``stale_limit_s`` (the cluster's
  broker session timeout, 9 s by default) after they were last read: past that the other nodes take this one
  for dead, and a read reads the store again, answering its error while it fails, as a broker whose controller
  session expired is fenced. An entry nobody asked for that long is read again the same way.
  Kafka's brokers likewise serve from their metadata cache while the controller is out of reach.

A caller about to write (DeleteRecords) asks with ``fresh=True``: an entry older than ``LEADER_TTL_S`` is read again
before it answers, as before this cache existed. A leadership move shows here within ``LEADER_TTL_S`` plus one
refresh, as it did with a per-partition read every ``LEADER_TTL_S``.
"""

from __future__ import annotations

import logging
import threading
import time
import weakref
from collections.abc import Iterable
from typing import Any

from log.errors import TiercompactError
from log.types import TopicPartition
from service.kafka.metadata_api import PartitionLeader, leader_of_record, read_leader_records
from service.per_node import per_node

logger = logging.getLogger(__name__)

#: how long a partition's leader, read from the metadata store, is trusted before it is read again
LEADER_TTL_S = 1.0


class LeaderCache:
    """One node's cache of its partitions' leaders (thread-safe; reads block on the store: call from workers)."""

    def __init__(self, node: Any, cluster: Any, *, ttl_s: float = LEADER_TTL_S,
                 stale_limit_s: float | None = None) -> None:
        self._node = weakref.ref(node)  # the cache is the value of a weak mapping keyed by the node
        self.cluster = cluster
        self.ttl_s = ttl_s
        self._stale_limit_s = stale_limit_s
        self._lock = threading.Lock()
        self._entries: dict[TopicPartition, tuple[float, PartitionLeader]] = {}
        self._refreshing = False
        #: the last failed read of the store, and when: for ``ttl_s`` after it, a partition that needs a read now
        #: gets that error at once, so a stalled store holds up one request per ``ttl_s``, not one per partition
        self._failed: tuple[float, TiercompactError] | None = None
        self._warned_at = 0.0
        self.refreshes = 0  # background refreshes run (tests, diagnostics)

    @property
    def node(self) -> Any:
        node = self._node()
        if node is None:
            raise RuntimeError("the node of this leader cache is gone")
        return node

    @property
    def stale_limit_s(self) -> float:
        if self._stale_limit_s is not None:
            return self._stale_limit_s
        return float(self.node.config.broker_session_timeout_ms) / 1000  # the session the cluster registry uses

    def ensure(self, tps: Iterable[TopicPartition]) -> None:
        """Read the leaders of the partitions of ``tps`` not cached yet, in one query. A store failure is left to
        :meth:`leader`, which then answers it for those partitions."""
        with self._lock:
            missing = {tp for tp in tps if tp not in self._entries}
        if not missing:
            return
        try:
            self._fill(missing)
        except TiercompactError:
            pass

    def leader(self, tp: TopicPartition, *, fresh: bool = False) -> PartitionLeader:
        """``tp``'s leader; raises the store's error when it cannot be known (see the module's rules)."""
        now = time.monotonic()
        with self._lock:
            hit = self._entries.get(tp)
        age = now - hit[0] if hit is not None else 0.0
        if hit is None or age > self.stale_limit_s or (fresh and age > self.ttl_s):
            failed = self._failed
            if failed is not None and now - failed[0] < self.ttl_s:
                raise failed[1]
            return self._fill({tp})[tp]  # read now: a store failure is the caller's
        if age > self.ttl_s:
            self._refresh_soon()
        return hit[1]

    def _fill(self, tps: set[TopicPartition]) -> dict[TopicPartition, PartitionLeader]:
        """Read the leaders of ``tps`` (their topics' records in one query) and cache them."""
        now = time.monotonic()
        try:
            records = read_leader_records(self.node, {tp.topic for tp in tps})
        except TiercompactError as e:
            self._failed = (time.monotonic(), e)
            raise
        self._failed = None
        live = {b.broker_id for b in self.cluster.brokers()}
        got = {tp: leader_of_record(self.node, self.cluster, tp, records.get(tp), live) for tp in tps}
        with self._lock:
            self._entries.update((tp, (now, lead)) for tp, lead in got.items())
        return got

    def _refresh_soon(self) -> None:
        with self._lock:
            if self._refreshing:
                return
            self._refreshing = True
        threading.Thread(target=self._refresh, name="tiercompact-kafka-leaders", daemon=True).start()

    def _refresh(self) -> None:
        try:
            with self._lock:
                tps = set(self._entries)
            self._fill(tps)
        except TiercompactError as e:
            now = time.monotonic()
            if now - self._warned_at >= 60:
                self._warned_at = now
                logger.warning("refreshing the partitions' leaders failed (the leaders read last answer for up to "
                               "%.0f s): %s", self.stale_limit_s, e)
        except Exception:  # noqa: BLE001 - a bug here must not end the read path; the next refresh retries
            logger.exception("refreshing the partitions' leaders failed")
        finally:
            with self._lock:
                self._refreshing = False
                self.refreshes += 1

    def forget(self) -> None:
        """Drop every entry (the next reads go to the store)."""
        with self._lock:
            self._entries.clear()


_cache_of = per_node(lambda node: LeaderCache(node, None))


def leader_cache(node: Any, cluster: Any) -> LeaderCache:
    """The node's cache (one per node, made on first use), reading the cluster's live brokers through ``cluster``
    (the node's Kafka listener's view; None keeps the one given before)."""
    cache = _cache_of(node)
    if cluster is not None:
        cache.cluster = cluster
    return cache
