"""A tiered round's source segments: an identical local copy hard-linked, or a verified download."""

from __future__ import annotations

import logging
import mmap
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from cleaner.cleaner import renamed_corruption
from cleaner.tiered.space import TempSpace
from cleaner.tiered.view import PartitionView
from log.errors import CorruptRecordError
from log.segment import LogSegment
from metadata.types import RemoteLogSegmentMetadata
from remote.remote_reader import verify_segment_bytes
from remote.storage_manager import RemoteStorageManager

logger = logging.getLogger(__name__)


@dataclass(slots=True)
class Source:
    """A remote segment opened for the round, and the temporary files it holds."""

    md: RemoteLogSegmentMetadata
    segment: LogSegment
    temp_files: tuple[Path, ...] = ()
    #: what a corruption error names: the object key, or the local copy's file
    name: str = ""


@contextmanager
def naming(sources: Sequence[Source]) -> Iterator[None]:
    """Corruption found in a temporary copy is reported against the object (or local file) it
    came from, with the byte position."""
    try:
        yield
    except CorruptRecordError as e:
        for src in sources:
            if src.name and e.source == str(src.segment.log_path):
                raise renamed_corruption(e, src.name) from e
        raise


def link_local_copy(view: PartitionView, md: RemoteLogSegmentMetadata, space: TempSpace) -> Source | None:
    """Hard-link an identical local copy into the temp dir (under the log's lock, so local
    retention running meanwhile cannot pull the files away; no disk is used)."""
    link_dir = space.dir / "local"
    link_dir.mkdir(exist_ok=True)
    copy = view.link_local_copy(md, link_dir)
    if copy is None:
        return None
    links = list(copy.links)
    space.track(*links, counted=False)
    linked = LogSegment(link_dir, copy.base_offset, index_interval_bytes=copy.index_interval_bytes)
    return Source(md, linked, tuple(links + [linked.offset_index.path, linked.time_index.path]), name=copy.name)


def close_source(src: Source, space: TempSpace) -> None:
    if src.temp_files:
        src.segment.close()
        space.release(*src.temp_files)


def fetch_verified(rsm: RemoteStorageManager, md: RemoteLogSegmentMetadata, path: Path) -> int:
    """Download the segment's log to ``path`` and check it whole (CRCs, offsets). Bytes damaged
    on the way are fetched once more, as the read path does; damage that persists is in the
    store and is reported against the object (the partition becomes uncleanable)."""
    name = f"remote segment {rsm.object_key(md)}"
    n = rsm.fetch_log_segment_to_file(md, path)
    if n == 0:
        return n  # nothing to check (mmap refuses an empty file)
    for attempt in (1, 2):
        error: CorruptRecordError | None = None
        with path.open("rb") as f, mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as mm:
            try:
                verify_segment_bytes(mm, md, name)
            except CorruptRecordError as e:
                # without its traceback: its frames hold views of the map, which must close
                error = e.with_traceback(None)
        if error is None:
            return n
        if attempt == 2:
            raise error
        logger.warning("%s: %s; fetching the segment again", md.id, error)
        n = rsm.fetch_log_segment_to_file(md, path)
    raise AssertionError("unreachable")
