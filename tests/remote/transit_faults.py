"""Uploads damaged in transit, for the checksum tests.

:class:`CorruptingStore` wraps an ObjectStore and flips one byte of the next ``n`` uploads
on their way to it, passing the caller's checksum on unchanged (what a faulty NIC, buffer or
network path does between the RemoteStorageManager and the store).

:class:`CorruptingProxy`: a loopback HTTP/1.1 proxy in front of moto's S3 server that flips
one byte in the body of the next ``n`` PUT requests (a body damaged in transit, after the
client computed its checksums).

    proxy = CorruptingProxy(("127.0.0.1", moto_port)).start()
    store = S3ObjectStore(bucket, endpoint_url=proxy.url, ...)
    proxy.corrupt_next(3)          # the next three PUT bodies arrive with one byte flipped
    proxy.stop()

One upstream connection per request (``Connection: close`` upstream), the client's
keep-alive connection is served in a loop; ``Expect: 100-continue`` is answered by the proxy.
"""

from __future__ import annotations

import contextlib
import socket
import struct
import threading

from remote.object_store import (
    ChecksummedData,
    ForwardingObjectStore,
    ObjectStore,
    PutData,
    open_put_data,
    split_checksum,
)


class CorruptingStore(ForwardingObjectStore):
    """Forwards to ``inner``; the next ``n`` puts (see :meth:`corrupt_next`) arrive damaged."""

    def __init__(self, inner: ObjectStore) -> None:
        super().__init__(inner)
        self._lock = threading.Lock()
        self._to_corrupt = 0
        self.corrupted: list[str] = []

    def corrupt_next(self, n: int) -> None:
        with self._lock:
            self._to_corrupt = n

    def put(self, key: str, data: PutData) -> int:
        with self._lock:
            hit = self._to_corrupt > 0
            if hit:
                self._to_corrupt -= 1
        if not hit:
            return self.inner.put(key, data)
        source, crc = split_checksum(data)
        stream, _, owned = open_put_data(source)
        try:
            body = bytearray(stream.read())
        finally:
            if owned:
                stream.close()
        if not body:
            return self.inner.put(key, data)
        body[len(body) // 2] ^= 0x01
        self.corrupted.append(key)
        return self.inner.put(key, bytes(body) if crc is None else ChecksummedData(bytes(body), crc))


def _read_until(sock: socket.socket, buf: bytearray, marker: bytes) -> bytes | None:
    while marker not in buf:
        chunk = sock.recv(65536)
        if not chunk:
            return None
        buf += chunk
    i = buf.index(marker) + len(marker)
    out = bytes(buf[:i])
    del buf[:i]
    return out


def _read_n(sock: socket.socket, buf: bytearray, n: int) -> bytes:
    while len(buf) < n:
        chunk = sock.recv(65536)
        if not chunk:
            break
        buf += chunk
    out = bytes(buf[:n])
    del buf[:n]
    return out


class CorruptingProxy:
    def __init__(self, target: tuple[str, int]) -> None:
        self.target = target
        self._lock = threading.Lock()
        self._to_corrupt = 0
        self.corrupted: list[str] = []  # request lines of the PUTs that were damaged
        self.requests = 0
        self._listener = socket.create_server(("127.0.0.1", 0))
        self._stopped = False
        self._threads: list[threading.Thread] = []

    @property
    def url(self) -> str:
        host, port = self._listener.getsockname()[:2]
        return f"http://{host}:{port}"

    def corrupt_next(self, n: int) -> None:
        with self._lock:
            self._to_corrupt = n

    def start(self) -> CorruptingProxy:
        t = threading.Thread(target=self._accept, name="corrupting-proxy", daemon=True)
        t.start()
        self._threads.append(t)
        return self

    def stop(self) -> None:
        self._stopped = True
        with contextlib.suppress(OSError):
            self._listener.close()

    def _accept(self) -> None:
        while not self._stopped:
            try:
                conn, _ = self._listener.accept()
            except OSError:
                return
            t = threading.Thread(target=self._serve, args=(conn,), daemon=True)
            t.start()

    def _serve(self, conn: socket.socket) -> None:
        buf = bytearray()
        with conn:
            while True:
                try:
                    head = _read_until(conn, buf, b"\r\n\r\n")
                except OSError:
                    return
                if head is None:
                    return
                lines = head.split(b"\r\n")
                request_line = lines[0].decode("latin-1")
                method = request_line.split(" ", 1)[0]
                kept, length, expect = [lines[0]], 0, False
                for line in lines[1:]:
                    name, _, value = line.partition(b":")
                    lname = name.strip().lower()
                    if lname == b"content-length":
                        length = int(value.strip())
                    if lname == b"expect":
                        expect = True
                        continue
                    if lname == b"connection" or not line:
                        continue
                    kept.append(line)
                kept.append(b"Connection: close")
                if expect:
                    conn.sendall(b"HTTP/1.1 100 Continue\r\n\r\n")
                body = bytearray(_read_n(conn, buf, length))
                with self._lock:
                    self.requests += 1
                    hit = method == "PUT" and len(body) > 0 and self._to_corrupt > 0
                    if hit:
                        self._to_corrupt -= 1
                        self.corrupted.append(request_line)
                if hit:
                    body[len(body) // 2] ^= 0xFF
                with socket.create_connection(self.target) as up:
                    up.sendall(b"\r\n".join(kept) + b"\r\n\r\n" + bytes(body))
                    response = bytearray()
                    while chunk := up.recv(65536):
                        response += chunk
                try:
                    conn.sendall(bytes(response))
                except OSError:
                    return
                if b"\r\nconnection: close" in bytes(response.split(b"\r\n\r\n", 1)[0]).lower():
                    return


class SwitchableForwarder:
    """A loopback TCP forwarder to ``target`` that can be taken down: while ``down``, every
    connection (new or open) is reset at once, as a dead endpoint refuses them.

        fwd = SwitchableForwarder(("127.0.0.1", moto_port)).start()
        fwd.set_down(True)     # the store is unreachable
        fwd.set_down(False)    # and back
    """

    def __init__(self, target: tuple[str, int]) -> None:
        self.target = target
        self._lock = threading.Lock()
        self._down = False
        self._open: set[socket.socket] = set()
        self._listener = socket.create_server(("127.0.0.1", 0))
        self._stopped = False
        self.refused = 0

    @property
    def url(self) -> str:
        host, port = self._listener.getsockname()[:2]
        return f"http://{host}:{port}"

    def set_down(self, down: bool) -> None:
        with self._lock:
            self._down = down
            doomed = list(self._open) if down else []
        for s in doomed:
            _reset(s)

    def start(self) -> SwitchableForwarder:
        threading.Thread(target=self._accept, name="switchable-forwarder", daemon=True).start()
        return self

    def stop(self) -> None:
        self._stopped = True
        with contextlib.suppress(OSError):
            self._listener.close()
        self.set_down(True)

    def _accept(self) -> None:
        while not self._stopped:
            try:
                conn, _ = self._listener.accept()
            except OSError:
                return
            with self._lock:
                down = self._down
                if down:
                    self.refused += 1
            if down:
                _reset(conn)
                continue
            try:
                up = socket.create_connection(self.target)
            except OSError:
                _reset(conn)
                continue
            with self._lock:
                self._open.update((conn, up))
            for a, b in ((conn, up), (up, conn)):
                threading.Thread(target=self._pipe, args=(a, b), daemon=True).start()

    def _pipe(self, src: socket.socket, dst: socket.socket) -> None:
        try:
            while chunk := src.recv(65536):
                dst.sendall(chunk)
        except OSError:
            pass
        finally:
            with self._lock:
                self._open.discard(src)
                self._open.discard(dst)
            for s in (src, dst):  # either side ending ends the connection
                with contextlib.suppress(OSError):
                    s.close()


def _reset(sock: socket.socket) -> None:
    with contextlib.suppress(OSError):
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    with contextlib.suppress(OSError):
        sock.close()
