"""Stored record-batch bytes of a local log for a Kafka Fetch, cut at whole batches, never decoded.

Kafka's LocalLog.read / LogSegment.read: the first batch returned is the one holding the fetch
offset (a fetch starting inside a batch gets the whole batch), then whole batches up to
``max_bytes``; with ``min_one`` the first batch is returned whole even when it is bigger than
the limit (Kafka's minOneMessage, so a consumer never stalls on a large batch). ``max_offset``
bounds a read_committed fetch by the last stable offset (no batch starting at or after it).
Each segment is read with one ``pread`` from the batch position the offset index points at;
only the 12-byte length prefixes (and the 8-byte base offsets for ``max_offset``) are looked at.
"""

from __future__ import annotations

import os
import struct
from dataclasses import dataclass
from typing import TYPE_CHECKING

from log.errors import OffsetOutOfRangeError
from log.page_cache import behind_window
from log.record import LOG_OVERHEAD

if TYPE_CHECKING:
    from log.local_log import LocalLog
    from log.segment import LogSegment

_BASE_LEN = struct.Struct(">qi")
_HEADER = 27  # up to and including lastOffsetDelta
_LAST_DELTA = struct.Struct(">i")
_LAST_DELTA_AT = 23  # baseOffset 8, length 4, leaderEpoch 4, magic 1, crc 4, attributes 2
_READ_ATTEMPTS = 3
_SLACK = 64 * 1024  # read past the budget so a small next batch need not wait for another pread


@dataclass(frozen=True, slots=True)
class RawBatches:
    """Whole stored batches: ``chunks``, the buffers read one after the other (none when nothing is
    readable; views of the bytes each read returned, so a sender may write them without joining
    them) and ``next_offset``, the offset after the last batch returned (the fetch offset itself
    when none was). ``data`` is the batches as one buffer."""

    chunks: tuple[bytes | memoryview, ...]
    next_offset: int

    @property
    def data(self) -> bytes | memoryview:
        return join_chunks(self.chunks)


def join_chunks(chunks: tuple[bytes | memoryview, ...]) -> bytes | memoryview:
    """The chunks as one buffer (the only one itself; b"" for none)."""
    if len(chunks) == 1:
        return chunks[0]
    return b"".join(chunks)


def walk_batches(buf: bytes | memoryview, offset: int, budget: int, *, min_one: bool,
                 max_offset: int | None = None) -> tuple[int, int, int, bool, int]:
    """Walk the batches at the start of ``buf`` (which begins at a batch boundary).

    Returns ``(start, stop, next_offset, done, need)``: ``buf[start:stop]`` are the whole batches
    to return (those ending below ``offset`` are skipped), ``next_offset`` the offset after
    them (-1 if none), ``done`` whether the page is complete (the budget or ``max_offset`` was
    reached), else ``buf`` ran out at ``stop`` and ``need`` is how many bytes the batch there
    takes (a header's worth when even its header is cut).
    """
    pos = 0
    start = -1
    nxt = -1
    end = len(buf)
    while end - pos >= _HEADER:
        base, length = _BASE_LEN.unpack_from(buf, pos)
        size = LOG_OVERHEAD + length
        last = base + _LAST_DELTA.unpack_from(buf, pos + _LAST_DELTA_AT)[0]
        if start < 0:
            if last < offset:
                if pos + size > end:
                    return pos, pos, nxt, False, size
                pos += size
                continue
            start = pos
        if max_offset is not None and base >= max_offset:
            return start, pos, nxt, True, 0
        taken = pos - start
        if taken + size > budget and (taken or not min_one):
            return start, pos, nxt, True, 0
        if pos + size > end:
            return start, pos, nxt, False, size
        pos += size
        nxt = last + 1
    return (pos if start < 0 else start), pos, nxt, False, _HEADER


def _read_segment(log: LocalLog, seg: LogSegment, size: int, offset: int, budget: int, min_one: bool,
                  max_offset: int | None, parts: list[bytes | memoryview], floor: int = 0) -> tuple[int, int, bool]:
    """Append whole batches of one segment, from the one holding ``offset``, to ``parts``:
    ``(bytes added, next offset or -1, page done)``. What is read below ``floor`` (behind the log's page-cache
    window) is dropped from the page cache once read (``log``'s :meth:`LocalLog.drop_from_cache`: on the node's
    drop-behind thread, off the fetch's path)."""
    pos = seg.offset_index.lookup(offset)[1] if offset > seg.base_offset else 0
    if not 0 <= pos < size:
        pos = 0
    taken = 0
    nxt = -1
    need = _HEADER
    fd = os.open(seg.log_path, os.O_RDONLY)
    try:
        while pos < size:
            want = min(size - pos, max(budget - taken + _SLACK, need))
            buf = os.pread(fd, want, pos)
            if pos < floor:
                log.drop_from_cache(seg, pos, min(pos + len(buf), floor))
            if len(buf) < min(want, _HEADER):
                break  # the file is shorter than the size captured (truncated under us)
            start, stop, n, done, need = walk_batches(buf, offset, budget - taken,
                                                      min_one=min_one and not taken and not parts,
                                                      max_offset=max_offset)
            if stop > start:
                parts.append(buf if (start == 0 and stop == len(buf)) else memoryview(buf)[start:stop])
                taken += stop - start
                nxt = n
                offset = n
            if done:
                return taken, nxt, True
            if stop == 0 and (pos + len(buf) >= size or len(buf) >= need):
                break  # a batch running past the size captured (a torn tail): serve what was read
            pos += stop
    finally:
        os.close(fd)
    return taken, nxt, False


def read_raw(log: LocalLog, offset: int, max_bytes: int, *, min_one: bool = True,
             max_offset: int | None = None) -> RawBatches:
    """Stored batches of ``log`` from the one holding ``offset``, up to ``max_bytes`` (see the
    module docstring). Raises OffsetOutOfRangeError outside [log start, log end]."""
    for attempt in range(_READ_ATTEMPTS):
        try:
            return _read_raw(log, offset, max_bytes, min_one, max_offset)
        except FileNotFoundError:
            # the cleaner swapped or retention deleted a segment between the look-up and the read
            if attempt == _READ_ATTEMPTS - 1:
                raise
    raise AssertionError("unreachable")  # pragma: no cover


def readable_segments(log: LocalLog, offset: int) -> tuple[list[LogSegment], list[int]]:
    """The segments a read from ``offset`` looks at and their sizes, taken together under the log's lock (the last
    one is the active segment).

    Raises:
        OffsetOutOfRangeError: ``offset`` is outside [log start offset, log end offset].
    """
    with log.lock:
        start, end = log.log_start_offset, log.log_end_offset
        if offset < start or offset > end:
            raise OffsetOutOfRangeError(
                f"offset {offset} is outside the local log [{start}, {end}] of {log.topic_partition}")
        segs = log.segments.range(offset, end + 1) or log.segments.all()
        return segs, [s.size for s in segs]


def _read_raw(log: LocalLog, offset: int, max_bytes: int, min_one: bool, max_offset: int | None) -> RawBatches:
    segs, sizes = readable_segments(log, offset)
    floors = behind_window(sizes, log.page_cache_window)
    parts: list[bytes | memoryview] = []
    total = 0
    nxt = offset
    for seg, size, floor in zip(segs, sizes, floors, strict=True):
        if max_offset is not None and nxt >= max_offset:
            break
        n, seg_next, done = _read_segment(log, seg, size, nxt, max_bytes - total, min_one, max_offset, parts, floor)
        total += n
        if seg_next >= 0:
            nxt = seg_next
        if done:
            break
    return RawBatches(tuple(parts), nxt)
