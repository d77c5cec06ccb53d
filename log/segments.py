"""LogSegments: a partition's segments ordered by base offset. Not thread-safe."""

from __future__ import annotations

import bisect
from collections.abc import Iterator

from log.segment import LogSegment


class LogSegments:
    def __init__(self) -> None:
        self._bases: list[int] = []
        self._segs: dict[int, LogSegment] = {}

    def add(self, seg: LogSegment) -> None:
        """Add, replacing any segment with the same base offset."""
        if seg.base_offset not in self._segs:
            bisect.insort(self._bases, seg.base_offset)
        self._segs[seg.base_offset] = seg

    def remove(self, base_offset: int) -> None:
        if self._segs.pop(base_offset, None) is not None:
            self._bases.remove(base_offset)

    def get(self, base_offset: int) -> LogSegment | None:
        return self._segs.get(base_offset)

    def __contains__(self, seg: object) -> bool:
        return isinstance(seg, LogSegment) and self._segs.get(seg.base_offset) is seg

    def __len__(self) -> int:
        return len(self._bases)

    def __iter__(self) -> Iterator[LogSegment]:
        return (self._segs[b] for b in list(self._bases))

    def all(self) -> list[LogSegment]:
        return [self._segs[b] for b in self._bases]

    def first(self) -> LogSegment | None:
        return self._segs[self._bases[0]] if self._bases else None

    def last(self) -> LogSegment | None:
        return self._segs[self._bases[-1]] if self._bases else None

    def floor(self, offset: int) -> LogSegment | None:
        """The segment with the greatest base offset <= offset."""
        i = bisect.bisect_right(self._bases, offset) - 1
        return self._segs[self._bases[i]] if i >= 0 else None

    def higher(self, base_offset: int) -> LogSegment | None:
        i = bisect.bisect_right(self._bases, base_offset)
        return self._segs[self._bases[i]] if i < len(self._bases) else None

    def range(self, from_offset: int, to_offset: int) -> list[LogSegment]:
        """Kafka's segments(from, to): from floor(from) (or the first), base offsets < to."""
        if from_offset == to_offset:
            return []
        i = bisect.bisect_right(self._bases, from_offset) - 1
        i = max(i, 0)
        j = bisect.bisect_left(self._bases, to_offset)
        return [self._segs[b] for b in self._bases[i:j]]

    def size_in_bytes(self) -> int:
        return sum(s.size for s in self._segs.values())
