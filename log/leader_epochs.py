"""Kafka's LeaderEpochFileCache: a partition's leader-epoch history (epoch -> start offset), kept in its checkpoint file."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from log.checkpoint import LEADER_EPOCH_CHECKPOINT, LeaderEpochCheckpointFile
from log.errors import InvalidRequestError
from log.types import EpochEntry


class LeaderEpochCache:
    """The history in memory and on disk; the owning LocalLog's lock guards it."""

    def __init__(self, directory: Path) -> None:
        self.file = LeaderEpochCheckpointFile(directory / LEADER_EPOCH_CHECKPOINT)
        self.entries: list[EpochEntry] = []

    @property
    def latest(self) -> int:
        """The newest epoch, -1 for none."""
        return self.entries[-1].epoch if self.entries else -1

    def assign(self, epoch: int, start: int) -> None:
        """Record that ``epoch`` starts at ``start`` (entries of later epochs there or after are dropped)."""
        latest = self.latest
        if epoch < latest:
            raise InvalidRequestError(f"leader epoch {epoch} is below the current {latest}")
        if epoch == latest:
            return
        self.entries = [e for e in self.entries if e.start_offset < start or e.epoch < epoch]
        self.entries.append(EpochEntry(epoch, start))
        self.file.write(self.entries)

    def reset(self, entries: Sequence[EpochEntry], end: int) -> None:
        """Replace the history with ``entries`` starting at or below ``end``."""
        self.entries = [e for e in entries if e.start_offset <= end]
        self.file.write(self.entries)

    def truncate_from_end(self, end: int) -> None:
        """Kafka's truncateFromEnd, when the log end moves back to ``end`` (recovery cut a torn tail): the epochs
        that began after it go. One beginning at ``end`` stays: a leader's epoch is recorded at the log end when
        it takes over, before its first append."""
        kept = [e for e in self.entries if e.start_offset <= end]
        if len(kept) != len(self.entries):
            self.entries = kept
            self.file.write(self.entries)

    def truncate_from_start(self, start: int) -> None:
        """Kafka's truncateFromStart, when the log start offset moves up to ``start``: the epochs that began at or
        below it go but the last of them, which now begins at ``start``. An OffsetForLeaderEpoch for an epoch
        wholly deleted then answers the log start, not an offset nobody can read any more."""
        below = [e for e in self.entries if e.start_offset <= start]
        if not below or (len(below) == 1 and below[0].start_offset == start):
            return
        self.entries = [EpochEntry(below[-1].epoch, start), *(e for e in self.entries if e.start_offset > start)]
        self.file.write(self.entries)

    def for_range(self, start: int, end: int) -> dict[int, int]:
        """{epoch: first offset within [start, end)} — a segment's ``segment_leader_epochs``."""
        out: dict[int, int] = {}
        entries = self.entries
        for i, e in enumerate(entries):
            nxt = entries[i + 1].start_offset if i + 1 < len(entries) else 2**63
            lo, hi = max(start, e.start_offset), min(end, nxt)
            if lo < hi:
                out[e.epoch] = lo
        if not out:
            # no epoch began within or before the range: none known (epoch 0), or the range lies below the first
            # entry, as a segment below a log start the history was truncated at does (truncate_from_start) until
            # retention removes it; it gets the oldest epoch known, not the newest, so a lineage rebuilt from the
            # segments' epochs stays in order
            out[max(entries[0].epoch if entries else 0, 0)] = start
        return out
