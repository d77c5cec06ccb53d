"""HTTP error mapping: every error leaves the API as ``{"error": "<message>"}`` with a status.

One table maps each :class:`~log.errors.TiercompactError` subtree to an HTTP status;
an error's status is that of the nearest class in its MRO found in the table
(``tests/service/test_errors.py`` checks every subclass in the tree has a specific
entry, so a new error type forces a decision here). FastAPI's validation errors, bad
JSON and Starlette's 404/405 are rewritten to the same shape, and an unexpected
exception becomes a 500 whose body names the exception type, never a stack trace.

Service-only errors (authentication, request size, jobs) are defined here (the erasure
workflow's, ErasureNotFoundError (404) and ErasureRefusedError (422), in cleaner.errors):

    TiercompactError
    └── ServiceError
        ├── UnauthorizedError      no bearer token where one is required (401)
        ├── ForbiddenError         a wrong bearer token (403)
        ├── RequestTooLargeError   body or record count above the configured limit (413)
        ├── JobNotFoundError       no such clean job (404)
        ├── PartitionUnwritableError the partition's stored state cannot be written under (409)
        └── ServiceUnavailableError the node is starting or shutting down (503)
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException as StarletteHTTPException

from cleaner.errors import (
    CleanerStateError,
    ErasureNotFoundError,
    ErasureRefusedError,
    InsufficientDiskError,
    LogCleaningAbortedError,
    LogCleaningError,
    OffsetMapFullError,
    ThreadShutdownError,
)
from log.errors import (
    CorruptRecordError,
    DataDirInUseError,
    InvalidConfigError,
    InvalidProducerEpochError,
    InvalidRecordError,
    InvalidRequestError,
    InvalidTxnStateError,
    LogSegmentOffsetOverflowError,
    OffsetOutOfRangeError,
    OutOfOrderSequenceError,
    PartitionBusyError,
    PartitionOfflineError,
    PolicyViolationError,
    RecordTooLargeError,
    TiercompactError,
    TopicCollisionError,
    TopicExistsError,
    UnknownTopicOrPartitionError,
)
from metadata.cluster import DuplicateBrokerError
from metadata.errors import (
    FencedLeaderEpochError,
    InvalidStateTransitionError,
    MetadataError,
    MetadataStoreError,
    MetadataStoreTimeoutError,
    NotLeaderForPartitionError,
    RemoteSegmentNotFoundError,
)
from remote.errors import (
    ObjectNotFoundError,
    RemoteStorageError,
    RemoteStorageIOError,
    RemoteStorageNotInstalledError,
    RemoteStorageTransientError,
)

logger = logging.getLogger(__name__)


class ServiceError(TiercompactError):
    """Root of the errors only the HTTP service raises."""


class UnauthorizedError(ServiceError):
    """A request lacks the bearer token the node requires."""


class ForbiddenError(ServiceError):
    """A request carries a bearer token that does not match."""


class RequestTooLargeError(ServiceError):
    """A request body or record count exceeds the configured limit."""


class JobNotFoundError(ServiceError):
    """No clean job with that id (jobs are kept in memory and lost on restart)."""


class PartitionUnwritableError(ServiceError):
    """The partition's stored state rules out appends until an operator repairs it (for
    example a leader epoch above Kafka's int32 range, accepted by an older version)."""


class ServiceUnavailableError(ServiceError):
    """The node cannot serve this now (shutting down, or a feature not configured)."""

    retriable = True


