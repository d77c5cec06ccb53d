"""A segment read for the cleaner's compiled loops: whole batches in one reusable buffer, framed
and checked chunk by chunk by the record kernels' ``frame_batches``.

It yields the chunks :func:`cleaner.cleaner._chunks` yields (batches grouped until they reach
``chunk_bytes``, each batch checked as ``RecordBatch.ensure_valid`` checks it, the whole chunk
before any of it is used), as byte ranges of one buffer instead of lists of RecordBatch
objects: the kernels walk them in C. The buffer is read with ``readinto`` and reused, so no
memory is allocated per read; it grows when a chunk does not fit. Wherever a batch fails a
check, or the segment ends inside one, the reference reader and checks are run on that
position to raise their exact CorruptRecordError (file and byte position).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from log.errors import CorruptRecordError
from log.segment import LogSegment

#: the buffer's starting size: a few chunks per read (it doubles while a chunk does not fit)
MIN_BUFFER = 1 << 20


class ChunkReader:
    """The batches of ``segment`` from ``start_position`` to its size now, in checked chunks.

    ``checked``: a byte range ``[first, end)`` of this segment whose batches passed the same
    checks earlier in the round; their CRC is not computed again (the other checks are). The
    rewriting pass passes the range the map pass read, which is safe because those are the
    same bytes: the range is recorded per segment object (``CompactOffsetMap.note_mapped``),
    a rolled segment is never written while the cleaner holds it (appends go to the active
    segment; only this round swaps it out; retention or a restore unlinks it, and the open file
    keeps its bytes), and the chunk reader reads the file, not a cache of it. A batch damaged
    before the round still fails the map pass with the reference error; the clean head (not
    mapped this round) is checked in full.
    """

    def __init__(self, segment: LogSegment, start_position: int, kernels: Any, chunk_bytes: int,
                 checked: tuple[int, int] = (0, 0)) -> None:
        self.segment = segment
        self.checked = checked
        self.start = start_position
        self.end = segment.size  # as _chunks: the size when the pass begins
        self.kernels = kernels
        self.chunk_bytes = max(chunk_bytes, 1)
        #: file position of ``buffer[0]`` (chunks are ranges of the buffer)
        self.file_base = start_position
        self.buffer = bytearray(MIN_BUFFER)

    def chunks(self) -> Iterator[tuple[bytearray, int, int]]:
        """``(buffer, lo, hi)`` per chunk: its batches are ``buffer[lo:hi]``, all checked. The
        bytes stay valid until the next chunk is asked for."""
        if self.start >= self.end:
            return
        frame = self.kernels.frame_batches
        chunk_done, bad = self.kernels.FRAME_CHUNK, self.kernels.FRAME_BAD
        with open(self.segment.log_path, "rb", buffering=0) as f:
            f.seek(self.start)
            buf = self.buffer
            filled = lo = 0
            end = self.end
            while True:
                p, have = lo, 0
                while True:
                    st, p, have = frame(buf, p, filled, self.chunk_bytes, have,
                                        self.checked[0] - self.file_base, self.checked[1] - self.file_base)
                    if st == chunk_done:
                        break
                    if st == bad:
                        self._raise_at(self.file_base + p)
                    # the batch at p is not all here: read more, unless the segment ends
                    if self.file_base + filled >= end:
                        if p == filled:
                            break
                        self._raise_at(self.file_base + p)  # a torn batch: the reader's error
                    # what the batch at p still lacks (its length once its first 17 bytes are here),
                    # no more than the segment holds
                    here = filled - p
                    need = (int.from_bytes(buf[p + 8 : p + 12], "big") + 12 if here >= 17 else 17) - here
                    need = min(need, end - (self.file_base + filled))
                    if len(buf) - filled < need:
                        if lo:  # no room after the data: keep the chunk begun at lo, drop the rest
                            mv = memoryview(buf)
                            mv[: filled - lo] = mv[lo:filled]  # memoryview copies overlap safely
                            mv.release()
                            self.file_base += lo
                            p -= lo
                            filled -= lo
                            lo = 0
                        if len(buf) - filled < need:  # a chunk longer than the buffer: a bigger one
                            grown = bytearray(max(2 * len(buf), 2 * (filled + need)))
                            grown[:filled] = memoryview(buf)[:filled]
                            buf = self.buffer = grown
                    n = self._fill(f, buf, filled, end)
                    if n == 0:  # the file is shorter than its size said: as the end
                        end = self.file_base + filled
                    filled += n
                if p > lo:
                    yield buf, lo, p
                if st != chunk_done:
                    return
                lo = p

    def _fill(self, f: Any, buf: bytearray, filled: int, end: int) -> int:
        """Read into ``buf[filled:]`` up to the end of the buffer or of the pass; bytes read."""
        want = min(len(buf) - filled, end - (self.file_base + filled))
        got = 0
        with memoryview(buf) as mv:
            while got < want:
                n = f.readinto(mv[filled + got : filled + want])
                if not n:
                    break
                got += n
        return got

    def _raise_at(self, position: int) -> None:
        """Run the reference reader and checks at ``position`` (they raise the error)."""
        source = str(self.segment.log_path)
        for pos, batch in self.segment.batches(position, self.end):
            batch.ensure_valid(source=source, position=pos)
            break
        raise CorruptRecordError("record batch failed the cleaner's checks", source=source, position=position)
