"""Kafka's retention walk (retention.ms, then retention.bytes) over segments, local ones or remote metadata."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TypeVar

T = TypeVar("T")


def retention_breached(items: Sequence[T], now: int, retention_ms: int, retention_bytes: int, *, total_bytes: int,
                       size: Callable[[T], int], max_timestamp: Callable[[T], int]) -> list[T]:
    """Kafka's retention walk over segments oldest first (local ones, or remote metadata).

    A prefix of ``items`` whose newest record is older than ``retention_ms`` (-1: no limit),
    then further oldest items while ``total_bytes`` stays above ``retention_bytes`` without them.
    """
    out: list[T] = []
    if retention_ms >= 0:
        for item in items:
            if now - max_timestamp(item) <= retention_ms:
                break
            out.append(item)
    if retention_bytes >= 0:
        excess = total_bytes - retention_bytes
        taken = len(out)
        for item in items[:taken]:
            excess -= size(item)
        for item in items[taken:]:
            if excess - size(item) < 0:
                break
            out.append(item)
            excess -= size(item)
    return out
