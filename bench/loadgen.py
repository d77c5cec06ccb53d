"""A small HTTP/1.1 load generator for bench service: N keep-alive connections, each one client
sending its requests back to back (closed loop), in one asyncio loop of this process.

It is deliberately cheap per request (requests are prebuilt bytes; a response is read by its
Content-Length) so that on a small machine the figures measure the server, not the client.
Every response's status is checked; ``check`` may look at the body too.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field


@dataclass
class Outcome:
    latencies: list[float] = field(default_factory=list)
    failures: list[str] = field(default_factory=list)
    elapsed_s: float = 0.0


def build_request(method: str, path: str, host: str, body: bytes | None = None) -> bytes:
    head = f"{method} {path} HTTP/1.1\r\nHost: {host}\r\nUser-Agent: tiercompact-loadgen\r\n"
    if body is not None:
        head += f"Content-Type: application/json\r\nContent-Length: {len(body)}\r\n"
    return (head + "\r\n").encode("ascii") + (body or b"")


async def _client(host: str, port: int, requests: Sequence[bytes], start: int, deadline: float,
                  out: Outcome, check: Callable[[int, bytes], str | None] | None) -> None:
    reader, writer = await asyncio.open_connection(host, port)
    i = start
    try:
        while time.perf_counter() < deadline:
            req = requests[i % len(requests)]
            i += 1
            t0 = time.perf_counter()
            writer.write(req)
            head = await reader.readuntil(b"\r\n\r\n")
            status = int(head[9:12])
            length = 0
            for line in head.split(b"\r\n"):
                if line[:15].lower() == b"content-length:":
                    length = int(line[15:])
                    break
            body = await reader.readexactly(length)
            out.latencies.append(time.perf_counter() - t0)
            problem = f"HTTP {status} {body[:200]!r}" if status != 200 else (check(i, body) if check else None)
            if problem:
                out.failures.append(problem)
    finally:
        writer.close()


def run(host: str, port: int, requests: Sequence[Sequence[bytes]], seconds: float,
        check: Callable[[int, bytes], str | None] | None = None) -> Outcome:
    """One client per entry of ``requests`` (each cycling through its own list) for ``seconds``."""
    out = Outcome()

    async def main() -> None:
        t0 = time.perf_counter()
        await asyncio.gather(*(_client(host, port, reqs, n * 7, t0 + seconds, out, check)
                               for n, reqs in enumerate(requests)))
        out.elapsed_s = time.perf_counter() - t0

    asyncio.run(main())
    return out
