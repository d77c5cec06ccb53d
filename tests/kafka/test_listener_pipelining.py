"""The listener's hot path: response framing equals kafka.protocol's ResponseHeader, and a connection's pipelined
produce requests share lane jobs while keeping Kafka's per-connection order (a non-pipelined request waits for them)."""

from __future__ import annotations

import asyncio
import struct
import threading
from collections.abc import Awaitable, Callable

import pytest
from kafka.protocol.api_header import ResponseHeader

from service.kafka.lane import Lane
from service.kafka.listener import _frame, _frame_pieces
from service.request_threads import RequestThreads


@pytest.mark.parametrize("flexible", [False, True])
def test_response_framing_matches_the_protocol_librarys_header(flexible: bool) -> None:
    body = b"\x00\x01body"
    header = bytes(ResponseHeader(correlation_id=123456).encode(flexible=flexible))
    expected = struct.pack(">i", len(header) + len(body)) + header + body
    assert _frame(123456, body, flexible=flexible) == expected
    assert b"".join(bytes(p) for p in _frame_pieces(123456, [body[:3], memoryview(body[3:])], flexible=flexible)) \
        == expected


def _run(main: Callable[[], Awaitable[None]], workers: RequestThreads, *gates: threading.Event) -> None:
    """Run ``main`` on a fresh loop; whatever happens, open ``gates`` (so no worker stays blocked) and stop ``workers``."""
    try:
        asyncio.run(main())
    finally:
        for gate in gates:
            gate.set()
        workers.stop()


def test_the_lane_runs_queued_work_in_order_in_few_jobs_and_idle_waits_for_it() -> None:
    ran: list[int] = []
    gate = threading.Event()

    def work(i: int) -> int:
        if i == 0:
            assert gate.wait(10)  # the first job is busy while the rest queue: they make the next job together
        if i == 3:
            raise ValueError("bad batch")
        ran.append(i)
        return i * 10

    workers = RequestThreads(2, "test-lane")

    async def main() -> None:
        lane = Lane(workers, max_bytes=100)
        futs = [lane.submit(work, i, size=10) for i in range(6)]
        assert lane.busy
        gate.set()
        await lane.idle()
        assert not lane.busy
        assert ran == [0, 1, 2, 4, 5]
        assert [f.result() for i, f in enumerate(futs) if i != 3] == [0, 10, 20, 40, 50]
        assert isinstance(futs[3].exception(), ValueError)
        assert lane.jobs == 2 and lane.items == 6
        more = [lane.submit(work, 10 + i, size=60) for i in range(2)]
        await lane.room()  # 120 bytes queued > 100: waits until no more than 100 of them wait
        assert sum(60 for f in more if not f.done()) <= 100
        await lane.idle()

    _run(main, workers, gate)


def test_a_jobs_finish_step_runs_once_with_its_items_results_before_any_of_them_is_answered() -> None:
    """The acks=-1 fsync's shape: the requests queued meanwhile run as one job, whose finish step gets the results of
    the items that named it (once per distinct finish, after every item ran), and no answer is handed back before it
    ran; an item without a finish step, or whose work failed, is not in its list."""
    gate = threading.Event()
    workers = RequestThreads(1, "test-lane")
    finished: list[list[str]] = []
    other: list[list[str]] = []

    def finish(values: list[str]) -> None:
        finished.append(list(values))

    async def main() -> None:
        lane = Lane(workers, max_bytes=1 << 20)
        ahead = lane.submit(gate.wait, 10)  # running, so the next four make one job
        futs = [lane.submit(lambda: "a", finish=finish), lane.submit(lambda: "plain"),
                lane.submit(lambda: 1 / 0, finish=finish), lane.submit(lambda: "b", finish=finish),
                lane.submit(lambda: "c", finish=lambda v: other.append(list(v)))]
        gate.set()
        assert await asyncio.wait_for(ahead, 5) is True
        assert [await asyncio.wait_for(futs[i], 5) for i in (0, 1, 3, 4)] == ["a", "plain", "b", "c"]
        assert isinstance(futs[2].exception(), ZeroDivisionError)
        assert finished == [["a", "b"]] and other == [["c"]]
        await lane.idle()
        assert lane.jobs == 2 and lane.items == 6

    _run(main, workers, gate)


def test_a_failing_finish_step_fails_only_the_items_that_named_it() -> None:
    gate = threading.Event()
    workers = RequestThreads(1, "test-lane")

    def broken(_values: list[str]) -> None:
        raise OSError("disk gone")

    async def main() -> None:
        lane = Lane(workers, max_bytes=1 << 20)
        ahead = lane.submit(gate.wait, 10)
        named = lane.submit(lambda: "x", finish=broken)
        plain = lane.submit(lambda: "y")
        gate.set()
        await asyncio.wait_for(ahead, 5)
        with pytest.raises(OSError, match="disk gone"):
            await asyncio.wait_for(named, 5)
        assert await asyncio.wait_for(plain, 5) == "y"

    _run(main, workers, gate)


def test_a_job_cut_short_fails_its_requests_and_the_lane_goes_on() -> None:
    """A BaseException escaping a work item ends the worker's job: every request of the job fails with it (nobody
    waits for ever), and the lane runs what comes next."""
    workers = RequestThreads(1, "test-lane")
    gate = threading.Event()

    def interrupted() -> None:
        raise SystemExit("stop")

    async def main() -> None:
        lane = Lane(workers, max_bytes=1 << 20)
        ahead = lane.submit(gate.wait, 10)  # running, so the next three make one job
        futs = [lane.submit(lambda: "done"), lane.submit(interrupted), lane.submit(lambda: "never ran")]
        gate.set()
        assert await asyncio.wait_for(ahead, 5) is True
        for f in futs:
            with pytest.raises(RuntimeError, match="interrupted"):
                await asyncio.wait_for(f, 5)
        assert await asyncio.wait_for(lane.submit(lambda: "after"), 5) == "after"
        await lane.idle()

    _run(main, workers, gate)


