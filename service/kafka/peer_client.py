"""A small blocking Kafka client one node uses to call another node's listener (WriteTxnMarkers), with SCRAM-SHA-256 when credentials are configured.

Connections are kept per (host, port) and dropped on any error (the caller retries). When the
node has credentials (the HTTP token, or a SASL users file) the connection authenticates as
Kafka's inter-broker listener does: SaslHandshake v1 + SaslAuthenticate v1 with SCRAM-SHA-256
(RFC 5802), as ``tiercompact-broker-<id>`` with the token, or as the users file's first user.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import os
import socket
import ssl
import struct
import threading
from typing import Any

from kafka.protocol.sasl import SaslAuthenticateRequest, SaslHandshakeRequest

from service.kafka.registry import response_class_for


class PeerError(Exception):
    """The peer could not be reached, refused the credentials, or answered garbage."""


def _escape(user: str) -> str:
    return user.replace("=", "=3D").replace(",", "=2C")


def scram_client_exchange(call: Any, user: str, password: str) -> None:
    """SCRAM-SHA-256 as a client over ``call(auth_bytes) -> server bytes``; raises PeerError when refused."""
    nonce = base64.b64encode(os.urandom(18)).decode()
    bare = f"n={_escape(user)},r={nonce}"
    server_first = call(("n,," + bare).encode()).decode()
    fields = dict(kv.split("=", 1) for kv in server_first.split(","))
    if not fields.get("r", "").startswith(nonce):
        raise PeerError("SCRAM: the server's nonce does not extend ours")
    salted = hashlib.pbkdf2_hmac("sha256", password.encode(), base64.b64decode(fields["s"]), int(fields["i"]))
    client_key = hmac.new(salted, b"Client Key", "sha256").digest()
    stored_key = hashlib.sha256(client_key).digest()
    without_proof = f"c=biws,r={fields['r']}"
    auth_message = f"{bare},{server_first},{without_proof}".encode()
    signature = hmac.new(stored_key, auth_message, "sha256").digest()
    proof = bytes(a ^ b for a, b in zip(client_key, signature, strict=True))
    final = call(f"{without_proof},p={base64.b64encode(proof).decode()}".encode()).decode()
    server_key = hmac.new(salted, b"Server Key", "sha256").digest()
    expected = base64.b64encode(hmac.new(server_key, auth_message, "sha256").digest()).decode()
    if not final.startswith("v=") or not hmac.compare_digest(final[2:], expected):
        raise PeerError("SCRAM: the server's signature does not verify")


def credentials_for(config: Any, broker_id: int) -> tuple[str, str] | None:
    """The (user, password) this node presents to its peers, or None when the cluster runs without credentials."""
    token = getattr(config, "token", None)
    if token:
        return f"tiercompact-broker-{broker_id}", token
    users_file = getattr(config, "sasl_users", None)
    if users_file is not None:
        from service.kafka.sasl import read_users_file

        users = read_users_file(users_file)
        if users:
            user = next(iter(users))
            return user, users[user]
    return None


def is_peer_principal(config: Any, principal: str | None) -> bool:
    """Whether an authenticated ``principal`` is another node (Kafka's CLUSTER_ACTION): the name
    :func:`credentials_for` gives nodes. Without credentials on the node every caller is."""
    if principal is None:
        return True
    users = {}
    users_file = getattr(config, "sasl_users", None)
    if users_file is not None:
        from service.kafka.sasl import read_users_file

        users = read_users_file(users_file)
    if getattr(config, "token", None) and principal.startswith("tiercompact-broker-") and principal not in users:
        return True
    return bool(users) and principal == next(iter(users))


class _Conn:
    def __init__(self, host: str, port: int, timeout_s: float, tls: bool) -> None:
        sock = socket.create_connection((host, port), timeout=timeout_s)
        if tls:
            ctx = ssl.create_default_context()
            ctx.check_hostname = False
            ctx.verify_mode = ssl.CERT_NONE
            sock = ctx.wrap_socket(sock, server_hostname=host)
        self.sock = sock
        self.cid = 0

    def call(self, req: Any, version: int) -> Any:
        self.cid += 1
        req.with_header(correlation_id=self.cid, client_id="tiercompact-peer")
        self.sock.sendall(req.encode(version=version, header=True, framed=True))
        size = struct.unpack(">i", self._read(4))[0]
        body = self._read(size)
        if struct.unpack_from(">i", body, 0)[0] != self.cid:
            raise PeerError("the peer answered out of order")
        return response_class_for(type(req)).decode(body, version=version, header=True)

    def _read(self, n: int) -> bytes:
        buf = bytearray()
        while len(buf) < n:
            chunk = self.sock.recv(n - len(buf))
            if not chunk:
                raise PeerError("the peer closed the connection")
            buf += chunk
        return bytes(buf)

    def close(self) -> None:
        try:
            self.sock.close()
        except OSError:
            pass


class PeerClient:
    """Calls to other nodes' Kafka listeners; thread-safe (one call at a time per peer)."""

    def __init__(self, credentials: tuple[str, str] | None = None, *, tls: bool = False,
                 timeout_s: float = 10.0) -> None:
        self.credentials = credentials
        self.tls = tls
        self.timeout_s = timeout_s
        self._conns: dict[tuple[str, int], _Conn] = {}
        self._locks: dict[tuple[str, int], threading.Lock] = {}
        self._guard = threading.Lock()

    def call(self, host: str, port: int, req: Any, version: int) -> Any:
        key = (host, port)
        with self._guard:
            lock = self._locks.setdefault(key, threading.Lock())
        with lock:
            conn = self._conns.get(key)
            try:
                if conn is None:
                    conn = self._connect(host, port)
                    self._conns[key] = conn
                return conn.call(req, version)
            except (OSError, PeerError, ValueError, struct.error) as e:
                self._conns.pop(key, None)
                if conn is not None:
                    conn.close()
                raise PeerError(f"{host}:{port}: {e}") from e

    def _connect(self, host: str, port: int) -> _Conn:
        conn = _Conn(host, port, self.timeout_s, self.tls)
        if self.credentials is None:
            return conn
        user, password = self.credentials
        hs = conn.call(SaslHandshakeRequest(mechanism="SCRAM-SHA-256"), 1)
        if hs.error_code != 0:
            conn.close()
            raise PeerError(f"SaslHandshake refused: error {hs.error_code}")

        def step(data: bytes) -> bytes:
            resp = conn.call(SaslAuthenticateRequest(auth_bytes=data), 1)
            if resp.error_code != 0:
                raise PeerError(f"SaslAuthenticate refused: {resp.error_message}")
            return bytes(resp.auth_bytes)

        try:
            scram_client_exchange(step, user, password)
        except Exception:
            conn.close()
            raise
        return conn

    def close(self) -> None:
        with self._guard:
            for c in self._conns.values():
                c.close()
            self._conns.clear()
