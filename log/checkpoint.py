"""Kafka's text checkpoint files (``CheckpointFile``).

Format (UTF-8, ``\\n`` line ends)::

    <version int>
    <entry count int>
    <entry line> x count

Written to ``<file>.tmp``, fsynced, then atomically renamed (and the directory fsynced).
Reading checks the version and the entry count; an empty file reads as no entries.

* ``cleaner-offset-checkpoint`` (one per data dir, version 0): ``<topic> <partition> <offset>``
* ``leader-epoch-checkpoint`` (one per partition dir, version 0): ``<epoch> <start offset>``
* ``log-start-offset-checkpoint`` (one per partition dir, version 0, at most one entry): ``<offset>``,
  the log start offset DeleteRecords set. Kafka keeps one such file per data dir, with
  ``<topic> <partition> <offset>`` lines; one per partition here goes with the partition's directory.

A malformed file is handled as Kafka does. Kafka's ``LogCleanerManager.allCleanerCheckpoints``
logs the error and reads a corrupt cleaner-offset-checkpoint as empty. Here
:class:`OffsetCheckpointFile` does the same: it moves the file aside to ``<file>.corrupt``,
logs a warning, counts it (:func:`corrupt_checkpoints_rebuilt`), and the next write rebuilds
it. A missing checkpoint only makes the cleaner re-clean from the log start, so no data is
lost. A malformed ``leader-epoch-checkpoint`` takes its log offline in Kafka (a storage
exception while loading). :class:`LeaderEpochCheckpointFile` raises, and the log manager takes
that one partition offline. So does a malformed ``log-start-offset-checkpoint``: read as
empty it would serve again records a client deleted.

Source: server-common/.../CheckpointFile.java, storage/.../OffsetCheckpointFile.java,
LeaderEpochCheckpointFile.java.
"""

from __future__ import annotations

import logging
import os
from collections import Counter
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Generic, TypeVar

from log.errors import CorruptRecordError, InvalidRequestError
from log.locks import RANK_CHECKPOINT_FILE, ordered_lock
from log.types import EpochEntry, TopicPartition

T = TypeVar("T")

logger = logging.getLogger(__name__)

CORRUPT_SUFFIX = ".corrupt"
TMP_SUFFIX = ".tmp"

CLEANER_OFFSET_CHECKPOINT = "cleaner-offset-checkpoint"
LEADER_EPOCH_CHECKPOINT = "leader-epoch-checkpoint"
LOG_START_OFFSET_CHECKPOINT = "log-start-offset-checkpoint"
RECOVERY_POINT_CHECKPOINT = "recovery-point-offset-checkpoint"


def fsync_path(path: Path, *, missing_ok: bool = False) -> None:
    """fsync a file or directory through its name (``missing_ok``: one that is gone has nothing left to sync)."""
    try:
        fd = os.open(path, os.O_RDONLY)
    except FileNotFoundError:
        if missing_ok:
            return
        raise
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def fsync_dir(path: Path) -> None:
    fsync_path(path)


