"""FaultProxy: a loopback TCP proxy in front of an HTTP server (moto's S3) that injects faults.

    proxy = FaultProxy(("127.0.0.1", moto_port)).start()
    endpoint = proxy.url                      # give this to the S3 client instead of moto's
    proxy.set_mode("503", p=0.5)              # half of the new connections answer 503 SlowDown-style
    proxy.set_mode("pass")                    # healthy again

Modes, decided per accepted connection (``p`` is the probability a connection is hit):

* ``pass``: a byte pipe to the target;
* ``refuse``: the connection is reset at once (SO_LINGER 0), as a dead endpoint does;
* ``503``: the request head is read and answered ``503 ServiceUnavailable`` (S3's XML error
  body), then the connection is closed;
* ``delay``: the connection is forwarded after ``delay_s`` seconds (a slow, not dead, store);
* ``slow``: every request on the connection is forwarded after ``delay_s`` seconds and answered
  correctly (an S3 that answers every call late but without an error: a circuit breaker stays
  closed);
* ``trickle``: requests and responses move at ``rate`` bytes a second, a few bytes at a time, so
  no single socket operation waits long (an S3 on a throttled path: every timeout holds, the
  transfer never ends in time);
* ``truncate``: the request is forwarded, and the response is cut: headers plus half of the
  body when it has one (half of the headers when not, unless ``truncate_heads`` is False),
  then the connection is closed;
* ``corrupt``: one byte of the request body (an upload) or of a 200/206 response body (a
  download) is flipped, as a broken NIC or middlebox would.

Switching to any mode but ``pass`` resets the connections open at that moment, so a
client's keep-alive pool cannot bypass the fault. Apart from the modes, :meth:`set_stalled`
freezes every piped connection, open or new, without closing it: no byte moves either way (a
server frozen by a hung disk or a paused VM, or a network dropping packets) until it is called
with False. Thread-safe; counters in :meth:`stats`. The pipe modes work for any TCP protocol
(PostgreSQL's too), the others speak HTTP.
"""

from __future__ import annotations

import contextlib
import random
import select
import socket
import struct
import threading
import time
from collections import Counter

MODES = ("pass", "refuse", "503", "delay", "slow", "trickle", "truncate", "corrupt")
_S3_503 = (b'<?xml version="1.0" encoding="UTF-8"?>\n<Error><Code>ServiceUnavailable</Code>'
           b"<Message>injected by FaultProxy</Message><RequestId>faultproxy</RequestId></Error>")


def _reset(sock: socket.socket) -> None:
    with contextlib.suppress(OSError):
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    with contextlib.suppress(OSError):
        sock.close()


def _read_head(sock: socket.socket, timeout: float = 10.0) -> bytes | None:
    """Bytes up to and including the end of an HTTP head (None if the peer closed first)."""
    sock.settimeout(timeout)
    buf = b""
    while b"\r\n\r\n" not in buf:
        try:
            chunk = sock.recv(65536)
        except OSError:
            return None
        if not chunk:
            return None
        buf += chunk
        if len(buf) > 1 << 20:
            return None
    return buf


def _content_length(head: bytes) -> int | None:
    for line in head.split(b"\r\n"):
        name, _, value = line.partition(b":")
        if name.strip().lower() == b"content-length":
            try:
                return int(value.strip())
            except ValueError:
                return None
    return None


