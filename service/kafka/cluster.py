"""This node's membership of the cluster registry: registration at start, a heartbeat thread, the live brokers, topic ids.

What it reads is cached for a moment; while the metadata store fails, the last values read answer (Kafka's brokers
answer Metadata from their metadata cache when the controller is out of reach), so a store outage does not fail
every Metadata request.
"""

from __future__ import annotations

import logging
import threading
import time
import uuid

from log.clock import SYSTEM_CLOCK, Clock
from log.errors import TiercompactError
from metadata.cluster import BrokerRegistration, ClusterRegistry, DuplicateBrokerError, new_incarnation
from service.kafka.registry import BrokerInfo
from service.threads import PeriodicTask

logger = logging.getLogger(__name__)


class ClusterMembership:
    """Registers ``me`` in ``registry``, renews its heartbeat, and answers which brokers are alive.

    The registry is the node's metadata store: its owner (the node) closes it, not :meth:`stop`.
    """

    def __init__(self, registry: ClusterRegistry, me: BrokerInfo, *, heartbeat_ms: int = 2_000,
                 session_timeout_ms: int = 9_000, clock: Clock = SYSTEM_CLOCK, directory_id: str = "") -> None:
        self.registry = registry
        self.me = me
        self.heartbeat_ms = heartbeat_ms
        self.session_timeout_ms = session_timeout_ms
        self.clock = clock
        self.incarnation = new_incarnation(directory_id)
        self._thread: PeriodicTask | None = None
        self._lock = threading.Lock()
        self._cache: tuple[float, list[BrokerRegistration]] | None = None
        #: topic -> (read at, id): another node may delete the topic and forget its id
        self._topic_ids: dict[str, tuple[float, uuid.UUID]] = {}
        #: how long a read of the registry serves Metadata requests (it changes at heartbeat pace)
        self.cache_s = min(heartbeat_ms, 1_000) / 1000

    def start(self) -> ClusterMembership:
        self._register_at_start()
        self._thread = PeriodicTask("tiercompact-kafka-heartbeat", self._beat, self.heartbeat_ms)
        self._thread.start()
        return self

    def _register_at_start(self) -> None:
        """Register, waiting out a live-looking entry of another data dir as a Kafka broker waits for its old
        session to expire (a node of another data dir that crashed is gone after session_timeout_ms): only one
        still renewed past that is another live node with this broker id, a configuration error."""
        deadline = time.monotonic() + (self.session_timeout_ms + self.heartbeat_ms) / 1000
        while True:
            try:
                self.registry.register(self._registration(), session_timeout_ms=self.session_timeout_ms)
                return
            except DuplicateBrokerError as e:
                if time.monotonic() >= deadline:
                    raise
                logger.warning("%s; retrying until its session expires", e)
                time.sleep(min(self.heartbeat_ms, 1_000) / 1000)

    def _registration(self) -> BrokerRegistration:
        return BrokerRegistration(self.me.broker_id, self.me.host, self.me.port, self.incarnation,
                                  self.clock.milliseconds(), self.me.rack)

    def _beat(self) -> None:
        try:
            if not self.registry.heartbeat(self.me.broker_id, self.incarnation, self.clock.milliseconds()):
                logger.error("broker id %d is registered by another node now; this node re-registers (give "
                             "each node its own --broker-id)", self.me.broker_id)
                self.registry.register(self._registration(), session_timeout_ms=self.session_timeout_ms)
        except Exception as e:  # noqa: BLE001 - a store outage: the next beat retries
            logger.warning("cluster heartbeat of broker %d failed: %s", self.me.broker_id, e)

    def stop(self) -> None:
        if self._thread is not None:
            self._thread.shutdown(timeout=5.0)
            self._thread = None
        try:
            self.registry.deregister(self.me.broker_id, self.incarnation)
        except Exception as e:  # noqa: BLE001 - the entry then expires after the session timeout
            logger.warning("could not deregister broker %d: %s", self.me.broker_id, e)

    def registrations(self) -> list[BrokerRegistration]:
        """Every registered broker (cached for a moment). While the store fails, the last ones read: their
        heartbeats age, so the other brokers look dead once the session timeout passes, and this one stays."""
        now = time.monotonic()
        with self._lock:
            if self._cache is not None and now - self._cache[0] < self.cache_s:
                return self._cache[1]
        try:
            regs = self.registry.brokers()
        except TiercompactError:
            with self._lock:
                if self._cache is None:
                    raise
                return self._cache[1]
        with self._lock:
            self._cache = (now, regs)
        return regs

    def live_brokers(self) -> list[BrokerInfo]:
        """The brokers whose heartbeat is within the session timeout, this one always among them."""
        now = self.clock.milliseconds()
        live = [BrokerInfo(r.broker_id, r.host, r.port, r.rack) for r in self.registrations()
                if r.alive(now, self.session_timeout_ms) or r.broker_id == self.me.broker_id]
        if not any(b.broker_id == self.me.broker_id for b in live):
            live.append(self.me)
        return sorted(live, key=lambda b: b.broker_id)

    def topic_id(self, topic: str) -> uuid.UUID:
        now = time.monotonic()
        with self._lock:
            found = self._topic_ids.get(topic)
        if found is not None and now - found[0] < self.cache_s:
            return found[1]
        try:
            tid = self.registry.topic_id(topic)
        except TiercompactError:
            if found is None:
                raise
            return found[1]  # the store fails: the id last read (ids change only when a topic is re-created)
        with self._lock:
            self._topic_ids[topic] = (now, tid)
        return tid

    def topic_ids(self) -> dict[str, uuid.UUID]:
        try:
            ids = self.registry.topic_ids()
        except TiercompactError:
            with self._lock:
                if not self._topic_ids:
                    raise
                return {k: v[1] for k, v in self._topic_ids.items()}  # the store fails: the ids last read
        now = time.monotonic()
        with self._lock:
            self._topic_ids.update((k, (now, v)) for k, v in ids.items())
        return ids

    def drop_cached_topic_id(self, topic: str) -> None:
        """After the topic's deletion (which forgot its stored id): the name gets a new id when created again."""
        with self._lock:
            self._topic_ids.pop(topic, None)
