"""The Kafka listener: an asyncio TCP server (own thread and event loop) that frames, dispatches and answers requests.

Each connection reads size-prefixed frames (``socket.request.max.bytes`` caps the size before a
byte of the body is read), decodes Kafka's request header, finds the API in the registry
(:mod:`service.kafka.registry`) and calls its handler, one request at a time per connection, as
Kafka's broker does. Answers are written in request order (clients pipeline); a handler may
return an awaitable answer so the next request is dispatched while it completes (the fsync of
an acks=-1 produce). An unknown API key, a version outside the registered range (ApiVersions
aside: KIP-511's v0 answer with UNSUPPORTED_VERSION and the supported ranges), a malformed
frame or an unauthenticated request when credentials are required closes the connection.
``max.connections`` refuses connections beyond the cap, ``connections.max.idle.ms`` closes idle
ones (and ones that take longer than that to send one request).

Blocking work runs on the listener's worker threads (``RequestContext.run``); appends anywhere in
the node wake Fetch long polls through :meth:`KafkaListener.notify_append`.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import functools
import inspect
import logging
import ssl
import struct
import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from log.types import TopicPartition
from service.kafka import registry
from service.kafka.lane import Lane
from service.kafka.registry import ClusterView, ConnectionState, RequestContext, RequestHeaderInfo
from service.kafka.sasl_api import RAW_TOKENS, sasl_step
from service.request_threads import RequestThreads

if TYPE_CHECKING:
    from service.node import Node

logger = logging.getLogger(__name__)

API_VERSIONS_KEY = 18
UNSUPPORTED_VERSION = 35
#: answers queued per connection before the listener stops reading more of its requests
PIPELINE_DEPTH = 256
#: a connection's read buffer (asyncio pauses reading at twice this): room for a whole produce batch of a
#: client's default batch sizes, so a large request is not read in many pause/resume rounds
STREAM_LIMIT = 1 << 20
#: encoded answers a connection may have unsent (a client that does not read) before its next request waits
MAX_UNSENT_BYTES = 4 * 1024 * 1024
#: pipelined request payload (produced batches) a connection may have queued on its lane before reading waits
MAX_LANE_BYTES = 16 * 1024 * 1024


class _Slot:
    """One request's place in its connection's answer order: an encoded answer, or a future and how to encode it."""

    __slots__ = ("future", "encode", "answer")

    def __init__(self, future: asyncio.Future[Any] | None, encode: Callable[[Any], Any] | None, answer: Any) -> None:
        self.future = future
        self.encode = encode
        self.answer = answer


class _Outbox:
    """A connection's answers in request order, each written to the transport once it and every answer before it are
    ready: no writer task and no queue. A completed future schedules one write, in the next loop pass, of every answer
    it unblocks, so the answers of one lane job (settled together) go out in one send.

    At most PIPELINE_DEPTH answers wait; the transport holds at most MAX_UNSENT_BYTES unsent (its high-water mark:
    :meth:`room` waits for the client to read). A handler that fails closes the connection, as Kafka's does."""

    def __init__(self, writer: asyncio.StreamWriter) -> None:
        self.writer = writer
        self.transport = writer.transport
        self.transport.set_write_buffer_limits(high=MAX_UNSENT_BYTES)
        self.slots: collections.deque[_Slot] = collections.deque()
        self.closed = False
        self.abandoned = False  # abandon_polls was called
        self._changed = asyncio.Event()
        self._writing = False  # a _write_ready is scheduled

    def put(self, answer: Any) -> None:
        """An answer ready now: bytes, a Framed, or None (no answer)."""
        if self.slots:
            self.slots.append(_Slot(None, None, answer))
        else:
            self._write(answer)

    def put_pending(self, future: asyncio.Future[Any], encode: Callable[[Any], Any] | None = None) -> None:
        """An answer ``future`` will give (``encode``d when it does, else written as it comes)."""
        self.slots.append(_Slot(future, encode, None))
        future.add_done_callback(self._on_done)

    def _on_done(self, future: asyncio.Future[Any]) -> None:
        # the answers a lane job completes all become ready in one loop pass: written together, after it (one send
        # for the job's answers instead of one each)
        if not self._writing:
            self._writing = True
            future.get_loop().call_soon(self._write_ready)

    def _write_ready(self) -> None:
        self._writing = False
        ready: list[Any] = []
        try:
            self._take_ready(ready)
        finally:
            if ready and not self._gone():
                self.transport.writelines(ready)
        self._changed.set()

    def _gone(self) -> bool:
        """Closed by us, or by the peer before the connection's handler has seen it (the transport refuses writes from
        then on: "unable to perform operation on <TCPTransport closed=True>")."""
        return self.closed or self.transport.is_closing()

    def _take_ready(self, ready: list[Any]) -> None:
        """Move the answers ready in order (up to the first one still pending) into ``ready`` as buffers."""
        while self.slots:
            slot = self.slots[0]
            answer = slot.answer
            if slot.future is not None:
                if not slot.future.done():
                    break
                if slot.future.cancelled() and self.abandoned:  # a long poll dropped by abandon_polls: no answer
                    self.slots.popleft()
                    continue
                try:
                    answer = slot.future.result()
                    if slot.encode is not None:
                        answer = slot.encode(answer)
                except BaseException:  # noqa: BLE001 - a failed handler closes its connection only
                    if not self.closed:
                        logger.exception("Kafka request failed; closing the connection")
                    self.close_now()
                    ready.clear()
                    return
            self.slots.popleft()
            if answer is None:
                continue
            if isinstance(answer, Framed):
                ready.extend(answer)
            else:
                ready.append(answer)

    def _write(self, answer: Any) -> None:
        if answer is None or self._gone():
            return
        if isinstance(answer, Framed):
            self.transport.writelines(answer)
        else:
            self.transport.write(answer)

    def abandon_polls(self) -> None:
        """The connection is closing (the client went away, or sent what closes it): cancel the answers still being
        worked out on the loop, Fetch long polls, which would otherwise wait out their max_wait_ms (up to the 5 s
        the close waits for owed answers) for a client that will never read them; they did nothing an answer must
        report. Lane work (produce appends) is not touched: its answers are still written if the transport takes
        them."""
        self.abandoned = True
        for slot in self.slots:
            if isinstance(slot.future, asyncio.Task) and not slot.future.done():
                slot.future.cancel()

    def close_now(self) -> None:
        """Drop what waits and abort the connection (a failed handler, a listener stopping). An answer still being
        worked out on the loop (a Fetch's long poll) is cancelled: nobody will read it, and a task left pending in
        a loop that closes is destroyed pending. Lane work is not: its thread finishes it (what an append did stays
        done, as when a client goes away), and its future settles to no one."""
        self.closed = True
        for slot in self.slots:
            if slot.future is not None and not slot.future.done():
                slot.future.remove_done_callback(self._on_done)
                if isinstance(slot.future, asyncio.Task):
                    slot.future.cancel()
        self.slots.clear()
        self.transport.abort()
        self._changed.set()

    def full(self) -> bool:
        """Whether :meth:`room` would wait (checked first: most requests find room, and need no coroutine)."""
        return len(self.slots) >= PIPELINE_DEPTH or self.transport.get_write_buffer_size() > MAX_UNSENT_BYTES

    async def room(self) -> None:
        """Wait while PIPELINE_DEPTH answers wait, or the client has not read MAX_UNSENT_BYTES of them."""
        while len(self.slots) >= PIPELINE_DEPTH and not self.closed:
            self._changed.clear()
            await self._changed.wait()
        if self.transport.get_write_buffer_size() > MAX_UNSENT_BYTES:
            await self.writer.drain()

    async def flushed(self) -> None:
        """Wait until every answer is written (or the connection was closed)."""
        while self.slots and not self.closed:
            self._changed.clear()
            await self._changed.wait()


