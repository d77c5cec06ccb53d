"""Bearer-token authentication for the HTTP API.

With a token configured, every mutating endpoint requires ``Authorization: Bearer <token>``
(and reads too with ``auth_reads``). The comparison is constant-time
(``hmac.compare_digest``) so response timing does not leak the token.
"""

from __future__ import annotations

import hmac

from fastapi import Request

from service.errors import ForbiddenError, UnauthorizedError


def check_token(request: Request, token: str | None) -> None:
    if token is None:
        return
    header = request.headers.get("authorization")
    if not header:
        raise UnauthorizedError("this endpoint requires 'Authorization: Bearer <token>' (the node's --token)")
    scheme, _, given = header.partition(" ")
    if scheme.lower() != "bearer" or not given.strip():
        raise UnauthorizedError("the Authorization header must be 'Bearer <token>'")
    if not hmac.compare_digest(given.strip().encode("utf-8"), token.encode("utf-8")):
        raise ForbiddenError("the bearer token is not valid for this node")


async def require_write(request: Request) -> None:
    """Dependency for mutating endpoints (async: a plain check, so FastAPI runs it on the event
    loop instead of sending it to the threadpool, a thread hop per request)."""
    check_token(request, request.app.state.node.config.token)


async def require_read(request: Request) -> None:
    """Dependency for read endpoints: checked only when auth_reads is set (async, as require_write)."""
    cfg = request.app.state.node.config
    if cfg.auth_reads:
        check_token(request, cfg.token)
