"""create_app(node) -> FastAPI: the admin API of shared/API.md.

Handlers are plain ``def`` functions: FastAPI runs them in its threadpool, so the core
stays synchronous and thread-based (Kafka's model) and only this package touches asyncio.
Request bodies are bounded by :class:`BodyLimitMiddleware` before anything parses them.
With ``manage_lifecycle`` the app's lifespan starts the node and shuts it down, which is
how ``tiercompact serve`` turns uvicorn's SIGTERM/SIGINT handling into a graceful stop.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

from fastapi import FastAPI, Response
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from service.errors import error_body, install_error_handlers
from service.metrics import make_registry, render
from service.node import Node
from service.routes import cleaner, partitions, topics
from service.schemas import Health

API_DESCRIPTION = """Kafka-style log compaction for partitions whose segments live on local disk and in S3.

Errors are `{"error": "..."}` with a 4xx/5xx status. Mutating endpoints need
`Authorization: Bearer <token>` when the node has a token."""


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
        body = json.dumps(error_body(message)).encode()
        await send({"type": "http.response.start", "status": status,
                    "headers": [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode()),
                                (b"connection", b"close")]})
        await send({"type": "http.response.body", "body": body})


def create_app(node: Node, *, manage_lifecycle: bool = False) -> FastAPI:
    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        if manage_lifecycle:
            node.start()
        try:
            yield
        finally:
            if manage_lifecycle:
                node.shutdown()

    app = FastAPI(title="tiercompact", version="0.1.0", description=API_DESCRIPTION, lifespan=lifespan)
    app.state.node = node
    install_error_handlers(app, on_error=node.note_error)
    app.add_middleware(BodyLimitMiddleware, max_bytes=node.config.max_request_bytes)
    registry = make_registry(node)

    @app.get("/healthz", response_model=Health, tags=["ops"])
    def healthz() -> dict[str, Any]:
        return {"status": "ok"}

    @app.get("/metrics", tags=["ops"], response_class=Response)
    def metrics() -> Response:
        return Response(render(registry), media_type="text/plain; version=0.0.4; charset=utf-8")

    app.include_router(topics.router)
    app.include_router(partitions.router)
    app.include_router(cleaner.router)
    return app
