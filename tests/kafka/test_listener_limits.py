"""The listener's own limits on an in-process listener (no node work involved): max.connections refuses the
connections beyond the cap, connections.max.idle.ms closes idle ones, and answers keep request order."""

from __future__ import annotations

import socket
import struct
import time
import types
from collections.abc import Iterator

import pytest
from kafka.protocol.metadata import ApiVersionsRequest, ApiVersionsResponse

from service.kafka.listener import KafkaListener, KafkaListenerConfig


def _frame(cid: int) -> bytes:
    req = ApiVersionsRequest()
    req.with_header(correlation_id=cid, client_id="limits")
    return bytes(req.encode(version=0, header=True, framed=True))


def _answer(sock: socket.socket) -> int | None:
    try:
        head = sock.recv(4, socket.MSG_WAITALL)
    except ConnectionResetError:
        return None
    if len(head) < 4:
        return None
    body = sock.recv(struct.unpack(">i", head)[0], socket.MSG_WAITALL)
    assert ApiVersionsResponse.decode(body[4:], version=0).error_code == 0
    return int(struct.unpack_from(">i", body, 0)[0])


@pytest.fixture
def listener() -> Iterator[KafkaListener]:
    node = types.SimpleNamespace(broker_id=7)
    with KafkaListener(node, KafkaListenerConfig(host="127.0.0.1", port=0, max_connections=3, idle_ms=300)) as lis:
        yield lis


def test_max_connections_and_idle_timeout(listener: KafkaListener) -> None:
    socks = [socket.create_connection(("127.0.0.1", listener.port), timeout=5) for _ in range(3)]
    for i, s in enumerate(socks):
        s.sendall(_frame(i))
        assert _answer(s) == i
    extra = socket.create_connection(("127.0.0.1", listener.port), timeout=5)
    extra.sendall(_frame(99))
    assert _answer(extra) is None  # refused: the fourth connection is closed at once
    time.sleep(0.8)  # past connections.max.idle.ms
    for s in socks:
        assert _answer(s) is None
    again = socket.create_connection(("127.0.0.1", listener.port), timeout=5)
    again.sendall(_frame(5))
    assert _answer(again) == 5
    for s in (*socks, extra, again):
        s.close()


def test_pipelined_requests_are_answered_in_order(listener: KafkaListener) -> None:
    with socket.create_connection(("127.0.0.1", listener.port), timeout=5) as s:
        s.sendall(b"".join(_frame(cid) for cid in range(50)))
        assert [_answer(s) for _ in range(50)] == list(range(50))
