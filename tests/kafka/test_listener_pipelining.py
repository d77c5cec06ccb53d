"""The listener's hot path: response framing equals kafka.protocol's ResponseHeader, and a connection's pipelined
produce requests share lane jobs while keeping Kafka's per-connection order (a non-pipelined request waits for them)."""

from __future__ import annotations

import asyncio
import struct

import pytest
from kafka.protocol.api_header import ResponseHeader

from service.kafka.lane import Lane
from service.kafka.listener import _frame, _frame_pieces


@pytest.mark.parametrize("flexible", [False, True])
def test_response_framing_matches_the_protocol_librarys_header(flexible: bool) -> None:
    body = b"\x00\x01body"
    header = bytes(ResponseHeader(correlation_id=123456).encode(flexible=flexible))
    expected = struct.pack(">i", len(header) + len(body)) + header + body
    assert _frame(123456, body, flexible=flexible) == expected
    assert b"".join(bytes(p) for p in _frame_pieces(123456, [body[:3], memoryview(body[3:])], flexible=flexible)) \
        == expected


def test_the_lane_runs_queued_work_in_order_in_few_jobs_and_idle_waits_for_it() -> None:
    ran: list[int] = []

    async def runner(fn, *args):  # type: ignore[no-untyped-def]
        await asyncio.sleep(0.01)  # a worker thread's latency: work queued meanwhile joins the next job
        return fn(*args)

    def work(i: int) -> int:
        if i == 3:
            raise ValueError("bad batch")
        ran.append(i)
        return i * 10

    async def main() -> None:
        lane = Lane(runner, max_bytes=100)
        futs = [lane.submit(work, i, size=10) for i in range(6)]
        assert lane.busy
        await lane.idle()
        assert not lane.busy
        assert ran == [0, 1, 2, 4, 5]
        assert [f.result() for i, f in enumerate(futs) if i != 3] == [0, 10, 20, 40, 50]
        assert isinstance(futs[3].exception(), ValueError)
        assert lane.jobs == 1 and lane.items == 6
        more = [lane.submit(work, 10 + i, size=60) for i in range(2)]
        await lane.room()  # 120 bytes queued > 100: waits until they ran
        assert all(f.done() for f in more)

    asyncio.run(main())


def test_a_lane_item_is_settled_when_its_own_work_ran_not_when_the_job_ends() -> None:
    """A request's answer (and its fsync wait) starts as soon as its append ran, though later requests of the same job
    are still running: a slow neighbour does not hold back what is done."""
    import threading
    from concurrent.futures import ThreadPoolExecutor

    release = threading.Event()
    pool = ThreadPoolExecutor(1)

    async def runner(fn, *args):  # type: ignore[no-untyped-def]
        return await asyncio.get_running_loop().run_in_executor(pool, fn, *args)

    def slow() -> str:
        assert release.wait(10)
        return "slow"

    async def main() -> None:
        lane = Lane(runner, max_bytes=1 << 20)
        first = lane.submit(lambda: "first")
        second = lane.submit(slow)
        assert await asyncio.wait_for(first, 5) == "first"
        assert not second.done() and lane.busy  # the job is still running its second item
        release.set()
        assert await asyncio.wait_for(second, 5) == "slow"
        await lane.idle()
        assert lane.jobs == 1 and lane.items == 2

    try:
        asyncio.run(main())
    finally:
        release.set()
        pool.shutdown()


@pytest.mark.parametrize("flexible", [False, True])
def test_the_request_header_parse_matches_the_protocol_librarys(flexible: bool) -> None:
    import io
    import random

    from kafka.protocol.api_header import RequestHeader

    from service.kafka.listener import request_header

    rng = random.Random(5)
    for client_id in [None, "", "rdkafka", "ü-client" * 20]:
        head = RequestHeader(request_api_key=0, request_api_version=9, correlation_id=rng.randrange(1 << 31),
                             client_id=client_id)
        raw = bytes(head.encode(flexible=flexible))
        if flexible:  # a tagged field the broker does not know (tag 7, 3 bytes) must be skipped
            raw = raw[:-1] + b"\x01\x07\x03abc"
        frame = raw + b"BODY"
        data = io.BytesIO(frame)
        expected = RequestHeader.decode(data, flexible=flexible)
        got_id, at = request_header(frame, flexible)
        assert (got_id, at) == (expected.client_id, data.tell())
        assert frame[at:] == b"BODY"
    for bad in (b"\x00\x00\x00\x09\x00\x00\x00\x01\x00\x05ab", b"\x00\x00\x00\x09\x00\x00\x00\x01\xff\xfe"):
        with pytest.raises(ValueError):
            request_header(bad, flexible)
