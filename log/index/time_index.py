"""The time index ``<base>.timeindex``.

Kafka's TimeIndex (storage/.../log/TimeIndex.java): 12-byte big-endian entries

| bytes | field | meaning |
|---|---|---|
| 0-7  | timestamp int64      | the largest timestamp seen up to the offset |
| 8-11 | relativeOffset int32 | offset - segment base offset |

Timestamps strictly increase: an entry is appended only when its timestamp exceeds the
last one's, so a log whose records all have timestamp -1 has an empty time index.
"""

from __future__ import annotations

import bisect
import struct

from log.errors import CorruptIndexError
from log.index.base import SegmentIndex


class TimeIndex(SegmentIndex):
    entry = struct.Struct(">qi")

    def _check(self, entries: list[tuple[int, ...]]) -> None:
        last_ts, last_rel = -(2**63), -1
        for ts, rel in entries:
            if ts <= last_ts or rel < last_rel or rel < 0:
                raise CorruptIndexError(f"time index entries out of order ({ts}, {rel})", source=str(self.path))
            last_ts, last_rel = ts, rel

    def maybe_append(self, timestamp: int, offset: int) -> None:
        """Append (timestamp, offset) if the timestamp is larger than the last entry's."""
        if timestamp < 0 or (self._keys and timestamp <= self._keys[-1]):
            return
        rel = offset - self.base_offset
        if self._entries and rel < self._entries[-1][1]:
            return
        self._append_entry(timestamp, rel)

    @property
    def last_entry(self) -> tuple[int, int]:
        """(timestamp, offset) of the last entry, or (-1, base)."""
        if not self._entries:
            return -1, self.base_offset
        ts, rel = self._entries[-1]
        return ts, self.base_offset + rel

    def lookup(self, timestamp: int) -> int:
        """The offset from which records with timestamp >= ``timestamp`` may appear."""
        i = bisect.bisect_left(self._keys, timestamp) - 1
        if i < 0:
            return self.base_offset
        return self.base_offset + self._entries[i][1]

    def truncate_to(self, offset: int) -> None:
        rel = offset - self.base_offset
        keep = len(self._entries)
        while keep and self._entries[keep - 1][1] >= rel:
            keep -= 1
        self._truncate_entries(keep)
