"""A segment read for the cleaner's compiled loops: whole batches in one reusable buffer, framed
and checked chunk by chunk by the record kernels' ``frame_batches``.

It yields the chunks :func:`cleaner.cleaner._chunks` yields (batches grouped until they reach
``chunk_bytes``, each batch checked as ``RecordBatch.ensure_valid`` checks it, the whole chunk
before any of it is used), as byte ranges of one buffer instead of lists of RecordBatch
objects: the kernels walk them in C. The buffer is read with ``readinto`` and reused, so no
memory is allocated per read; it grows when a chunk does not fit. Wherever a batch fails a
check, or the segment ends inside one, the reference reader and checks are run on that
position to raise their exact CorruptRecordError (file and byte position). The rewriting pass
may give it holes, runs of batches it need not read (:meth:`ChunkReader.pieces`).
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
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

    ``holes``: byte ranges of whole batches inside ``checked`` that are not read at all (the
    rewriting pass's runs of batches whose every record is superseded, ``superseded_runs``),
    each a tuple ``(start, end, first_note, n_notes, ...)`` over ``notes`` (the map pass's notes
    of those batches, which give their sizes). They still count in the chunking: a chunk
    holds the same batches as the reference's, some of them as a hole, and every batch read
    of a chunk is checked before any of the chunk is used.
    """

    def __init__(self, segment: LogSegment, start_position: int, kernels: Any, chunk_bytes: int,
                 checked: tuple[int, int] = (0, 0), holes: Sequence[tuple[int, ...]] = (),
                 notes: bytes | bytearray | None = None) -> None:
        self.segment = segment
        self.checked = checked
        self.start = start_position
        self.end = segment.size  # as _chunks: the size when the pass begins
        self.kernels = kernels
        self.chunk_bytes = max(chunk_bytes, 1)
        self.holes = [h for h in holes if start_position <= h[0] and h[1] <= self.end]
        self.notes = notes
        #: file position of ``buffer[0]`` for the chunk :meth:`chunks` yielded last (chunks are
        #: ranges of the buffer)
        self.file_base = start_position
        self.buffer = bytearray(MIN_BUFFER)

    def chunks(self) -> Iterator[tuple[bytearray, int, int]]:
        """``(buffer, lo, hi)`` per chunk: its batches are ``buffer[lo:hi]``, all checked. The
        bytes stay valid until the next chunk is asked for. Without holes only."""
        assert not self.holes, "a reader with holes yields pieces"
        for buf, pieces in self.pieces():
            lo, hi, base, _hole = pieces[0]
            self.file_base = base
            yield buf, lo, hi

    def pieces(self) -> Iterator[tuple[bytearray, list[tuple[int, int, int, int]]]]:
        """``(buffer, pieces)`` per chunk, the pieces in file order: ``(lo, hi, base, -1)`` for
        batches read, ``buffer[lo:hi]``, ``base + i`` being the file position of ``buffer[i]``;
        ``(0, 0, 0, h)`` for the hole ``holes[h]`` (its batches are not read). Every batch read
        is checked before its chunk is yielded; the bytes stay valid until the next chunk is
        asked for. A chunk that ends inside a hole holds the hole."""
        if self.start >= self.end:
            return
        frame = self.kernels.frame_batches
        chunk_done, bad = self.kernels.FRAME_CHUNK, self.kernels.FRAME_BAD
        walk = self.kernels.chunk_walk
        holes = self.holes
        h = 0
        checked_lo, checked_hi = self.checked
        chunk_bytes = self.chunk_bytes
        with open(self.segment.log_path, "rb", buffering=0) as f:
            f.seek(self.start)
            buf = self.buffer
            filled = lo = 0
            read_pos = self.start  # file position of buf[filled]
            end = self.end
            base = self.start  # file position of buf[0] for the piece being framed
            have = 0
            while True:
                out: list[tuple[int, int, int, int]] = []
                p = piece_lo = lo
                closed_in_hole = False
                while True:
                    st, p, have = frame(buf, p, filled, chunk_bytes, have, checked_lo - base, checked_hi - base)
                    if st == chunk_done:
                        break
                    if st == bad:
                        self._raise_at(base + p)
                    # the batch at p is not all here
                    if p == filled and h < len(holes) and read_pos == holes[h][0]:
                        # a hole: its batches join the chunk(s) unread; reading resumes after it
                        if p > piece_lo:
                            out.append((piece_lo, p, base, -1))
                        hole = holes[h]
                        closed, have = walk(self.notes, hole[2], hole[3], have, chunk_bytes)
                        out.append((0, 0, 0, h))
                        h += 1
                        read_pos = hole[1]
                        f.seek(read_pos)
                        piece_lo, base = p, read_pos - p
                        if closed:  # the chunk ended among the hole's batches
                            closed_in_hole = True
                            break
                        continue
                    if read_pos >= end:
                        if p == filled:
                            break
                        self._raise_at(base + p)  # a torn batch: the reader's error
                    # what the batch at p still lacks (its length once its first 17 bytes are here),
                    # no more than the segment holds
                    here = filled - p
                    need = (int.from_bytes(buf[p + 8 : p + 12], "big") + 12 if here >= 17 else 17) - here
                    limit = holes[h][0] if h < len(holes) else end
                    if limit - read_pos < need and limit < end:
                        holes = holes[:h]  # a batch runs into a hole: the notes are not these bytes, read all
                        limit = end
                    need = min(need, end - read_pos)
                    if len(buf) - filled < need:
                        if lo:  # no room after the data: keep the chunk begun at lo, drop the rest
                            mv = memoryview(buf)
                            mv[: filled - lo] = mv[lo:filled]  # memoryview copies overlap safely
                            mv.release()
                            out = [(a - lo, b - lo, c + lo, d) if d < 0 else (a, b, c, d) for a, b, c, d in out]
                            base += lo
                            p -= lo
                            piece_lo -= lo
                            filled -= lo
                            lo = 0
                        if len(buf) - filled < need:  # a chunk longer than the buffer: a bigger one
                            grown = bytearray(max(2 * len(buf), 2 * (filled + need)))
                            grown[:filled] = memoryview(buf)[:filled]
                            buf = self.buffer = grown
                    n = self._fill(f, buf, filled, min(limit - read_pos, len(buf) - filled))
                    if n == 0:  # the file is shorter than its size said: as the end
                        end = read_pos
                    filled += n
                    read_pos += n
                if p > piece_lo:
                    out.append((piece_lo, p, base, -1))
                if out:
                    yield buf, out
                if st != chunk_done and not closed_in_hole:
                    return
                if not closed_in_hole:
                    have = 0
                lo = p

    @staticmethod
    def _fill(f: Any, buf: bytearray, filled: int, want: int) -> int:
        """Read up to ``want`` bytes into ``buf[filled:]``; bytes read (fewer at the end of file)."""
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
