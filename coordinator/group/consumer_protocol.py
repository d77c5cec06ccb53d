"""Reads the "consumer" protocol's embedded bytes (ConsumerProtocolSubscription / ConsumerProtocolAssignment) for operators and OffsetDelete."""

from __future__ import annotations

import struct


def _string(data: bytes, pos: int) -> tuple[str, int]:
    (ln,) = struct.unpack_from(">h", data, pos)
    if ln < 0 or pos + 2 + ln > len(data):
        raise ValueError("bad string")
    return bytes(data[pos + 2:pos + 2 + ln]).decode(), pos + 2 + ln


def subscribed_topics(metadata: bytes) -> set[str] | None:
    """The topics of a subscription (every version starts: int16 version, topic array); None if unreadable."""
    try:
        (n,) = struct.unpack_from(">i", metadata, 2)
        pos, out = 6, set()
        for _ in range(n):
            topic, pos = _string(metadata, pos)
            out.add(topic)
        return out
    except (struct.error, ValueError, UnicodeDecodeError):
        return None


def assigned_partitions(assignment: bytes) -> dict[str, list[int]] | None:
    """Topic -> partitions of an assignment (int16 version, [topic, [int32]]); None if empty or unreadable."""
    if not assignment:
        return None
    try:
        (n,) = struct.unpack_from(">i", assignment, 2)
        pos, out = 6, {}
        for _ in range(n):
            topic, pos = _string(assignment, pos)
            (k,) = struct.unpack_from(">i", assignment, pos)
            out[topic] = list(struct.unpack_from(f">{k}i", assignment, pos + 4))
            pos += 4 + 4 * k
        return out
    except (struct.error, ValueError, UnicodeDecodeError):
        return None
