"""Drop-behind: only the newest bytes of each partition's log stay in the page cache, the way BookKeeper drops its journal.

Kafka leaves its segments' pages to the kernel: every byte appended or read stays cached until memory runs out and the
kernel evicts something. On a virtual machine whose balloon gives free memory back to the host (free page reporting:
Firecracker, Cloud Hypervisor, QEMU with ``free-page-reporting``), that cache growing is what costs: each new page is
memory the host must back again. Measured on the 2-core bench machine: writing 3 GB cost 4.7-7.2 s of system CPU
while the page cache grew, 0.8-1.0 s once it was full or when the written pages were dropped behind the writer; the
Kafka bench's produce at half load took 2.0-2.5 s of system CPU a phase with the cache growing and 0.45-0.52 s
with drop-behind, and its p50 fell by about 0.8 ms.

So a node keeps ``page_cache_window_bytes`` (default 64 MiB) of each partition's newest bytes cached and asks the
kernel (``posix_fadvise(POSIX_FADV_DONTNEED)``) to drop the rest:

* behind the writer: each time the active segment has grown by :data:`DROP_STEP` past the window, what lies behind
  the window is dropped, and so are the segments rolled since (log/local_log.py). By then the write-back started
  every 4 MiB (log/writeback.py) or a sync has written those pages; a page still dirty or under write-back is left
  cached. The call runs on the node's :class:`CacheDropper` thread, not on the appending one: measured at half
  load on the Kafka bench, each one took about 0.5 ms, once every 4 MiB, inside a produce's append;
* behind a reader: a Fetch reading bytes behind the window (a consumer catching up, a changelog restored from offset
  0) drops them once read (log/fetch_raw.py), so a catch-up read does not push the other partitions' newest bytes
  out. That call runs on the :class:`CacheDropper` thread too.

Consumers within the window read from memory, as in Kafka; one reading further back reads from disk. Nothing about
what is stored or answered changes: only what the kernel keeps cached. ``-1`` turns it off (Kafka's way). Where
``posix_fadvise`` does not exist (not Linux) nothing is dropped; on tmpfs the call does nothing.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Sequence
from pathlib import Path

from log.queue_thread import QueueThread

logger = logging.getLogger(__name__)

#: the newest bytes of each partition kept in the page cache by default (``-1``: all of it, as Kafka)
DEFAULT_WINDOW_BYTES = 64 * 1024 * 1024
#: how far the log grows between two drops behind its writer (one system call per segment per step)
DROP_STEP = 4 * 1024 * 1024
#: the largest page-cache folio (2 MiB: a PMD, with 4 KiB pages). Linux drops only the folios wholly inside the
#: range it is given (measured on 6.18, ext4 with large folios: a range from byte 4096 of a 128 KiB file dropped
#: nothing of its one folio), so :func:`drop_cached` starts each range at this alignment: a folio straddling where
#: the drop before it ended is then inside it
FOLIO_ALIGN = 2 * 1024 * 1024

_FADVISE = getattr(os, "posix_fadvise", None)
_DONTNEED = getattr(os, "POSIX_FADV_DONTNEED", 4)


def drop_cached(fd: int, start: int, end: int) -> bool:
    """Ask the kernel to drop the cached pages of bytes [``start``, ``end``) of ``fd``, and of those before ``start``
    back to the :data:`FOLIO_ALIGN` boundary (whole folios only: one straddling ``end`` stays, as do dirty ones and
    ones under write-back); never raises. Answers whether the request was made."""
    if _FADVISE is None or end <= start:
        return False
    start -= start % FOLIO_ALIGN
    try:
        _FADVISE(fd, start, end - start, _DONTNEED)
    except OSError as e:
        logger.debug("posix_fadvise(%d, %d, %d, DONTNEED) failed: %s", fd, start, end - start, e)
        return False
    return True


def behind_window(sizes: Sequence[int], window: int) -> list[int]:
    """For consecutive segments of one log, oldest first, the last one active, with these ``sizes``: the position in
    each below which its bytes are behind the newest ``window`` bytes of the log (0: none; its size: all of them).
    A negative ``window`` keeps everything."""
    floors = [0] * len(sizes)
    if window < 0:
        return floors
    left = window  # how much of the window the newer segments have not taken yet
    for i in range(len(sizes) - 1, -1, -1):
        floors[i] = max(0, sizes[i] - left)
        left = max(0, left - sizes[i])
    return floors


def drop_file_cached(path: Path, start: int, end: int) -> bool:
    """:func:`drop_cached` of the file at ``path`` (through a descriptor of its own); a file gone meanwhile (deleted,
    renamed by a swap) has nothing left to drop. Never raises."""
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return False
    try:
        return drop_cached(fd, start, end)
    finally:
        os.close(fd)


class CacheDropper(QueueThread[tuple[Path, int, int]]):
    """The node's drop-behind thread: runs the page-cache drops the logs queue (:meth:`drop`), in order, off their
    append path (a daemon, started at construction). A drop is only advice to the kernel, so one queued at a
    shutdown is simply not made."""

    def __init__(self, name: str = "tiercompact-cache-dropper") -> None:
        #: drops made (tests, metrics)
        self.dropped = 0
        super().__init__(name)

    def drop(self, path: Path, start: int, end: int) -> None:
        """Queue the drop of bytes [``start``, ``end``) of the file at ``path`` from the page cache."""
        if end > start:
            self._put((path, start, end))

    def _handle(self, item: tuple[Path, int, int], *, draining: bool) -> int:
        drop_file_cached(*item)
        self.dropped += 1
        return 1