class FaultProxy:
    def __init__(self, target: tuple[str, int], *, host: str = "127.0.0.1", port: int = 0,
                 seed: int | None = None) -> None:
        self.target = target
        self._rng = random.Random(seed)
        self._lock = threading.Lock()
        self._mode = "pass"
        self._p = 1.0
        self._delay_s = 0.0
        self._rate = 0.0
        self._conns: set[socket.socket] = set()
        self._listener = socket.create_server((host, port), reuse_port=False)
        self._listener.settimeout(0.2)
        self._stopped = threading.Event()
        self._stalled = threading.Event()
        self._thread = threading.Thread(target=self._accept_loop, name="fault-proxy", daemon=True)
        self.connections = 0
        self.truncate_heads = True  # False: HEAD responses pass intact in truncate mode
        self.faults: Counter[str] = Counter()
        self.mode_changes = 0

    # ---- control ---------------------------------------------------------------------
    def start(self) -> FaultProxy:
        self._thread.start()
        return self

    @property
    def port(self) -> int:
        return int(self._listener.getsockname()[1])

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def mode(self) -> str:
        return self._mode

    def set_mode(self, mode: str, *, p: float = 1.0, delay_s: float = 2.0, rate: float = 4096.0) -> None:
        if mode not in MODES:
            raise ValueError(f"unknown mode {mode!r}; use one of {MODES}")
        with self._lock:
            self._mode, self._p, self._delay_s, self._rate = mode, p, delay_s, rate
            self.mode_changes += 1
            doomed = list(self._conns) if mode != "pass" else []
        for s in doomed:  # keep-alive pools must not bypass the new mode
            _reset(s)

    def set_stalled(self, stalled: bool) -> None:
        """Freeze (True) or resume (False) every piped connection, leaving them open."""
        if stalled:
            self._stalled.set()
        else:
            self._stalled.clear()

    def stats(self) -> dict[str, object]:
        with self._lock:
            return {"connections": self.connections, "faults": dict(self.faults), "mode_changes": self.mode_changes}

    def stop(self) -> None:
        self._stopped.set()
        self._thread.join(5)
        with contextlib.suppress(OSError):
            self._listener.close()
        with self._lock:
            doomed = list(self._conns)
        for s in doomed:
            _reset(s)

    # ---- plumbing --------------------------------------------------------------------
    def _accept_loop(self) -> None:
        while not self._stopped.is_set():
            try:
                client, _ = self._listener.accept()
            except TimeoutError:
                continue
            except OSError:
                if self._stopped.is_set():
                    return
                time.sleep(0.05)
                continue
            with self._lock:
                self.connections += 1
                mode = self._mode if self._rng.random() < self._p else "pass"
                delay, rate = self._delay_s, self._rate
                if mode != "pass":
                    self.faults[mode] += 1
            threading.Thread(target=self._handle, args=(client, mode, delay, rate), daemon=True,
                             name="fault-proxy-conn").start()

    def _track(self, *socks: socket.socket) -> None:
        with self._lock:
            self._conns.update(socks)

    def _untrack(self, *socks: socket.socket) -> None:
        with self._lock:
            self._conns.difference_update(socks)

    def _handle(self, client: socket.socket, mode: str, delay: float, rate: float) -> None:
        upstream: socket.socket | None = None
        try:
            if mode == "refuse":
                _reset(client)
                return
            if mode == "503":
                head = _read_head(client)
                if head is not None:
                    client.sendall(b"HTTP/1.1 503 Service Unavailable\r\nContent-Type: application/xml\r\n"
                                   b"Content-Length: " + str(len(_S3_503)).encode() + b"\r\n"
                                   b"Connection: close\r\n\r\n" + _S3_503)
                return
            self._track(client)
            if mode == "delay":
                if self._stopped.wait(delay):
                    return
            upstream = socket.create_connection(self.target, timeout=10)
            self._track(upstream)
            if mode in ("truncate", "corrupt"):
                self._exchange(client, upstream, mode)
            else:
                self._pipe(client, upstream, slow_s=delay if mode == "slow" else 0.0,
                           rate=rate if mode == "trickle" else 0.0)
        except OSError:
            pass
        finally:
            self._untrack(client, *([upstream] if upstream else []))
            for s in (client, upstream):
                if s is not None:
                    with contextlib.suppress(OSError):
                        s.close()

    def _pipe(self, a: socket.socket, b: socket.socket, *, slow_s: float = 0.0, rate: float = 0.0) -> None:
        """Bytes both ways; with ``slow_s``, the first bytes the client (``a``) sends after an
        answer (a new request) wait ``slow_s`` first; with ``rate``, bytes go on at that many a
        second each way, in pieces of a tenth of a second."""
        a.settimeout(None)
        b.settimeout(None)
        peers = {a: b, b: a}
        new_request = True
        while not self._stopped.is_set():
            if self._stalled.is_set():  # nothing moves, nothing closes
                self._stopped.wait(0.05)
                continue
            try:
                ready, _, _ = select.select([a, b], [], [], 0.5)
            except (OSError, ValueError):
                return
            if self._stalled.is_set():  # stalled while it waited: what arrived stays unread
                continue
            for s in ready:
                try:
                    data = s.recv(65536)
                except OSError:
                    return
                if not data:
                    return
                if slow_s:
                    if s is a and new_request and self._stopped.wait(slow_s):
                        return
                    new_request = s is b
                try:
                    if rate:
                        self._trickle(peers[s], data, rate)
                    else:
                        peers[s].sendall(data)
                except OSError:
                    return

    def _trickle(self, to: socket.socket, data: bytes, rate: float) -> None:
        step = max(1, int(rate / 10))
        for at in range(0, len(data), step):
            if self._stopped.wait(step / rate):
                raise OSError("proxy stopped")
            to.sendall(data[at:at + step])

    def _exchange(self, client: socket.socket, upstream: socket.socket, mode: str) -> None:
        """Forward one request and answer it damaged (``truncate`` or ``corrupt``), then close."""
        head = _read_head(client)
        if head is None:
            return
        body_len = _content_length(head) or 0
        sep = head.index(b"\r\n\r\n") + 4
        body = bytearray(head[sep:])
        client.settimeout(10)
        while len(body) < body_len:
            chunk = client.recv(65536)
            if not chunk:
                return
            body += chunk
        if mode == "corrupt" and body:
            self._flip(body, "request")
        upstream.sendall(head[:sep] + bytes(body))
        resp = _read_head(upstream, timeout=30)
        if resp is None:
            return
        rsep = resp.index(b"\r\n\r\n") + 4
        rlen = _content_length(resp[:rsep]) or 0
        is_head = head.startswith(b"HEAD ")
        if is_head or resp.split(b" ", 2)[1:2] in ([b"204"], [b"304"]):
            rlen = 0  # no body follows, whatever Content-Length says
        rbody = bytearray(resp[rsep:])
        upstream.settimeout(30)
        while len(rbody) < rlen:
            chunk = upstream.recv(65536)
            if not chunk:
                break
            rbody += chunk
        if mode == "corrupt":
            if rbody and resp.split(b" ", 2)[1:2] in ([b"200"], [b"206"]):
                self._flip(rbody, "response")
            client.sendall(resp[:rsep] + bytes(rbody))
        elif rlen > 1:
            client.sendall(resp[:rsep] + bytes(rbody[: rlen // 2]))
        elif is_head and not self.truncate_heads:
            client.sendall(resp[:rsep])
        else:
            client.sendall(resp[: max(1, rsep // 2)])

    def _flip(self, buf: bytearray, where: str) -> None:
        with self._lock:
            i = self._rng.randrange(len(buf))
            self.faults[f"corrupt-{where}"] += 1
        buf[i] ^= 0x5A
