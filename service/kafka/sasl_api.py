"""SaslHandshake v0-v1 and SaslAuthenticate v0-v2: a connection authenticates before any other API when the node has
credentials (fail closed: a refused or out-of-order exchange answers Kafka's error and closes the connection)."""

from __future__ import annotations

import logging
from typing import Any

from kafka.errors import IllegalSaslStateError, SaslAuthenticationFailedError, UnsupportedSaslMechanismError
from kafka.protocol.sasl import (
    SaslAuthenticateRequest,
    SaslAuthenticateResponse,
    SaslHandshakeRequest,
    SaslHandshakeResponse,
)

from service.kafka.registry import ConnectionState, RequestContext, kafka_api
from service.kafka.sasl import SaslFailed

logger = logging.getLogger(__name__)

#: after a v0 handshake the client sends bare SASL tokens (size-prefixed, no Kafka header)
RAW_TOKENS = "sasl_raw_tokens"


def _refuse(conn: ConnectionState, why: str) -> None:
    logger.info("Kafka SASL refused for %s: %s", conn.peer, why)
    conn.close_after_response = True
    conn.sasl_state = None
    conn.extra.pop(RAW_TOKENS, None)
    if conn.listener_metrics is not None:
        conn.listener_metrics.count("sasl_failures")


@kafka_api(SaslHandshakeRequest, min_version=0, max_version=1, before_auth=True)
async def handle_sasl_handshake(ctx: RequestContext, request: Any) -> Any:
    conn = ctx.connection
    auth = ctx.listener.config.authenticator if ctx.listener is not None else None
    if auth is None:
        _refuse(conn, "no SASL credentials are configured on this listener")
        return SaslHandshakeResponse(error_code=UnsupportedSaslMechanismError.errno, mechanisms=[])
    enabled = auth.mechanisms(conn.tls)
    if conn.principal is not None or conn.sasl_state is not None:
        _refuse(conn, "a second SASL handshake on the connection")
        return SaslHandshakeResponse(error_code=IllegalSaslStateError.errno, mechanisms=enabled)
    try:
        conn.sasl_state = auth.start(request.mechanism, conn.tls)
    except SaslFailed as e:
        _refuse(conn, str(e))
        return SaslHandshakeResponse(error_code=UnsupportedSaslMechanismError.errno, mechanisms=enabled)
    conn.sasl_mechanism = request.mechanism
    if ctx.api_version == 0:
        conn.extra[RAW_TOKENS] = True
    return SaslHandshakeResponse(error_code=0, mechanisms=enabled)


def sasl_step(conn: ConnectionState, data: bytes) -> tuple[bytes, str | None]:
    """One token of the exchange: (the answer token, an error message or None); success sets the principal.
    Blocking (a step may read the user's stored SCRAM credential): run it on a listener worker."""
    exchange = conn.sasl_state
    if exchange is None:
        _refuse(conn, "SaslAuthenticate without a SaslHandshake")
        return b"", "SaslHandshake first"
    try:
        answer, done = exchange.step(data)
    except (SaslFailed, ValueError) as e:
        _refuse(conn, str(e))
        return b"", (f"Authentication failed during authentication due to invalid credentials with SASL "
                     f"mechanism {conn.sasl_mechanism}")
    if done:
        conn.principal = exchange.principal
        conn.sasl_state = None
        conn.extra.pop(RAW_TOKENS, None)
        logger.debug("Kafka connection %s authenticated as %s (%s)", conn.peer, conn.principal, conn.sasl_mechanism)
    return answer, None


@kafka_api(SaslAuthenticateRequest, min_version=0, max_version=2, before_auth=True)
async def handle_sasl_authenticate(ctx: RequestContext, request: Any) -> Any:
    conn = ctx.connection
    if conn.sasl_state is None:
        _refuse(conn, "SaslAuthenticate without a SaslHandshake (or after authentication)")
        return SaslAuthenticateResponse(error_code=IllegalSaslStateError.errno,
                                        error_message="SaslHandshake must come first", auth_bytes=b"",
                                        session_lifetime_ms=0)
    answer, error = await ctx.run(sasl_step, conn, bytes(request.auth_bytes))
    if error is not None:
        return SaslAuthenticateResponse(error_code=SaslAuthenticationFailedError.errno, error_message=error,
                                        auth_bytes=b"", session_lifetime_ms=0)
    return SaslAuthenticateResponse(error_code=0, error_message=None, auth_bytes=answer, session_lifetime_ms=0)
