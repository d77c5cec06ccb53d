"""Record fields between request/response strings and bytes (``encoding`` utf-8 or base64)."""

from __future__ import annotations

import base64

from log.errors import InvalidRequestError


def decode_field(value: str | None, encoding: str, what: str) -> bytes | None:
    """A request's key/value/header string -> bytes; bad base64 is a 400 naming the field."""
    if value is None:
        return None
    if encoding == "base64":
        try:
            return base64.b64decode(value, validate=True)
        except (ValueError, TypeError):
            raise InvalidRequestError(f"{what} is not valid base64: {value[:40]!r}") from None
    return value.encode("utf-8")


def encode_field(value: bytes | None, encoding: str, what: str) -> str | None:
    """Record bytes -> a response string; bytes that are not UTF-8 ask for encoding=base64."""
    if value is None:
        return None
    if encoding == "base64":
        return base64.b64encode(value).decode("ascii")
    try:
        return value.decode("utf-8")
    except UnicodeDecodeError:
        raise InvalidRequestError(f"{what} is not valid UTF-8; read with encoding=base64") from None
