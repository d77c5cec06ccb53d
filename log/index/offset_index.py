"""The offset index ``<base>.index``.

Kafka's OffsetIndex (storage/.../log/OffsetIndex.java): 8-byte big-endian entries

| bytes | field | meaning |
|---|---|---|
| 0-3 | relativeOffset int32 | offset - segment base offset |
| 4-7 | position int32       | byte position in the .log where the batch holding it starts |

Sparse: an entry is added after at least ``index.interval.bytes`` were appended. A
lookup returns the greatest entry whose offset is <= the target, or (base, 0).
"""

from __future__ import annotations

import bisect
import struct

from log.errors import CorruptIndexError, LogSegmentOffsetOverflowError
from log.index.base import SegmentIndex

INT32_MAX = 2**31 - 1


class OffsetIndex(SegmentIndex):
    entry = struct.Struct(">ii")

    def _check(self, entries: list[tuple[int, ...]]) -> None:
        last_rel, last_pos = -1, -1
        for rel, pos in entries:
            if rel <= last_rel or pos < last_pos or rel < 0:
                raise CorruptIndexError(f"offset index entries out of order ({rel}, {pos})", source=str(self.path))
            last_rel, last_pos = rel, pos

    def relative(self, offset: int) -> int:
        rel = offset - self.base_offset
        if rel < 0 or rel > INT32_MAX:
            raise LogSegmentOffsetOverflowError(
                f"offset {offset} does not fit segment base {self.base_offset} (relative {rel})")
        return rel

    def append(self, offset: int, position: int) -> None:
        rel = self.relative(offset)
        if self._keys and rel <= self._keys[-1]:
            raise CorruptIndexError(f"offset index append out of order: {offset} after "
                                    f"{self._keys[-1] + self.base_offset}", source=str(self.path))
        self._append_entry(rel, position)

    def lookup(self, target: int) -> tuple[int, int]:
        """(offset, position) of the greatest entry with offset <= target, else (base, 0)."""
        i = bisect.bisect_right(self._keys, target - self.base_offset) - 1
        if i < 0:
            return self.base_offset, 0
        rel, pos = self._entries[i]
        return self.base_offset + rel, pos

    @property
    def last_offset(self) -> int:
        return self.base_offset + self._keys[-1] if self._keys else self.base_offset

    def truncate_to(self, offset: int) -> None:
        """Remove entries with offset >= ``offset``."""
        keep = bisect.bisect_left(self._keys, offset - self.base_offset)
        self._truncate_entries(keep)
