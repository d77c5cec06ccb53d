"""A raw Kafka wire client for the coordinator tests and an in-process node with its KafkaService (listener + registry + coordinators)."""

from __future__ import annotations

import socket
import struct
import time
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

from service.config import load_config
from service.kafka.registry import response_class_for
from service.kafka.server import KafkaService
from service.node import Node


def read_frame(sock: socket.socket) -> bytes | None:
    """One size-prefixed Kafka frame's body from ``sock``; None when the peer closes first."""
    buf = b""
    while len(buf) < 4:
        chunk = sock.recv(4 - len(buf))
        if not chunk:
            return None
        buf += chunk
    size = struct.unpack(">i", buf)[0]
    body = b""
    while len(body) < size:
        chunk = sock.recv(size - len(body))
        if not chunk:
            return None
        body += chunk
    return body


class Wire:
    """One connection; ``call(request, version)`` sends it and decodes the answer."""

    def __init__(self, port: int) -> None:
        self.sock = socket.create_connection(("127.0.0.1", port), timeout=30)
        self.cid = 0

    def call(self, req: Any, version: int) -> Any:
        self.cid += 1
        req.with_header(correlation_id=self.cid, client_id="coord-test")
        self.sock.sendall(req.encode(version=version, header=True, framed=True))
        size = struct.unpack(">i", self._read(4))[0]
        body = self._read(size)
        assert struct.unpack_from(">i", body, 0)[0] == self.cid
        return response_class_for(type(req)).decode(body, version=version, header=True)

    def _read(self, n: int) -> bytes:
        buf = b""
        while len(buf) < n:
            chunk = self.sock.recv(n - len(buf))
            assert chunk, "connection closed"
            buf += chunk
        return buf

    def close(self) -> None:
        self.sock.close()


def fetch_from_start(w: Wire, topic: str, partitions: Iterable[int]) -> list[tuple[int, int]]:
    """Per partition, its error code and the bytes of records a Fetch v12 from offset 0 answers."""
    from kafka.protocol.consumer import FetchRequest

    P = FetchRequest.FetchTopic.FetchPartition
    req = FetchRequest(replica_id=-1, max_wait_ms=0, min_bytes=0, max_bytes=8 << 20, isolation_level=0,
                       session_id=0, session_epoch=-1, topics=[FetchRequest.FetchTopic(topic=topic, partitions=[
                           P(partition=p, current_leader_epoch=-1, fetch_offset=0, log_start_offset=-1,
                             partition_max_bytes=1 << 20) for p in partitions])], forgotten_topics_data=[],
                       rack_id="")
    return [(p.error_code, len(p.records or b"")) for p in w.call(req, 12).responses[0].partitions]


class InProcessNode:
    """A Node with its Kafka front door on a free port, sharing ``metadata_url`` with other such nodes."""

    def __init__(self, data_dir: Path, metadata_url: str, broker_id: int = 0, **extra: Any) -> None:
        self.node = Node(load_config({"data_dir": data_dir, "metadata": metadata_url, "broker_id": broker_id,
                                      "kafka_port": 0, "kafka_host": "127.0.0.1",
                                      "advertised_listener": None, **extra}, env={}))
        self.node.start()
        self.service = KafkaService(self.node, self.node.config).start()

    @property
    def port(self) -> int:
        return self.service.port

    @property
    def coordinators(self) -> Any:
        return self.service.listener.coordinators

    def wire(self) -> Wire:
        return Wire(self.port)

    def stop(self) -> None:
        self.service.stop()
        self.node.shutdown()


def record_bulk_leader_reads(store: Any, monkeypatch: Any) -> list[Any]:
    """Make ``store`` refuse to read one partition's leader at a time (``leader_state``), and record the topics of
    each bulk read of leaders (``partition_versions``) in the list returned."""
    reads: list[Any] = []
    real = store.partition_versions

    def one_partition(tp: Any) -> Any:
        raise AssertionError(f"{tp}'s leader was read on its own")

    monkeypatch.setattr(store, "leader_state", one_partition)
    monkeypatch.setattr(store, "partition_versions", lambda topics=None: reads.append(topics) or real(topics))
    return reads


def wait_until(cond: Callable[[], Any], timeout_s: float = 10.0, what: str = "condition") -> Any:
    deadline = time.monotonic() + timeout_s
    while True:
        got = cond()
        if got:
            return got
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.05)