@dataclass
class KafkaListenerConfig:
    """The listener's settings (Kafka's broker config names in the comments)."""

    host: str = "0.0.0.0"
    port: int = 9092
    #: advertised.listeners: what Metadata tells clients (None: the bound host/port)
    advertised_host: str | None = None
    advertised_port: int | None = None
    max_request_bytes: int = 104857600        # socket.request.max.bytes
    max_connections: int = 2147483647         # max.connections
    idle_ms: int = 600000                     # connections.max.idle.ms
    #: num.io.threads: the threads of the handlers' blocking work, and as many again for the connections' lane jobs
    worker_threads: int = 8
    ssl_context: ssl.SSLContext | None = None
    #: when set, every API but the before_auth ones needs a SASL-authenticated connection
    authenticator: Any = None
    #: None: the cluster id the node's metadata store holds (created by the first node)
    cluster_id: str | None = None


class AppendNotifier:
    """Fetch long polls waiting for appends: woken from any thread, waited on in the listener's loop."""

    def __init__(self) -> None:
        self._loop: asyncio.AbstractEventLoop | None = None
        self._waiters: dict[TopicPartition, set[asyncio.Future[None]]] = {}

    def bind(self, loop: asyncio.AbstractEventLoop) -> None:
        self._loop = loop

    def notify(self, tp: TopicPartition) -> None:
        loop = self._loop
        if loop is None or not self._waiters or tp not in self._waiters:
            return
        with contextlib.suppress(RuntimeError):  # loop closed while stopping
            loop.call_soon_threadsafe(self._wake, tp)

    def _wake(self, tp: TopicPartition) -> None:
        for fut in self._waiters.pop(tp, ()):
            if not fut.done():
                fut.set_result(None)

    async def wait(self, tps: Iterable[TopicPartition], timeout_s: float) -> bool:
        tps = list(tps)
        if timeout_s <= 0 or not tps:
            return False
        fut: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        for tp in tps:
            self._waiters.setdefault(tp, set()).add(fut)
        try:
            await asyncio.wait_for(asyncio.shield(fut), timeout_s)
            return True
        except TimeoutError:
            return False
        finally:
            for tp in tps:
                waiting = self._waiters.get(tp)
                if waiting is not None:
                    waiting.discard(fut)
                    if not waiting:
                        del self._waiters[tp]


