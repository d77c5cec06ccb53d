"""SASL exchanges on an in-process listener: a SCRAM client written here from RFC 5802 (independent of the server
code) authenticates through SaslAuthenticate and through Kafka's v0 handshake with bare tokens, its proof of the
server checked too; wrong passwords, unknown users and PLAIN without TLS are refused and the connection closed."""

from __future__ import annotations

import base64
import hashlib
import hmac
import os
import socket
import struct
import types
from collections.abc import Iterator
from typing import Any

import pytest
from kafka.protocol.metadata import ApiVersionsRequest
from kafka.protocol.sasl import (
    SaslAuthenticateRequest,
    SaslAuthenticateResponse,
    SaslHandshakeRequest,
    SaslHandshakeResponse,
)

from service.kafka.listener import KafkaListener, KafkaListenerConfig
from service.kafka.sasl import Authenticator

USERS = {"ann": "ann-pass", "bo,b=": "weird name"}
TOKEN = "the-http-token"


@pytest.fixture(scope="module")
def port() -> Iterator[int]:
    auth = Authenticator(USERS, TOKEN)
    with KafkaListener(types.SimpleNamespace(broker_id=1),
                       KafkaListenerConfig(host="127.0.0.1", port=0, authenticator=auth)) as lis:
        yield lis.port


class Conn:
    def __init__(self, port: int) -> None:
        self.sock = socket.create_connection(("127.0.0.1", port), timeout=10)
        self.cid = 0

    def call(self, req: Any, version: int, resp_cls: Any) -> Any:
        self.cid += 1
        req.with_header(correlation_id=self.cid, client_id="sasl-test")
        self.sock.sendall(bytes(req.encode(version=version, header=True, framed=True)))
        body = self.raw_read()
        assert body is not None, "connection closed"
        header = 5 if resp_cls.flexible_version_q(version) else 4
        return resp_cls.decode(body[header:], version=version)

    def raw_send(self, token: bytes) -> None:
        self.sock.sendall(struct.pack(">i", len(token)) + token)

    def raw_read(self) -> bytes | None:
        try:
            head = self.sock.recv(4, socket.MSG_WAITALL)
        except ConnectionResetError:
            return None
        if len(head) < 4:
            return None
        return self.sock.recv(struct.unpack(">i", head)[0], socket.MSG_WAITALL)


def _scram(mech: str, user: str, password: str, send: Any) -> bool:
    """The client side of RFC 5802 over ``send(bytes) -> bytes | None``; True if the server proved itself."""
    h = {"SCRAM-SHA-256": "sha256", "SCRAM-SHA-512": "sha512"}[mech]
    nonce = base64.b64encode(os.urandom(12)).decode()
    first_bare = f"n={user.replace('=', '=3D').replace(',', '=2C')},r={nonce}"
    server_first = send(("n,," + first_bare).encode())
    if server_first is None:
        return False
    attrs = dict(a.split("=", 1) for a in server_first.decode().split(","))
    assert attrs["r"].startswith(nonce)
    salted = hashlib.pbkdf2_hmac(h, password.encode(), base64.b64decode(attrs["s"]), int(attrs["i"]))
    client_key = hmac.new(salted, b"Client Key", h).digest()
    without_proof = f"c=biws,r={attrs['r']}"
    auth_message = f"{first_bare},{server_first.decode()},{without_proof}".encode()
    signature = hmac.new(hashlib.new(h, client_key).digest(), auth_message, h).digest()
    proof = base64.b64encode(bytes(a ^ b for a, b in zip(client_key, signature, strict=True))).decode()
    server_final = send(f"{without_proof},p={proof}".encode())
    if not server_final:
        return False
    expected = hmac.new(hmac.new(salted, b"Server Key", h).digest(), auth_message, h).digest()
    return bool(server_final == b"v=" + base64.b64encode(expected))


def _authenticate(port: int, mech: str, user: str, password: str) -> tuple[bool, Conn]:
    c = Conn(port)
    hs = c.call(SaslHandshakeRequest(mechanism=mech), 1, SaslHandshakeResponse)
    assert hs.error_code == 0 and "PLAIN" not in hs.mechanisms

    def send(token: bytes) -> bytes | None:
        resp = c.call(SaslAuthenticateRequest(auth_bytes=token), 2, SaslAuthenticateResponse)
        return None if resp.error_code else bytes(resp.auth_bytes)

    return _scram(mech, user, password, send), c


@pytest.mark.parametrize("mech", ["SCRAM-SHA-256", "SCRAM-SHA-512"])
def test_scram_users_and_token(port: int, mech: str) -> None:
    for user, password in [*USERS.items(), ("anyone-else", TOKEN)]:
        ok, c = _authenticate(port, mech, user, password)
        assert ok, user
        c.sock.sendall(bytes(_frame_api_versions()))  # authenticated: any API is served now
        assert c.raw_read() is not None


def _frame_api_versions() -> bytearray:
    req = ApiVersionsRequest()
    req.with_header(correlation_id=99, client_id="x")
    return req.encode(version=0, header=True, framed=True)


@pytest.mark.parametrize(("user", "password"), [("ann", "wrong"), ("nobody", "ann-pass"), ("ann", TOKEN)])
def test_wrong_credentials_are_refused_and_closed(port: int, user: str, password: str) -> None:
    ok, c = _authenticate(port, "SCRAM-SHA-256", user, password)
    assert not ok
    assert c.raw_read() is None  # closed after the error answer


def test_v0_handshake_then_bare_tokens(port: int) -> None:
    c = Conn(port)
    assert c.call(SaslHandshakeRequest(mechanism="SCRAM-SHA-512"), 0, SaslHandshakeResponse).error_code == 0

    def send(token: bytes) -> bytes | None:
        c.raw_send(token)
        return c.raw_read()

    assert _scram("SCRAM-SHA-512", "ann", "ann-pass", send)
    c.sock.sendall(bytes(_frame_api_versions()))
    assert c.raw_read() is not None


def test_plain_without_tls_and_out_of_order_exchanges_are_refused(port: int) -> None:
    c = Conn(port)
    hs = c.call(SaslHandshakeRequest(mechanism="PLAIN"), 1, SaslHandshakeResponse)
    assert hs.error_code == 33 and hs.mechanisms == ["SCRAM-SHA-256", "SCRAM-SHA-512"]
    assert c.raw_read() is None
    c = Conn(port)
    resp = c.call(SaslAuthenticateRequest(auth_bytes=b"\0ann\0ann-pass"), 1, SaslAuthenticateResponse)
    assert resp.error_code == 34  # ILLEGAL_SASL_STATE: no handshake first
    assert c.raw_read() is None
