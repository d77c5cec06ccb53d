"""The cluster registry contract: nodes sharing a metadata store register (broker id, listener, heartbeat); the
cluster's id and its topic ids."""

from __future__ import annotations

import base64
import uuid
from dataclasses import dataclass
from typing import Protocol

from log.errors import TiercompactError


class DuplicateBrokerError(TiercompactError):
    """Another live node already registered this broker id (Kafka's DUPLICATE_BROKER_REGISTRATION)."""


@dataclass(frozen=True, slots=True)
class BrokerRegistration:
    """One node as the registry holds it: its Kafka identity and its last heartbeat."""

    broker_id: int
    host: str
    port: int
    #: ``<data dir id>.<random id per process start>`` (:func:`new_incarnation`): a restart of the same broker id
    #: replaces its own entry
    incarnation: str
    heartbeat_ms: int
    rack: str | None = None

    def alive(self, now_ms: int, session_timeout_ms: int) -> bool:
        return now_ms - self.heartbeat_ms <= session_timeout_ms


def new_incarnation(directory_id: str = "") -> str:
    """A process start's incarnation: the data dir's id (log.log_manager's directory.id), a dot, a random id (96
    bits: the column holds 64 characters)."""
    return f"{directory_id}.{uuid.uuid4().hex[:24]}" if directory_id else uuid.uuid4().hex


def new_cluster_id() -> str:
    """A new cluster id as Kafka makes one (``Uuid.randomUuid().toString()``: 16 random bytes, base64url, no
    padding)."""
    return base64.urlsafe_b64encode(uuid.uuid4().bytes).rstrip(b"=").decode()


def same_directory(a: str, b: str) -> bool:
    """Whether two incarnations are process starts over one data dir. A process holds its data dir's lock for
    life, so a new start over the dir proves the old one gone, however fresh its heartbeat (a restart right after
    a kill -9 need not wait for the session timeout)."""
    da, _, _ = a.rpartition(".")
    db, _, _ = b.rpartition(".")
    return bool(da) and da == db


class ClusterRegistry(Protocol):
    """Brokers and topic ids shared by every node on the same metadata store (SQL:
    :mod:`metadata.sql.cluster`)."""

    def register(self, reg: BrokerRegistration, *, session_timeout_ms: int) -> None:
        """Add or replace this broker's entry.

        Raises:
            DuplicateBrokerError: another incarnation, not of this data dir (:func:`same_directory`), holds the
                broker id and its heartbeat is younger than ``session_timeout_ms``.
        """

    def heartbeat(self, broker_id: int, incarnation: str, now_ms: int) -> bool:
        """Renew the entry; False if it is no longer this incarnation's (another node took the id)."""

    def deregister(self, broker_id: int, incarnation: str) -> None:
        """Remove the entry (a clean stop), if it is still this incarnation's."""

    def brokers(self) -> list[BrokerRegistration]:
        """Every registered broker, live or not, by id."""

    def cluster_id(self) -> str:
        """The cluster's id (Kafka's cluster.id: a random UUID, base64url without padding, 22 characters), created by
        the first node that asks and the same on every node sharing the store."""

    def topic_id(self, topic: str) -> uuid.UUID:
        """The topic's stable id (Kafka's topic UUID), created on first use and the same on every node."""

    def topic_ids(self) -> dict[str, uuid.UUID]:
        """Every topic id known, by topic name."""

    def forget_topic_id(self, topic: str) -> None:
        """Drop a deleted topic's id: a topic created again under the name gets a new one."""