def test_requests_queued_while_a_jobs_items_run_join_it_and_share_its_finish_step() -> None:
    """A client's burst (librdkafka sends one Produce per partition, back to back): the requests that arrive while
    the first one's append runs ride on its sync, one finish step for all, instead of waiting for that sync and then
    syncing again in a job of their own. A request that arrives once the finish step started waits for the next."""
    appending, in_finish, finish_gate = threading.Event(), threading.Event(), threading.Event()
    workers = RequestThreads(1, "test-lane")
    finished: list[list[str]] = []

    def finish(values: list[str]) -> None:
        finished.append(list(values))
        in_finish.set()
        assert finish_gate.wait(10)

    async def main() -> None:
        lane = Lane(workers, max_bytes=1 << 20)
        first = lane.submit(lambda: appending.wait(10) and "a", finish=finish)
        late = [lane.submit(lambda: "b", finish=finish), lane.submit(lambda: "plain"),
                lane.submit(lambda: "c", finish=finish)]
        appending.set()
        assert await asyncio.to_thread(in_finish.wait, 10)
        after = lane.submit(lambda: "d", finish=finish)  # the finish step runs: this one waits for the next job
        finish_gate.set()
        assert [await asyncio.wait_for(f, 5) for f in (first, *late, after)] == ["a", "b", "plain", "c", "d"]
        await lane.idle()
        assert finished == [["a", "b", "c"], ["d"]]
        assert lane.jobs == 2 and lane.items == 5

    _run(main, workers, appending, finish_gate)


def test_a_job_takes_late_work_a_bounded_number_of_times_then_finishes() -> None:
    """A client that never stops sending cannot hold a job's sync back: after LATE_JOIN_ROUNDS takes the job
    finishes, and a job without a finish step takes none (nothing of it waits for a sync to share)."""
    from service.kafka.lane import LATE_JOIN_ROUNDS, _run_all

    taken: list[int] = []
    finished: list[list[int]] = []

    def more() -> list:
        taken.append(len(taken))
        return [(int, (len(taken),), finished.append)]

    outcomes = _run_all([(lambda: 0, (), finished.append)], more)
    assert len(taken) == LATE_JOIN_ROUNDS and finished == [list(range(LATE_JOIN_ROUNDS + 1))]
    assert outcomes == [(True, n) for n in range(LATE_JOIN_ROUNDS + 1)]
    taken.clear()
    assert _run_all([(lambda: 0, (), None)], more) == [(True, 0)] and taken == []


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


class _Transport:
    def __init__(self) -> None:
        self.sends: list[list[bytes]] = []
        self.closing = False

    def is_closing(self) -> bool:
        return self.closing

    def set_write_buffer_limits(self, high: int) -> None:
        pass

    def get_write_buffer_size(self) -> int:
        return 0

    def writelines(self, pieces: list[bytes]) -> None:
        if self.closing:  # as asyncio's selector transport once the peer is gone
            raise RuntimeError("unable to perform operation on <TCPTransport closed=True>; the handler is closed")
        self.sends.append([bytes(p) for p in pieces])

    def write(self, data: bytes) -> None:
        self.sends.append([bytes(data)])


def test_answers_ready_together_go_out_in_one_write_in_request_order() -> None:
    """The answers a lane job completes become ready in one loop pass: one write for them all, in request order, and
    nothing is written past an answer still pending."""
    from types import SimpleNamespace

    from service.kafka.listener import Framed, _Outbox

    async def main() -> None:
        loop = asyncio.get_running_loop()
        transport = _Transport()
        box = _Outbox(SimpleNamespace(transport=transport))  # type: ignore[arg-type]
        futures = [loop.create_future() for _ in range(4)]
        for f in futures:
            box.put_pending(f, lambda answer: answer)
        futures[1].set_result(b"b")
        for _ in range(3):
            await asyncio.sleep(0)
        assert transport.sends == []  # the first answer is not ready: nothing overtakes it
        futures[0].set_result(b"a")
        futures[2].set_result(Framed([b"c1", b"c2"]))
        for _ in range(3):
            await asyncio.sleep(0)
        assert transport.sends == [[b"a", b"b", b"c1", b"c2"]]
        futures[3].set_result(None)  # no answer (acks=0)
        box.put(b"e")  # ready at once, but behind the pending fourth
        for _ in range(3):
            await asyncio.sleep(0)
        assert transport.sends[1:] == [[b"e"]] and not box.slots

    asyncio.run(main())


def test_answers_ready_after_the_peer_closed_are_dropped_not_written() -> None:
    """A client that goes away while its answers are worked out: the transport closes before the connection's handler
    sees it, and an answer ready then is dropped (it raised RuntimeError in the loop's callback, logged as an ERROR
    with a traceback)."""
    from types import SimpleNamespace

    from service.kafka.listener import _Outbox

    async def main() -> None:
        loop = asyncio.get_running_loop()
        errors: list[dict] = []
        loop.set_exception_handler(lambda _loop, context: errors.append(context))
        transport = _Transport()
        box = _Outbox(SimpleNamespace(transport=transport))  # type: ignore[arg-type]
        pending = loop.create_future()
        box.put_pending(pending, lambda answer: answer)
        transport.closing = True
        pending.set_result(b"late")
        box.put(b"later")
        for _ in range(3):
            await asyncio.sleep(0)
        assert errors == [] and transport.sends == []

    asyncio.run(main())
