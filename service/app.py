"""create_app(node) -> FastAPI: the admin API of shared/API.md.

Handlers are plain ``def`` functions: FastAPI runs them in its threadpool, so the core
stays synchronous and thread-based (Kafka's model) and only this package touches asyncio.
Request bodies are bounded by :class:`BodyLimitMiddleware` before anything parses them (the
fast lane in front of it, :class:`TiercompactAPI`, reads only bodies that declare a length
within the same limit and hands the others to it);
an unexpected exception is answered by :class:`UnexpectedErrorMiddleware` as a JSON 500
on a connection that stays usable.
With ``manage_lifecycle`` the app's lifespan starts the node and shuts it down, which is
how ``tiercompact serve`` turns uvicorn's SIGTERM/SIGINT handling into a graceful stop.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from typing import Any

from fastapi import FastAPI, Response
from fastapi.openapi.docs import get_redoc_html, get_swagger_ui_html
from fastapi.responses import HTMLResponse, JSONResponse
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from log.errors import TiercompactError
from log.locks import request_scope
from service.errors import error_body, install_error_handlers
from service.metrics import make_registry, render
from service.node import Node
from service.request_threads import RequestThreads
from service.routes import cleaner, compactions, erasures, groups, partitions, spark, topics, transactions
from service.routes.deps import READ
from service.schemas import Health

logger = logging.getLogger(__name__)

API_DESCRIPTION = """Kafka-style log compaction for partitions whose segments live on local disk and in S3.