class Framed(list):  # type: ignore[type-arg]
    """An encoded answer as buffers written one after the other (size prefix and header, then the body's
    pieces: a Fetch's stored batches are sent as read, never joined into one copy); ``len`` is its bytes."""

    __slots__ = ("size",)

    def __init__(self, pieces: list[bytes | memoryview]) -> None:
        super().__init__(pieces)
        self.size = sum(len(p) for p in pieces)

    def __len__(self) -> int:
        return self.size

    def __bool__(self) -> bool:
        return True


class _Closed(Exception):
    """The connection must close (protocol violation, limit, or the peer went away)."""


class KafkaListener:
    """The listener in its own thread; ``start()`` binds (port 0 = a free one), ``stop()`` closes everything."""

    def __init__(self, node: Node, config: KafkaListenerConfig | None = None, *,
                 metrics: Any = None) -> None:
        self.node = node
        self.config = config or KafkaListenerConfig()
        self.metrics = metrics
        self.notifier = AppendNotifier()
        self._workers = RequestThreads(self.config.worker_threads, "tiercompact-kafka")
        # The lane jobs (a connection's pipelined appends, then their acks=-1 sync) get threads of their own: producers
        # waiting on their sync never hold the threads a Fetch, a Metadata or a coordinator request needs. Kafka keeps
        # its request handlers free the same way (a produce waiting for acks parks in its purgatory, not on a thread).
        self._lane_workers = RequestThreads(self.config.worker_threads, "tiercompact-kafka-lane")
        self._loop: asyncio.AbstractEventLoop | None = None
        self._server: asyncio.base_events.Server | None = None
        self._thread: threading.Thread | None = None
        self._started = threading.Event()
        self._start_error: BaseException | None = None
        self._stopping: asyncio.Event | None = None
        self._tasks: set[asyncio.Task[None]] = set()
        #: per open connection, when the request it is reading began (0: between requests); _watchdog reads it
        self._reading: dict[asyncio.StreamReader, list[float]] = {}
        self.connections = 0
        store = getattr(node, "metadata", None)  # None: a bare node of a unit test, with no metadata store
        self.cluster = ClusterView(broker_id=node.broker_id, host=self.config.advertised_host or "127.0.0.1",
                                   port=self.config.advertised_port or self.config.port,
                                   cluster_id=self.config.cluster_id or (store.cluster_id() if store is not None
                                                                         else ClusterView.cluster_id))
        #: the group and transaction coordinators (service.kafka.coordinators), set by KafkaService while it runs
        self.coordinators: Any = None

    # ---- lifecycle -------------------------------------------------------------------
    def start(self, timeout: float = 30.0) -> KafkaListener:
        import service.kafka  # noqa: F401  (every handler module registers itself on import)

        self._thread = threading.Thread(target=self._run, name="tiercompact-kafka-listener", daemon=True)
        self._thread.start()
        if not self._started.wait(timeout):
            raise RuntimeError("the Kafka listener did not start in time")
        if self._start_error is not None:
            raise self._start_error
        hook = getattr(self.node, "add_append_listener", None)
        if hook is not None:
            hook(self.notify_append)
        return self

    def _run(self) -> None:
        try:  # libuv's loop when installed (uvicorn's choice too): less CPU per request
            import uvloop

            loop: asyncio.AbstractEventLoop = uvloop.new_event_loop()
        except ImportError:
            loop = asyncio.new_event_loop()
        self._loop = loop
        self.notifier.bind(loop)
        try:
            loop.run_until_complete(self._serve())
        except BaseException as e:  # noqa: BLE001 - reported to start()
            self._start_error = e
            self._started.set()
        finally:
            with contextlib.suppress(Exception):
                loop.run_until_complete(loop.shutdown_asyncgens())
            loop.close()

    async def _serve(self) -> None:
        self._stopping = asyncio.Event()
        self._server = await asyncio.start_server(self._on_connection, self.config.host, self.config.port,
                                                  ssl=self.config.ssl_context, limit=STREAM_LIMIT, backlog=1024)
        if not self.config.advertised_port:
            self.cluster.port = self.port
        logger.debug("Kafka listener on %s:%d (advertised %s:%d)", self.config.host, self.port,
                    self.cluster.host, self.cluster.port)
        self._started.set()
        watchdog = asyncio.create_task(self._watchdog())
        await self._stopping.wait()
        watchdog.cancel()
        self._server.close()
        for t in list(self._tasks):
            t.cancel()
        if self._tasks:
            await asyncio.wait(self._tasks, timeout=2.0)
        with contextlib.suppress(Exception):
            await asyncio.wait_for(self._server.wait_closed(), 2.0)

    @property
    def port(self) -> int:
        assert self._server is not None
        return int(self._server.sockets[0].getsockname()[1])

    def stop(self, timeout: float = 10.0) -> None:
        hook = getattr(self.node, "remove_append_listener", None)
        if hook is not None:
            hook(self.notify_append)
        if self._loop is not None and self._stopping is not None:
            with contextlib.suppress(RuntimeError):
                self._loop.call_soon_threadsafe(self._stopping.set)
        if self._thread is not None:
            self._thread.join(timeout)
        self._workers.stop()
        self._lane_workers.stop()

    def __enter__(self) -> KafkaListener:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def notify_append(self, tp: TopicPartition) -> None:
        """Called (from any thread) after every append to ``tp``: wakes the Fetch long polls waiting on it."""
        self.notifier.notify(tp)

    async def run_blocking(self, fn: Callable[..., Any], *args: Any) -> Any:
        # on a worker, in request scope: a wait for a partition busy with background I/O is bounded (log.locks)
        return await self._workers.run(fn, *args)

    # ---- connections -----------------------------------------------------------------
    async def _on_connection(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        if self.connections >= self.config.max_connections:
            self._count("connections_refused")
            writer.close()
            return
        self._tasks.add(task)
        self.connections += 1
        peer = writer.get_extra_info("peername")
        conn = ConnectionState(peer=f"{peer[0]}:{peer[1]}" if peer else "?",
                               tls=writer.get_extra_info("ssl_object") is not None, listener_metrics=self.metrics,
                               lane=Lane(self._lane_workers, MAX_LANE_BYTES))
        answers = _Outbox(writer)
        reading = [0.0]  # when the request being read began (0: not reading one); see _watchdog
        self._reading[reader] = reading
        try:
            await self._read_requests(reader, answers, conn, reading)
        except (_Closed, ConnectionError, asyncio.IncompleteReadError, TimeoutError, ssl.SSLError):
            answers.abandon_polls()
        except asyncio.CancelledError:
            answers.close_now()  # the listener is stopping
        except Exception:  # noqa: BLE001 - one connection's bug never takes the listener down
            logger.exception("Kafka connection %s failed", conn.peer)
        finally:
            with contextlib.suppress(BaseException):  # the answers already owed are still written
                await asyncio.wait_for(answers.flushed(), 5.0)
            answers.closed = True  # an answer completing after this is dropped, not written to a closed transport
            writer.close()
            with contextlib.suppress(BaseException):
                await asyncio.wait_for(writer.wait_closed(), 1.0)
            self.connections -= 1
            self._tasks.discard(task)
            self._reading.pop(reader, None)

    async def _watchdog(self) -> None:
        """connections.max.idle.ms: close every connection whose current request (size and body) began longer ago,
        checked a few times per idle period (reading a request costs a timestamp, not a timer per request)."""
        idle_s = self.config.idle_ms / 1000
        period = min(max(idle_s / 4, 0.01), 1.0)
        loop = asyncio.get_running_loop()
        while True:
            await asyncio.sleep(period)
            now = loop.time()
            for reader, reading in list(self._reading.items()):
                if reading[0] and now - reading[0] > idle_s:
                    reading[0] = 0.0
                    self._count("idle_closed")
                    reader.set_exception(TimeoutError())  # the read fails; the connection closes as after any error

    async def _read_requests(self, reader: asyncio.StreamReader, answers: _Outbox,
                             conn: ConnectionState, reading: list[float]) -> None:
        loop = asyncio.get_running_loop()
        while not answers.closed:
            if answers.full():
                await answers.room()
            if conn.lane.full():
                await conn.lane.room()
            # the watchdog closes the connection if this request, size and body, takes longer than
            # connections.max.idle.ms to arrive (a timestamp per request, not a timer)
            reading[0] = loop.time()
            (size,) = struct.unpack(">i", await reader.readexactly(4))
            raw = conn.extra.get(RAW_TOKENS, False)  # a bare SASL token after a v0 handshake
            if size < (0 if raw else 8) or size > self.config.max_request_bytes:
                self._count("bad_frames")
                logger.debug("closing %s: request size %d outside 8..%d", conn.peer, size,
                             self.config.max_request_bytes)
                raise _Closed
            frame = await reader.readexactly(size)
            reading[0] = 0.0
            if raw:
                token, error = await self.run_blocking(sasl_step, conn, frame)
                if error is not None:
                    raise _Closed
                answers.put(struct.pack(">i", len(token)) + token)
                continue
            await self._dispatch(frame, conn, answers)
            if conn.close_after_response:
                return

    async def _dispatch(self, frame: bytes, conn: ConnectionState, answers: _Outbox) -> None:
        """Handle one request and give ``answers`` its answer (framed bytes, one to come, or None: no answer)."""
        api_key, api_version, correlation_id = struct.unpack_from(">hhi", frame, 0)
        spec = registry.lookup(api_key)
        if spec is None:
            self._count("bad_frames")
            raise _Closed
        if not spec.supports(api_version):
            if api_key == API_VERSIONS_KEY:
                answers.put(_frame(correlation_id, _unsupported_api_versions(), flexible=False))
                return
            self._count("bad_frames")
            raise _Closed
        if self.config.authenticator is not None and conn.principal is None and not spec.before_auth:
            self._count("unauthenticated")
            raise _Closed
        flexible = bool(spec.request_cls.flexible_version_q(api_version))
        try:
            client_id, body_at = request_header(frame, flexible)
            body = memoryview(frame)[body_at:]
            request = (spec.request_cls.decode(body, version=api_version) if api_version >= spec.native_min
                       else spec.older.decode(body, api_version))  # a version only kio still describes
        except Exception as e:  # noqa: BLE001 - any malformed body closes the connection, as Kafka's does
            self._count("bad_frames")
            logger.debug("closing %s: malformed %s v%d: %s", conn.peer, spec.name, api_version, e)
            raise _Closed from None
        info = RequestHeaderInfo(api_key, api_version, correlation_id, client_id)
        ctx = RequestContext(node=self.node, header=info, spec=spec, connection=conn, cluster=self.cluster,
                             runner=self.run_blocking, waiter=self.notifier.wait, listener=self)
        if not spec.pipelined and conn.lane.busy:
            await conn.lane.idle()  # Kafka's order: no request overtakes the connection's queued produce work
        started = time.perf_counter()
        result = await spec.handler(ctx, request)
        resp_flexible = flexible and api_key != API_VERSIONS_KEY  # ApiVersions answers with header v0
        if isinstance(result, asyncio.Future):  # completed by callbacks (Produce): encoded when it is set
            answers.put_pending(result, functools.partial(self._encode, ctx=ctx, request=request,
                                                          flexible=resp_flexible, started=started))
        elif inspect.isawaitable(result):
            answers.put_pending(asyncio.ensure_future(self._finish(result, ctx, request, resp_flexible, started)))
        else:
            answers.put(self._encode(result, ctx, request, resp_flexible, started))

    async def _finish(self, pending: Any, ctx: RequestContext, request: Any, flexible: bool,
                      started: float) -> bytes | Framed | None:
        return self._encode(await pending, ctx, request, flexible, started)

    def _encode(self, response: Any, ctx: RequestContext, request: Any, flexible: bool,
                started: float) -> bytes | Framed | None:
        if self.metrics is not None:
            self.metrics.observe_request(ctx, response, time.perf_counter() - started, request)
        if response is None:
            return None
        pieces = getattr(response, "encode_pieces", None)
        if pieces is not None:  # a large Fetch: its stored batches go out as they were read
            return _frame_pieces(ctx.header.correlation_id, pieces(version=ctx.api_version), flexible=flexible)
        body = (response.encode(version=ctx.api_version) if ctx.api_version >= ctx.spec.native_min
                else ctx.spec.older.encode(response, ctx.api_version))  # a version only kio still describes
        return _frame(ctx.header.correlation_id, body, flexible=flexible)

    def _count(self, what: str) -> None:
        if self.metrics is not None:
            self.metrics.count(what)


_INT16 = struct.Struct(">h")


def request_header(frame: bytes, flexible: bool) -> tuple[str | None, int]:
    """The client id of a request frame and where its body starts: Kafka's RequestHeader v1 (api key, version and
    correlation id, read by the caller, then a nullable int16-sized client id) or v2 (the same and a tagged-field
    section, skipped). What kafka.protocol's RequestHeader.decode reads, without building its message object on the
    hot path (checked against it in tests); malformed headers raise ValueError or struct.error."""
    (n,) = _INT16.unpack_from(frame, 8)
    pos = 10
    client_id = None
    if n >= 0:
        if pos + n > len(frame):
            raise ValueError("client id runs past the frame")
        client_id = frame[pos:pos + n].decode("utf-8")
        pos += n
    elif n != -1:
        raise ValueError(f"client id length {n}")
    if flexible:
        count, pos = _uvarint(frame, pos)
        for _ in range(count):
            _tag, pos = _uvarint(frame, pos)
            size, pos = _uvarint(frame, pos)
            pos += size
        if pos > len(frame):
            raise ValueError("tagged fields run past the frame")
    return client_id, pos


def _uvarint(buf: bytes, pos: int) -> tuple[int, int]:
    """An unsigned varint of at most 5 bytes (Kafka's readUnsignedVarint) at ``pos``; returns it and the next position."""
    value = shift = 0
    for _ in range(5):
        b = buf[pos]
        pos += 1
        value |= (b & 0x7F) << shift
        if b < 0x80:
            return value, pos
        shift += 7
    raise ValueError("varint longer than 5 bytes")


#: the size prefix and ResponseHeader v0 (correlation id) / v1 (the same and an empty tagged-field section): what
#: kafka.protocol's ResponseHeader encodes, written with struct on the hot path (it costs more than a small body)
_HEADER_V0 = struct.Struct(">ii")
_HEADER_V1 = struct.Struct(">iiB")


def _frame(correlation_id: int, body: bytes | bytearray, *, flexible: bool) -> bytes:
    if flexible:
        return _HEADER_V1.pack(len(body) + 5, correlation_id, 0) + body
    return _HEADER_V0.pack(len(body) + 4, correlation_id) + body


def _frame_pieces(correlation_id: int, body: list[bytes | memoryview], *, flexible: bool) -> Framed:
    size = sum(len(p) for p in body)
    head = _HEADER_V1.pack(size + 5, correlation_id, 0) if flexible else _HEADER_V0.pack(size + 4, correlation_id)
    return Framed([head, *body])


def _unsupported_api_versions() -> bytes:
    """KIP-511: an ApiVersions request at a version we do not know gets v0 with UNSUPPORTED_VERSION and our ranges."""
    from kafka.protocol.metadata import ApiVersionsResponse

    keys = [ApiVersionsResponse.ApiVersion(api_key=k, min_version=lo, max_version=hi)
            for k, lo, hi in registry.supported_versions()]
    return bytes(ApiVersionsResponse(error_code=UNSUPPORTED_VERSION, api_keys=keys).encode(version=0))
