"""Kafka's text checkpoint files (``CheckpointFile``).

Format (UTF-8, ``\\n`` line ends)::

    <version int>
    <entry count int>
    <entry line> x count

Written to ``<file>.tmp``, fsynced, then atomically renamed (and the directory fsynced).
Reading checks the version and the entry count; an empty file reads as no entries.

* ``cleaner-offset-checkpoint`` (one per data dir, version 0): ``<topic> <partition> <offset>``
* ``leader-epoch-checkpoint`` (one per partition dir, version 0): ``<epoch> <start offset>``

Source: server-common/.../CheckpointFile.java, storage/.../OffsetCheckpointFile.java,
LeaderEpochCheckpointFile.java.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Generic, TypeVar

from log.errors import CorruptRecordError
from log.types import EpochEntry, TopicPartition

T = TypeVar("T")

CLEANER_OFFSET_CHECKPOINT = "cleaner-offset-checkpoint"
LEADER_EPOCH_CHECKPOINT = "leader-epoch-checkpoint"


def fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def atomic_write_text(path: Path, text: str) -> None:
    """Write ``text`` to ``path`` so that a crash leaves either the old or the new content."""
    tmp = path.with_name(path.name + ".tmp")
    with open(tmp, "w", encoding="utf-8", newline="\n") as f:
        f.write(text)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)
    fsync_dir(path.parent)


class CheckpointFile(Generic[T]):
    """A versioned list of entries in Kafka's checkpoint text format. Thread-safe."""

    def __init__(self, path: Path, version: int, format_entry: Callable[[T], str],
                 parse_entry: Callable[[list[str]], T]) -> None:
        self.path = Path(path)
        self.version = version
        self._format = format_entry
        self._parse = parse_entry
        self._lock = threading.Lock()

    def write(self, entries: Iterable[T]) -> None:
        items = list(entries)
        text = f"{self.version}\n{len(items)}\n" + "".join(self._format(e) + "\n" for e in items)
        with self._lock:
            atomic_write_text(self.path, text)

    def read(self) -> list[T]:
        with self._lock:
            try:
                text = self.path.read_text(encoding="utf-8")
            except FileNotFoundError:
                return []
        if not text.strip():
            return []
        lines = text.split("\n")
        try:
            version = int(lines[0])
        except ValueError:
            raise CorruptRecordError(f"malformed checkpoint version line {lines[0]!r}",
                                     source=str(self.path)) from None
        if version != self.version:
            raise CorruptRecordError(f"unrecognised checkpoint version {version} (expected {self.version})",
                                     source=str(self.path))
        try:
            count = int(lines[1])
        except (IndexError, ValueError):
            raise CorruptRecordError("malformed checkpoint entry count", source=str(self.path)) from None
        body = [ln for ln in lines[2:] if ln.strip()]
        if len(body) != count:
            raise CorruptRecordError(f"checkpoint says {count} entries but holds {len(body)}",
                                     source=str(self.path))
        out: list[T] = []
        for ln in body:
            try:
                out.append(self._parse(ln.split()))
            except (ValueError, IndexError) as e:
                raise CorruptRecordError(f"malformed checkpoint line {ln!r}: {e}", source=str(self.path)) from None
        return out


def _parse_offset_entry(f: list[str]) -> tuple[TopicPartition, int]:
    if len(f) != 3:
        raise ValueError("expected '<topic> <partition> <offset>'")
    return TopicPartition(f[0], int(f[1])), int(f[2])


class OffsetCheckpointFile:
    """``topic partition -> offset`` (cleaner-offset-checkpoint and friends)."""

    def __init__(self, path: Path) -> None:
        self._file: CheckpointFile[tuple[TopicPartition, int]] = CheckpointFile(
            path, 0, lambda e: f"{e[0].topic} {e[0].partition} {e[1]}", _parse_offset_entry)
        self.path = self._file.path

    def read(self) -> dict[TopicPartition, int]:
        return dict(self._file.read())

    def write(self, offsets: dict[TopicPartition, int]) -> None:
        self._file.write(sorted(offsets.items()))


def _parse_epoch_entry(f: list[str]) -> EpochEntry:
    if len(f) != 2:
        raise ValueError("expected '<epoch> <start offset>'")
    return EpochEntry(int(f[0]), int(f[1]))


class LeaderEpochCheckpointFile:
    """The ``leader-epoch-checkpoint`` file of one partition."""

    def __init__(self, path: Path) -> None:
        self._file: CheckpointFile[EpochEntry] = CheckpointFile(
            path, 0, lambda e: f"{e.epoch} {e.start_offset}", _parse_epoch_entry)
        self.path = self._file.path

    def read(self) -> list[EpochEntry]:
        return self._file.read()

    def write(self, entries: Iterable[EpochEntry]) -> None:
        self._file.write(entries)

    @staticmethod
    def render(entries: Iterable[EpochEntry]) -> bytes:
        items = list(entries)
        return (f"0\n{len(items)}\n" + "".join(f"{e.epoch} {e.start_offset}\n" for e in items)).encode()
