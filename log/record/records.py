"""Reading record batches from a segment file in bounded chunks (Kafka's ``FileRecords`` /
``FileLogInputStream``).

A file is a plain concatenation of v2 batches (layout in ``log/record/batch.py``). The reader
never loads the whole file: it reads ``buffer_size`` bytes at a time and yields batches as
memoryviews into immutable ``bytes`` chunks, so a yielded batch stays valid after the reader
moves on. A batch larger than the buffer gets a read of its own size.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from typing import BinaryIO

from log.errors import CorruptRecordError
from log.record.batch import (
    HEADER_SIZE_UP_TO_MAGIC,
    LENGTH_MAGIC_STRUCT,
    LOG_OVERHEAD,
    MAGIC_VALUE_V2,
    MIN_BATCH_LENGTH,
    RecordBatch,
)

DEFAULT_BUFFER_SIZE = 1 << 20


def iter_file_batches(
    path_or_fileobj: str | os.PathLike[str] | BinaryIO,
    start_position: int = 0,
    end_position: int | None = None,
    *,
    source: str | None = None,
    allow_truncated_tail: bool = False,
    buffer_size: int = DEFAULT_BUFFER_SIZE,
) -> Iterator[tuple[int, RecordBatch]]:
    """Yield ``(absolute file position, batch)`` for the batches in [start_position, end_position).

    Same rules as :func:`log.record.batch.iter_batches`: length and magic are checked, the CRC is
    not; a batch running past the end stops the walk if ``allow_truncated_tail`` and raises
    CorruptRecordError otherwise. ``end_position`` None means end of file.
    """
    if buffer_size < HEADER_SIZE_UP_TO_MAGIC:
        raise ValueError(f"buffer_size {buffer_size} is too small")
    if isinstance(path_or_fileobj, (str, os.PathLike)):
        if source is None:
            source = os.fspath(path_or_fileobj)
        fd = os.open(path_or_fileobj, os.O_RDONLY)
        try:
            yield from _iter_fileobj(
                _PositionalReader(fd), start_position, end_position, source, allow_truncated_tail, buffer_size
            )
        finally:
            os.close(fd)
    else:
        if source is None:
            source = getattr(path_or_fileobj, "name", None)
            source = source if isinstance(source, str) else None
        yield from _iter_fileobj(
            path_or_fileobj, start_position, end_position, source, allow_truncated_tail, buffer_size
        )


class _PositionalReader:
    """What :func:`_iter_fileobj` needs of a file (``seek``, ``read``) over a bare descriptor,
    reading with ``pread``: a segment read is open, pread, close. A Python file object adds an
    ``fstat`` and an ``lseek``, and each of these system calls lets another thread take the
    GIL (on a busy server a thread switch or two per call: a fetch page makes about five)."""

    __slots__ = ("fd", "pos")

    def __init__(self, fd: int) -> None:
        self.fd = fd
        self.pos = 0

    def seek(self, pos: int) -> int:
        self.pos = pos
        return pos

    def read(self, size: int) -> bytes:
        data = os.pread(self.fd, size, self.pos)
        self.pos += len(data)
        return data


def _iter_fileobj(
    f: BinaryIO | _PositionalReader,
    start: int,
    end: int | None,
    source: str | None,
    allow_truncated_tail: bool,
    buffer_size: int,
) -> Iterator[tuple[int, RecordBatch]]:
    f.seek(start)
    file_pos = start  # file position of chunk[0]
    chunk = b""
    eof = False
    unpack = LENGTH_MAGIC_STRUCT.unpack_from

    def read_more(want: int) -> None:
        nonlocal chunk, eof
        if eof:
            return
        limit = want if end is None else min(want, end - (file_pos + len(chunk)))
        data = f.read(limit) if limit > 0 else b""
        if len(data) < limit or limit <= 0:
            eof = True
        if data:
            chunk = chunk + data if chunk else data

    read_more(buffer_size)
    pos = 0  # position in chunk
    while True:
        avail = len(chunk) - pos
        size = HEADER_SIZE_UP_TO_MAGIC  # what must be buffered to go on: the header, then the batch
        if avail >= size:
            length, magic = unpack(chunk, pos + 8)
            if length < MIN_BATCH_LENGTH:
                raise CorruptRecordError(
                    f"record batch length {length} is smaller than the minimum {MIN_BATCH_LENGTH}",
                    source=source,
                    position=file_pos + pos,
                )
            if magic != MAGIC_VALUE_V2:
                raise CorruptRecordError(
                    f"record batch has magic {magic}, expected {MAGIC_VALUE_V2}",
                    source=source,
                    position=file_pos + pos,
                )
            size = length + LOG_OVERHEAD
            if size <= avail:
                yield file_pos + pos, RecordBatch(memoryview(chunk)[pos : pos + size])
                pos += size
                continue
        if not eof:
            chunk = chunk[pos:]
            file_pos += pos
            pos = 0
            read_more(max(buffer_size, size) - len(chunk))
            continue
        if avail == 0 or allow_truncated_tail:
            return
        raise CorruptRecordError(
            f"truncated record batch header: {avail} bytes left"
            if avail < HEADER_SIZE_UP_TO_MAGIC
            else f"truncated record batch: {size} bytes declared, {avail} available",
            source=source,
            position=file_pos + pos,
        )


def read_batch_at(fileobj: BinaryIO, position: int, *, source: str | None = None) -> RecordBatch:
    """Read the one batch that starts at ``position``; a short or malformed batch raises CorruptRecordError."""
    if source is None:
        name = getattr(fileobj, "name", None)
        source = name if isinstance(name, str) else None
    fileobj.seek(position)
    head = fileobj.read(HEADER_SIZE_UP_TO_MAGIC)
    if len(head) < HEADER_SIZE_UP_TO_MAGIC:
        raise CorruptRecordError(
            f"truncated record batch header: {len(head)} bytes", source=source, position=position
        )
    length, magic = LENGTH_MAGIC_STRUCT.unpack_from(head, 8)
    if length < MIN_BATCH_LENGTH:
        raise CorruptRecordError(
            f"record batch length {length} is smaller than the minimum {MIN_BATCH_LENGTH}",
            source=source,
            position=position,
        )
    if magic != MAGIC_VALUE_V2:
        raise CorruptRecordError(
            f"record batch has magic {magic}, expected {MAGIC_VALUE_V2}", source=source, position=position
        )
    rest = fileobj.read(length + LOG_OVERHEAD - HEADER_SIZE_UP_TO_MAGIC)
    if len(rest) < length + LOG_OVERHEAD - HEADER_SIZE_UP_TO_MAGIC:
        raise CorruptRecordError(
            f"truncated record batch: {length + LOG_OVERHEAD} bytes declared,"
            f" {len(head) + len(rest)} available",
            source=source,
            position=position,
        )
    return RecordBatch(head + rest)
