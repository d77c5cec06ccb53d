"""A file of fixed-size big-endian entries, the shape shared by Kafka's segment indexes.

Unlike Kafka, files are not preallocated to ``segment.index.bytes`` and mmapped: they
grow by appending, so an index file's length is always ``entries * entry_size`` and
no trim step is needed when a segment becomes inactive. Entries are also cached in
memory for lookups. The file format is Kafka's. Not thread-safe: the owning segment
serialises access.
"""

from __future__ import annotations

import os
import struct
from pathlib import Path
from typing import Any

from log.errors import CorruptIndexError


class EntryFile:
    entry: struct.Struct  # set by subclasses

    def __init__(self, path: Path) -> None:
        self.path = Path(path)
        self._f: Any = None
        self._entries: list[tuple[int, ...]] = []
        self._load()

    def _load(self) -> None:
        try:
            data = self.path.read_bytes()
        except FileNotFoundError:
            data = b""
        size = self.entry.size
        if len(data) % size:
            raise CorruptIndexError(
                f"index file length {len(data)} is not a multiple of its entry size {size}", source=str(self.path))
        self._entries = [self.entry.unpack_from(data, i) for i in range(0, len(data), size)]
        self._check(self._entries)

    def _check(self, entries: list[tuple[int, ...]]) -> None:
        """Subclasses raise CorruptIndexError when entries break an invariant."""

    def _file(self) -> Any:
        if self._f is None:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            self._f = open(self.path, "ab")  # noqa: SIM115 - kept open for the segment's life
        return self._f

    #: write each entry through to the file at once (the transaction index, which recovery cannot rebuild); the
    #: segment indexes leave theirs in the file's buffer (see SegmentIndex)
    write_through = True

    def _append_entry(self, *fields: int) -> None:
        f = self._file()
        f.write(self.entry.pack(*fields))
        if self.write_through:
            f.flush()  # keep the file readable by others without an fsync
        self._entries.append(fields)

    def _truncate_entries(self, keep: int) -> None:
        if keep >= len(self._entries):
            return
        del self._entries[keep:]
        self.flush()
        with open(self.path, "r+b") as f:
            f.truncate(keep * self.entry.size)

    @property
    def entries(self) -> int:
        return len(self._entries)

    @property
    def size_in_bytes(self) -> int:
        return len(self._entries) * self.entry.size

    def flush(self) -> None:
        if self._f is not None:
            self._f.flush()
            os.fsync(self._f.fileno())

    def flush_buffer(self) -> None:
        """Hand the entries buffered in the process to the OS (no fsync)."""
        if self._f is not None:
            self._f.flush()

    def close(self) -> None:
        if self._f is not None:
            self._f.flush()
            self._f.close()
            self._f = None

    def rename_to(self, new_path: Path) -> None:
        self.close()
        if self.path.exists():
            os.replace(self.path, new_path)
        self.path = Path(new_path)

    def delete(self) -> None:
        self.close()
        self.path.unlink(missing_ok=True)

    def reset(self) -> None:
        """Drop every entry (used before a rebuild)."""
        self.close()
        self._entries = []
        self.path.unlink(missing_ok=True)


class SegmentIndex(EntryFile):
    """An index of the segment at ``base_offset`` whose entries ascend by their first field,
    kept also as the list ``_keys`` (for bisecting) through appends, truncation and reset.

    Its appended entries stay in the file's buffer (a write per 8 KiB of entries, not a write
    per produced batch): lookups use the entries in memory, and every reader of the file comes
    after a :meth:`flush` (a roll, the tiering of a rolled segment, a sync, close). A crash loses
    only buffered entries of the active segment, whose indexes recovery rebuilds from its batches
    (log/log_loader.py), as Kafka's recovery does past the recovery point."""

    write_through = False

    def __init__(self, path: Path, base_offset: int) -> None:
        self.base_offset = base_offset
        super().__init__(path)
        self._keys = [e[0] for e in self._entries]

    def _append_entry(self, *fields: int) -> None:
        super()._append_entry(*fields)
        self._keys.append(fields[0])

    def _truncate_entries(self, keep: int) -> None:
        super()._truncate_entries(keep)
        del self._keys[keep:]

    def reset(self) -> None:
        super().reset()
        self._keys = []