Errors are `{"error": "..."}` with a 4xx/5xx status. Mutating endpoints need
`Authorization: Bearer <token>` when the node has a token; with `auth_reads`, so do reads,
`/metrics`, `/docs` and `/openapi.json` (only `/healthz` stays open)."""


class BodyLimitMiddleware:
    """Reject request bodies above ``max_bytes`` with 413 before any handler parses them.

    A declared Content-Length over the limit is refused without reading; a chunked body is
    buffered only up to the limit, then replayed to the app.
    """

    def __init__(self, app: ASGIApp, max_bytes: int) -> None:
        self.app = app
        self.max_bytes = max_bytes

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope["method"] in ("GET", "HEAD", "OPTIONS", "DELETE"):
            await self.app(scope, receive, send)
            return
        for name, value in scope.get("headers", []):
            if name == b"content-length":
                try:
                    declared = int(value)
                except ValueError:
                    await self._reject(send, 400, "Content-Length is not a number")
                    return
                if declared > self.max_bytes:
                    await self._reject(send, 413, self._too_large(declared))
                    return
        chunks: list[bytes] = []
        total = 0
        while True:
            message = await receive()
            if message["type"] == "http.disconnect":
                return
            body = message.get("body", b"")
            total += len(body)
            if total > self.max_bytes:
                await self._reject(send, 413, self._too_large(total))
                return
            chunks.append(body)
            if not message.get("more_body", False):
                break
        data = b"".join(chunks)
        sent = False

        async def replay() -> Message:
            nonlocal sent
            if not sent:
                sent = True
                return {"type": "http.request", "body": data, "more_body": False}
            return await receive()

        await self.app(scope, replay, send)

    def _too_large(self, size: int) -> str:
        return (f"request body of {size} bytes exceeds max_request_bytes={self.max_bytes}; "
                f"send fewer records per request")

    @staticmethod
    async def _reject(send: Send, status: int, message: str) -> None:
        await _answer(send, status, message, [(b"connection", b"close")])


class UnexpectedErrorMiddleware:
    """Answer an unexpected exception with a JSON 500 and keep the connection open.

    Starlette's outermost ``ServerErrorMiddleware`` runs an ``Exception`` handler but then
    re-raises, and uvicorn closes a connection whose app raised: a producer on a keep-alive
    connection could not tell whether its write landed. This middleware sits inside it,
    logs the traceback, and sends the ``{"error": ...}`` answer as a normal response (when
    none has started yet), so the client reads a complete response and may go on using the
    connection.
    """

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        started = False

        async def tracking_send(message: Message) -> None:
            nonlocal started
            if message["type"] == "http.response.start":
                started = True
            await send(message)

        try:
            await self.app(scope, receive, tracking_send)
        except asyncio.CancelledError:
            # uvicorn cancels the requests still running when a stop's drain time is over, and
            # would answer them with a plain-text 500: the outcome is unknown, not a server bug
            if started:
                raise
            await _answer(send, 503, STOPPING_MESSAGE, [(b"retry-after", b"1"), (b"connection", b"close")])
        except Exception as exc:
            if started:
                raise  # half a response went out: only closing the connection can signal the failure
            logger.exception("%s %s failed unexpectedly", scope.get("method"), scope.get("path"))
            await _answer(send, 500, f"internal error ({type(exc).__name__}); the server log has the details")


#: the answer to a request the server stopped before it finished
STOPPING_MESSAGE = ("the service is stopping and this request did not finish in time: its outcome is unknown; "
                    "retry it once the service is back (an idempotent producer's retry is deduplicated)")


async def _answer(send: Send, status: int, message: str, headers: list[tuple[bytes, bytes]] | None = None) -> None:
    """Send a complete ``{"error": message}`` JSON response."""
    body = json.dumps(error_body(message)).encode()
    await send({"type": "http.response.start", "status": status,
                "headers": [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode()),
                            *(headers or [])]})
    await send({"type": "http.response.body", "body": body})


class TiercompactAPI(FastAPI):
    """The FastAPI app, with its fast lane in front of everything.

    ``fast_lane`` (set by :func:`create_app`) sees every HTTP request first, before FastAPI's
    and Starlette's per-request work and every middleware: it serves plain produce and read
    requests itself (service/routes/partitions.py ``RecordsFastLane``, wrapped in
    :class:`UnexpectedErrorMiddleware`, and doing its own body-size check) and hands anything
    else to the app as usual (:meth:`serve`). Those layers cost about 25 us per request, a
    tenth of a produce or read of 100 records.
    """

    fast_lane: ASGIApp | None = None

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        lane = self.fast_lane
        # the request scope (a context variable AnyIO's worker threads inherit): a wait for a
        # partition busy with background I/O is bounded by request_timeout_ms (log.locks)
        with request_scope() if scope["type"] == "http" else contextlib.nullcontext():
            if lane is not None and scope["type"] == "http" and not self.root_path:
                await lane(scope, receive, send)
            else:
                await super().__call__(scope, receive, send)

    async def serve(self, scope: Scope, receive: Receive, send: Send) -> None:
        """The app without the fast lane: what the lane hands requests on to."""
        await super().__call__(scope, receive, send)


#: served by FastAPI itself; with auth_reads they need the token like every read endpoint
DOCS_URL, REDOC_URL, OPENAPI_URL = "/docs", "/redoc", "/openapi.json"


def create_app(node: Node, *, manage_lifecycle: bool = False, companions: Sequence[Any] = ()) -> TiercompactAPI:
    """``companions`` (objects with ``start()``/``stop()``, e.g. the Kafka listener) start after the node
    and stop before it, with ``manage_lifecycle``."""
    request_threads = RequestThreads()

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        started: list[Any] = []
        if manage_lifecycle:
            node.start()
            try:
                for c in companions:
                    c.start()
                    started.append(c)
            except BaseException:
                for c in reversed(started):
                    c.stop()
                node.shutdown()
                request_threads.stop()
                raise
        try:
            yield
        finally:
            for c in reversed(started):
                c.stop()
            if manage_lifecycle:
                node.shutdown()
            request_threads.stop()

    # With auth_reads the schema and the docs are reads like any other: FastAPI's own routes
    # for them take no dependencies, so they are replaced by ones that check the token.
    guarded_docs = node.config.auth_reads
    app = TiercompactAPI(title="tiercompact", version="0.1.0", description=API_DESCRIPTION, lifespan=lifespan,
                         docs_url=None if guarded_docs else DOCS_URL, redoc_url=None if guarded_docs else REDOC_URL,
                         openapi_url=None if guarded_docs else OPENAPI_URL)
    app.state.node = node
    install_error_handlers(app, on_error=node.note_error)
    app.add_middleware(UnexpectedErrorMiddleware)
    app.add_middleware(BodyLimitMiddleware, max_bytes=node.config.max_request_bytes)
    # in front of all of it: plain produce/read requests skip FastAPI's per-request work and
    # the middlewares (see RecordsFastLane); whatever it does not serve goes to app.serve
    app.fast_lane = UnexpectedErrorMiddleware(partitions.RecordsFastLane(
        app.serve, node=node, handler=app.exception_handlers[TiercompactError], threads=request_threads,
        max_body_bytes=node.config.max_request_bytes))
    registry = make_registry(node)

    @app.get("/healthz", response_model=Health, tags=["ops"])
    def healthz() -> dict[str, Any]:
        """Liveness; always open, also with auth_reads (load balancers and orchestrators probe it)."""
        return {"status": "ok"}

    @app.get("/metrics", tags=["ops"], response_class=Response, dependencies=READ)
    def metrics() -> Response:
        """Prometheus text format; needs the token when auth_reads is on."""
        return Response(render(registry), media_type="text/plain; version=0.0.4; charset=utf-8")

    if guarded_docs:
        @app.get(OPENAPI_URL, include_in_schema=False, dependencies=READ)
        def openapi() -> JSONResponse:
            return JSONResponse(app.openapi())

        @app.get(DOCS_URL, include_in_schema=False, dependencies=READ)
        def docs() -> HTMLResponse:
            return get_swagger_ui_html(openapi_url=OPENAPI_URL, title=f"{app.title} - Swagger UI")

        @app.get(REDOC_URL, include_in_schema=False, dependencies=READ)
        def redoc() -> HTMLResponse:
            return get_redoc_html(openapi_url=OPENAPI_URL, title=f"{app.title} - ReDoc")

    app.include_router(topics.router)
    app.include_router(partitions.router)
    app.include_router(cleaner.router)
    app.include_router(compactions.router)
    app.include_router(erasures.router)
    app.include_router(spark.router)
    app.include_router(groups.router)
    app.include_router(transactions.router)
    return app