#: error class -> HTTP status; resolved through the MRO, nearest class first.
STATUS: dict[type[TiercompactError], int] = {
    # log
    InvalidConfigError: 400,
    InvalidRequestError: 400,
    InvalidRecordError: 422,  # e.g. a record without a key on a compacted topic (Kafka's INVALID_RECORD)
    PolicyViolationError: 409,  # the topic's cleanup.policy forbids it (Kafka's POLICY_VIOLATION)
    RecordTooLargeError: 413,
    CorruptRecordError: 500,  # bytes on our disk / in our store are damaged: not the caller's fault
    OffsetOutOfRangeError: 416,
    LogSegmentOffsetOverflowError: 500,
    InvalidProducerEpochError: 409,
    OutOfOrderSequenceError: 409,
    InvalidTxnStateError: 409,
    UnknownTopicOrPartitionError: 404,
    TopicExistsError: 409,
    TopicCollisionError: 409,
    DataDirInUseError: 503,
    PartitionOfflineError: 503,  # this partition's files are damaged; the rest of the node serves
    PartitionBusyError: 503,  # waited request_timeout_ms for a partition busy with background I/O (Retry-After)
    # metadata
    MetadataError: 500,
    FencedLeaderEpochError: 409,
    InvalidStateTransitionError: 409,
    RemoteSegmentNotFoundError: 404,
    MetadataStoreError: 503,
    MetadataStoreTimeoutError: 503,  # a bounded metadata transaction timed out: retry (Retry-After)
    NotLeaderForPartitionError: 409,  # another broker holds the partition's epoch: the message names it
    DuplicateBrokerError: 409,  # another live node registered this broker id (DUPLICATE_BROKER_REGISTRATION)
    # remote
    RemoteStorageError: 502,
    RemoteStorageTransientError: 503,
    ObjectNotFoundError: 502,  # metadata names an object the store lacks: an upstream inconsistency
    RemoteStorageIOError: 502,
    RemoteStorageNotInstalledError: 500,
    # cleaner
    LogCleaningError: 500,
    LogCleaningAbortedError: 409,  # paused or aborted on purpose (topic deleted, leadership moved)
    ThreadShutdownError: 503,
    OffsetMapFullError: 500,
    CleanerStateError: 409,
    InsufficientDiskError: 507,
    # service
    ServiceError: 500,
    UnauthorizedError: 401,
    ForbiddenError: 403,
    RequestTooLargeError: 413,
    JobNotFoundError: 404,
    PartitionUnwritableError: 409,
    ErasureNotFoundError: 404,
    ErasureRefusedError: 422,
    ServiceUnavailableError: 503,
}


def register_status(cls: type[TiercompactError], status: int) -> None:
    """Map an error class of an optional subsystem (imported only when present)."""
    STATUS[cls] = status


def status_for(exc: BaseException | type[BaseException]) -> int:
    cls = exc if isinstance(exc, type) else type(exc)
    for klass in cls.__mro__:
        if klass in STATUS:
            return STATUS[klass]  # type: ignore[index]
    return 500


def mapped_class_for(cls: type[TiercompactError]) -> type[TiercompactError] | None:
    """The table entry deciding ``cls``'s status, or None when only the root would."""
    for klass in cls.__mro__:
        if klass is TiercompactError:
            return None
        if klass in STATUS:
            return klass
    return None


def error_body(message: str) -> dict[str, str]:
    return {"error": message}


#: pydantic error types meaning "a well-formed value outside the field's range"
_RANGE_ERRORS = frozenset({"greater_than", "greater_than_equal", "less_than", "less_than_equal"})
#: what service.schemas' value checks say (pydantic reports them as value_error): a
#: number out of its Kafka range, a string no UTF-8 encoder takes
OUT_OF_RANGE = "is out of range"
NOT_UNICODE = "is not valid Unicode text"


def _is_range_error(err: dict[str, Any]) -> bool:
    """A well-formed request with a bad value (400), as opposed to a wrong shape (422)."""
    return err.get("type") in _RANGE_ERRORS or (
        err.get("type") == "value_error" and any(m in str(err.get("msg", "")) for m in (OUT_OF_RANGE, NOT_UNICODE)))