def atomic_write_text(path: Path, text: str) -> None:
    """Write ``text`` to ``path`` so that a crash leaves either the old or the new content."""
    tmp = path.with_name(path.name + TMP_SUFFIX)
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
        self._lock = ordered_lock("log.checkpoint_file", RANK_CHECKPOINT_FILE)

    def write(self, entries: Iterable[T]) -> None:
        text = self._render(entries)
        with self._lock:
            atomic_write_text(self.path, text)

    def under_lock(self, fn: Callable[[Callable[[Iterable[T]], None]], None]) -> None:
        """Call ``fn`` with the file's lock held and a function that writes the file: of two threads storing a
        value that keeps changing, each reading it inside ``fn``, the last to write stores the newest."""
        with self._lock:
            fn(lambda entries: atomic_write_text(self.path, self._render(entries)))

    def _render(self, entries: Iterable[T]) -> str:
        items = list(entries)
        return f"{self.version}\n{len(items)}\n" + "".join(self._format(e) + "\n" for e in items)

    def read(self) -> list[T]:
        with self._lock:
            text = self._read_text()
        return self._parse_text(text)

    def read_or_set_aside(self, aside: Path) -> tuple[list[T], CorruptRecordError | None]:
        """Read; if the file is corrupt, move it to ``aside`` (same lock as writes) and read as empty."""
        with self._lock:
            try:
                return self._parse_text(self._read_text()), None
            except CorruptRecordError as e:
                try:
                    os.replace(self.path, aside)
                except OSError as move_error:
                    logger.error("%s could not be moved aside: %s", self.path, move_error)
                return [], e

    def _read_text(self) -> str:
        try:
            return self.path.read_text(encoding="utf-8")
        except FileNotFoundError:
            return ""
        except UnicodeDecodeError as e:
            raise CorruptRecordError(f"checkpoint is not UTF-8 text ({e.reason} at byte {e.start})",
                                     source=str(self.path)) from None

    def _parse_text(self, text: str) -> list[T]:
        if not text.strip():
            return []
        lines = text.split("\n")
        try:
            version = int(lines[0])
        except ValueError:
            raise CorruptRecordError(f"malformed checkpoint version line {lines[0][:80]!r}",
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
            except (ValueError, IndexError, InvalidRequestError) as e:
                raise CorruptRecordError(f"malformed checkpoint line {ln[:80]!r}: {e}",
                                         source=str(self.path)) from None
        return out


def _parse_offset_entry(f: list[str]) -> tuple[TopicPartition, int]:
    if len(f) != 3:
        raise ValueError("expected '<topic> <partition> <offset>'")
    return TopicPartition(f[0], int(f[1])), int(f[2])


_rebuilt: Counter[Path] = Counter()


def corrupt_checkpoints_rebuilt(path: Path) -> int:
    """How many times this process set aside a corrupt offset checkpoint at ``path``."""
    return _rebuilt[Path(path).absolute()]


class OffsetCheckpointFile:
    """``topic partition -> offset`` (cleaner-offset-checkpoint and friends).

    A corrupt file reads as empty. It is moved aside to ``<file>.corrupt`` for inspection and
    rebuilt by the next :meth:`write`; see the module docstring.
    """

    def __init__(self, path: Path) -> None:
        self._file: CheckpointFile[tuple[TopicPartition, int]] = CheckpointFile(
            path, 0, lambda e: f"{e[0].topic} {e[0].partition} {e[1]}", _parse_offset_entry)
        self.path = self._file.path

    def read(self) -> dict[TopicPartition, int]:
        aside = self.path.with_name(self.path.name + CORRUPT_SUFFIX)
        entries, error = self._file.read_or_set_aside(aside)
        if error is not None:
            _rebuilt[self.path.absolute()] += 1
            logger.warning("%s is corrupt (%s); moved it to %s and reading it as empty: the cleaner re-cleans "
                           "those partitions from their log start (no data is lost) and the next checkpoint "
                           "write rebuilds the file", self.path, error, aside.name)
        return dict(entries)

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


def _parse_start_offset(f: list[str]) -> int:
    if len(f) != 1 or int(f[0]) < 0:
        raise ValueError("expected '<offset>' (>= 0)")
    return int(f[0])


class SingleOffsetCheckpointFile:
    """A checkpoint file holding one offset of one partition (absent: none stored). Raises CorruptRecordError on a
    malformed file."""

    def __init__(self, path: Path) -> None:
        self._file: CheckpointFile[int] = CheckpointFile(path, 0, str, _parse_start_offset)
        self.path = self._file.path

    def read_offset(self) -> int | None:
        """The stored offset, None when there is none."""
        entries = self._file.read()
        if len(entries) > 1:
            raise CorruptRecordError(f"holds {len(entries)} offsets, not one", source=str(self.path))
        return entries[0] if entries else None

    def write(self, offset: int) -> None:
        self._file.write([offset])


class LogStartOffsetCheckpointFile(SingleOffsetCheckpointFile):
    """The ``log-start-offset-checkpoint`` file of one partition: the offset DeleteRecords moved its
    log start to (absent: never moved)."""

    def read(self) -> int:
        """The stored offset, 0 when there is none."""
        offset = self.read_offset()
        return 0 if offset is None else offset


class RecoveryPointCheckpointFile(SingleOffsetCheckpointFile):
    """The ``recovery-point-offset-checkpoint`` file of one partition: every record below its offset was on disk
    when it was written (Kafka keeps one such file per data dir, for all its partitions). After a crash, the
    segments holding offsets at or above it are recovered (log/log_loader.py); absent (a data dir from before
    rolls were synced in the background), every rolled segment counts as on disk."""

    def __init__(self, path: Path) -> None:
        super().__init__(path)
        #: the offset this object last stored (None: none yet)
        self.stored: int | None = None

    def store(self, point: Callable[[], int]) -> None:
        """Store ``point()``, read under the file's lock, unless it is the offset stored last: threads that move
        the point (a sync moving it up, a truncation moving it down) and store it after leave the newest."""
        def store_newest(write: Callable[[Iterable[int]], None]) -> None:
            value = point()
            if value != self.stored:
                write([value])
                self.stored = value

        self._file.under_lock(store_newest)