def _validation_message(errors: list[dict[str, Any]]) -> tuple[int, str]:
    """One readable line per pydantic error.

    Malformed JSON and values outside a field's range (a Kafka int32 epoch of 2^31) are a
    400, as the core's own range checks are; a wrong shape (missing or unknown field, wrong
    type) is a 422.
    """
    parts = []
    status = 400 if errors and all(_is_range_error(e) for e in errors) else 422
    for err in errors:
        if err.get("type") == "missing" and tuple(err.get("loc", ())) == ("body",):
            parts.append("request body is missing; send a JSON object with Content-Type: application/json")
            continue
        if err.get("type") == "json_invalid":
            status = 400
            ctx = err.get("ctx") or {}
            parts.append(f"request body is not valid JSON ({ctx.get('error', 'parse error')}); "
                         f"send a JSON object with Content-Type: application/json")
            continue
        loc = [str(x) for x in err.get("loc", ()) if x != "body"]
        where = ".".join(loc) if loc else "request body"
        if loc and err.get("loc", ("",))[0] == "query":
            where = f"query parameter {'.'.join(loc[1:])}"
        elif loc and err.get("loc", ("",))[0] == "path":
            where = f"path parameter {'.'.join(loc[1:])}"
        parts.append(f"{where}: {str(err.get('msg', 'invalid')).removeprefix('Value error, ')}")
    return status, "; ".join(parts) or "invalid request"


#: FastAPI's HTTPException detail when the body fails to parse beyond a JSON syntax error
#: (RecursionError on deep nesting, ValueError on a number past Python's digit limit)
FASTAPI_BODY_PARSE_ERROR = "There was an error parsing the body"


def _is_json(media_type: str) -> bool:
    """application/json or a structured ``+json`` type, the media types FastAPI parses as JSON."""
    return media_type == "application/json" or (media_type.startswith("application/") and
                                                media_type.endswith("+json"))


def install_error_handlers(app: FastAPI, on_error: Callable[[TiercompactError], None] | None = None) -> None:
    """Register the handlers; ``on_error`` sees every TiercompactError (metrics count fencing)."""

    @app.exception_handler(TiercompactError)
    def _tiercompact(request: Request, exc: TiercompactError) -> JSONResponse:
        status = status_for(exc)
        if on_error is not None:
            on_error(exc)
        if status >= 500:
            logger.error("%s %s failed: %s: %s", request.method, request.url.path, type(exc).__name__, exc)
        headers = {"WWW-Authenticate": "Bearer"} if status == 401 else None
        if status == 503 and getattr(exc, "retriable", False):
            headers = {"Retry-After": str(max(1, int(getattr(exc, "retry_after_s", 1))))}
        return JSONResponse(error_body(str(exc) or type(exc).__name__), status_code=status, headers=headers)

    @app.exception_handler(RequestValidationError)
    def _validation(request: Request, exc: RequestValidationError) -> JSONResponse:
        errors = list(exc.errors())
        media_type = request.headers.get("content-type", "").split(";")[0].strip().lower()
        if any(e.get("loc", ("",))[0] == "body" for e in errors) and not _is_json(media_type):
            # without a JSON content type FastAPI does not parse the body at all, and
            # pydantic's complaint about the unparsed bytes says nothing useful
            given = f"Content-Type {media_type!r}" if media_type else "no Content-Type"
            return JSONResponse(error_body(f"the request body must be JSON: send it with Content-Type: "
                                           f"application/json (the request had {given})"), status_code=415)
        status, message = _validation_message(errors)
        return JSONResponse(error_body(message), status_code=status)

    @app.exception_handler(StarletteHTTPException)
    def _http(request: Request, exc: StarletteHTTPException) -> JSONResponse:
        detail = exc.detail if isinstance(exc.detail, str) else str(exc.detail)
        if exc.status_code == 404 and detail == "Not Found":
            detail = (f"no such endpoint {request.method} {request.url.path}; topic names may only use "
                      f"[a-zA-Z0-9._-]; see /docs")
        elif exc.status_code == 400 and detail == FASTAPI_BODY_PARSE_ERROR:
            # FastAPI's words when json.loads fails with something other than a syntax error
            detail = ("request body could not be parsed as JSON: it is nested too deeply or holds a number "
                      "too long to convert; send a plain JSON object with Content-Type: application/json")
        elif exc.status_code == 405:
            detail = f"method {request.method} is not allowed on {request.url.path}; see /docs"
        return JSONResponse(error_body(detail), status_code=exc.status_code, headers=exc.headers)

    @app.exception_handler(Exception)
    def _unexpected(request: Request, exc: Exception) -> JSONResponse:
        logger.exception("%s %s failed unexpectedly", request.method, request.url.path)
        return JSONResponse(error_body(f"internal error ({type(exc).__name__}); the server log has the details"),
                            status_code=500)
