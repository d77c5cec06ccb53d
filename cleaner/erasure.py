"""Where a partition still holds records of given keys, over both tiers (erasures).

:class:`KeyLocator` answers, for keys each with an offset bound (the erasure's tombstone),
which segments hold a record of the key below the bound: local segments (their ``.log`` is
scanned), referenced remote segments (their exact key index rules a key in or out; a segment
without one, or one the bound cuts through, is downloaded and scanned), replaced remote
segments not yet deleted (key index; kept when unreadable, so they are deleted rather than
missed) and replaced local files (``*.log.deleted``, scanned). Values are decompressed only
as far as reading keys needs. Read-only: it deletes nothing and takes no cleaner state.
"""

from __future__ import annotations

import logging
import tempfile
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path

from log.index.key_index import KeyIndex
from log.local_log import LocalLog
from log.record.records import iter_file_batches
from log.segment import DELETED_SUFFIX
from metadata.manager import RemoteLogMetadataManager
from metadata.types import RemoteLogSegmentMetadata, RemoteLogSegmentState
from remote.errors import ObjectNotFoundError
from remote.orphans import segment_id_of_key
from remote.storage_manager import RemoteStorageManager

logger = logging.getLogger(__name__)

TIER_LOCAL, TIER_REMOTE, TIER_BOTH = "local", "remote", "both"


@dataclass(frozen=True, slots=True)
class Holding:
    """One segment holding a record of a key below its bound."""

    tier: str  # local | remote | both
    base_offset: int
    end_offset: int
    segment_id: str | None = None  # the remote segment, when remote or both
    file: str | None = None  # the local .log, when local or both

    @property
    def name(self) -> str:
        """Stable identity in a receipt: the remote segment id, else the local file."""
        return self.segment_id or self.file or str(self.base_offset)

    def as_dict(self) -> dict[str, object]:
        return {"tier": self.tier, "base_offset": self.base_offset, "end_offset": self.end_offset,
                "segment_id": self.segment_id, "file": self.file}


def key_offsets(path: str | Path, keys: Iterable[bytes], *, source: str | None = None) -> dict[bytes, list[int]]:
    """Offsets of the data records of each of ``keys`` in a ``.log`` file (tombstones included)."""
    wanted = set(keys)
    out: dict[bytes, list[int]] = {k: [] for k in wanted}
    for _pos, batch in iter_file_batches(path, source=source or str(path)):
        if batch.is_control:
            continue
        for off, key, _has_value in batch.iter_key_offsets():
            if key is not None and key in wanted:
                out[key].append(off)
    return out


def _below(offsets: list[int], bound: int) -> bool:
    return any(o < bound for o in offsets)


class KeyLocator:
    """See the module docstring. ``bounds`` maps each key to the offset below which its
    records count (the tombstone's offset for values, one past it for the tombstone too)."""

    def __init__(self, log: LocalLog, bounds: Mapping[bytes, int], *, rlmm: RemoteLogMetadataManager | None = None,
                 rsm: RemoteStorageManager | None = None, temp_dir: Path | None = None) -> None:
        self.log = log
        self.bounds = dict(bounds)
        self.rlmm = rlmm
        self.rsm = rsm
        self.temp_dir = temp_dir
        self.tiered = rlmm is not None and rsm is not None and log.config.remote_storage_enable
        #: remote segment id -> what it holds (an id's bytes never change): each is read once
        self._remote_seen: dict[str, dict[bytes, bool]] = {}
        self._remote_scanned: set[str] = set()
        #: how the last :meth:`live_holdings` decided: segments ruled in or out by a key index
        #: alone, remote segments read and scanned, local files scanned
        self.checked = {"key_index": 0, "remote_scanned": 0, "local_scanned": 0}

    # ---- local -----------------------------------------------------------------------------
    def _local_segments(self) -> list[tuple[int, int, Path]]:
        with self.log.lock:
            return [(s.base_offset, s.read_next_offset() - 1, s.log_path) for s in self.log.all_segments()]

    def _scan(self, path: Path, source: str | None = None) -> dict[bytes, bool]:
        """key -> whether ``path`` holds a record of it below its bound (a vanished file holds nothing)."""
        try:
            found = key_offsets(path, self.bounds, source=source)
        except FileNotFoundError:  # swapped out or deleted meanwhile
            return dict.fromkeys(self.bounds, False)
        return {k: _below(offs, self.bounds[k]) for k, offs in found.items()}

    # ---- remote ----------------------------------------------------------------------------
    def _key_index(self, md: RemoteLogSegmentMetadata) -> KeyIndex | None:
        assert self.rsm is not None
        if md.key_index_bytes is None:
            return None
        try:
            data, _ = self.rsm.fetch_key_index(md)
            return KeyIndex.from_bytes(data, source=self.rsm.object_key(md))
        except ObjectNotFoundError:
            return None
        except Exception:  # noqa: BLE001 - an unreadable index: fall back to the segment itself
            logger.warning("key index of %s unreadable; scanning the segment", md.id, exc_info=True)
            self.rsm.drop_cached_key_index(md)
            return None

    def _scan_remote(self, md: RemoteLogSegmentMetadata) -> dict[bytes, bool]:
        assert self.rsm is not None
        with tempfile.TemporaryDirectory(dir=self.temp_dir) as d:
            path = Path(d) / f"{md.start_offset:020d}.log"
            self.rsm.fetch_log_segment_to_file(md, path)
            return self._scan(path, source=self.rsm.object_key(md))

    def _remote_holds(self, md: RemoteLogSegmentMetadata, local: Path | None) -> dict[bytes, bool]:
        seen = self._remote_seen.get(md.id)
        if seen is None:
            seen = self._remote_seen[md.id] = self._read_remote_holds(md, local)
        return dict(seen)

    def _read_remote_holds(self, md: RemoteLogSegmentMetadata, local: Path | None) -> dict[bytes, bool]:
        keys = [k for k, b in self.bounds.items() if md.start_offset < b]
        out = dict.fromkeys(self.bounds, False)
        if not keys:
            return out
        index = self._key_index(md)
        need_scan: list[bytes] = []
        for k in keys:
            if index is None or index.contains(k):
                if index is not None and md.end_offset < self.bounds[k]:
                    out[k] = True  # wholly below the bound: the exact index decides
                else:
                    need_scan.append(k)
        if need_scan:
            scanned = self._scan(local) if local is not None else self._scan_remote(md)
            for k in need_scan:
                out[k] = scanned[k]
        if need_scan:
            self._remote_scanned.add(md.id)
        return out

    # ---- the answers -----------------------------------------------------------------------
    def live_holdings(self) -> dict[bytes, list[Holding]]:
        """key -> every segment readers see (local or referenced remote) holding it below its bound."""
        out: dict[bytes, list[Holding]] = {k: [] for k in self.bounds}
        self.checked = dict.fromkeys(self.checked, 0)
        local = self._local_segments()
        by_base = {base: (end, path) for base, end, path in local}
        remote: list[RemoteLogSegmentMetadata] = []
        if self.tiered:
            assert self.rlmm is not None
            remote = self.rlmm.list_remote_log_segments(self.log.topic_partition)
        copies: set[int] = set()
        for md in remote:
            copy = by_base.get(md.start_offset)
            both = copy is not None and copy[0] == md.end_offset
            if both:
                copies.add(md.start_offset)
            held = self._remote_holds(md, copy[1] if both and copy is not None else None)
            self.checked["remote_scanned" if md.id in self._remote_scanned else "key_index"] += 1
            for k, yes in held.items():
                if yes:
                    out[k].append(Holding(TIER_BOTH if both else TIER_REMOTE, md.start_offset, md.end_offset,
                                          md.id, str(copy[1]) if both and copy is not None else None))
        for base, end, path in local:
            if base in copies:
                continue
            # local-only, or a local copy of remote data that is not byte-identical: a file all the same
            self.checked["local_scanned"] += 1
            for k, yes in self._scan(path).items():
                if yes:
                    out[k].append(Holding(TIER_LOCAL, base, end, None, str(path)))
        return out

    def replaced_remote(self) -> dict[bytes, list[RemoteLogSegmentMetadata]]:
        """key -> replaced (unreferenced, not yet deleted) remote segments that may hold it below
        its bound; a segment whose key index cannot be read counts as holding every key."""
        out: dict[bytes, list[RemoteLogSegmentMetadata]] = {k: [] for k in self.bounds}
        if not self.tiered:
            return out
        assert self.rlmm is not None
        S = RemoteLogSegmentState
        for md in self.rlmm.list_remote_log_segments(self.log.topic_partition, include_superseded=True,
                                                     states=[S.COPY_SEGMENT_FINISHED, S.DELETE_SEGMENT_STARTED]):
            if md.is_referenced:
                continue
            index = self._key_index(md)
            for k, b in self.bounds.items():
                if md.start_offset < b and (index is None or index.contains(k)):
                    out[k].append(md)
        return out

    def orphan_objects(self) -> dict[bytes, list[str]]:
        """key -> object keys of segments no live metadata row names (an upload a crashed Spark
        driver left, or one that landed after its segment's deletion) that may hold it: their
        ``.keyindex`` rules a key in or out; without one, they count as holding every key."""
        out: dict[bytes, list[str]] = {k: [] for k in self.bounds}
        if not self.tiered:
            return out
        assert self.rlmm is not None and self.rsm is not None
        tp = self.log.topic_partition
        store = self.rsm.store
        by_id: dict[str, list[str]] = {}
        for key in store.list(tp.dir_name + "/"):
            sid = segment_id_of_key(tp, key)
            if sid is not None:
                by_id.setdefault(sid, []).append(key)
        if not by_id:
            return out
        S = RemoteLogSegmentState
        live = [st for st in S if st is not S.DELETE_SEGMENT_FINISHED]
        known = {m.id for m in self.rlmm.list_remote_log_segments(tp, include_superseded=True, states=live)}
        for sid, keys in sorted(by_id.items()):
            if sid in known:
                continue
            index: KeyIndex | None = None
            for key in keys:
                if key.endswith(".keyindex"):
                    try:
                        index = KeyIndex.from_bytes(store.get(key), source=key)
                    except Exception:  # noqa: BLE001 - gone meanwhile or unreadable: counts as holding
                        index = None
            for k in self.bounds:
                if index is None or index.contains(k):
                    out[k].extend(sorted(keys))
        return out

    def replaced_local_files(self) -> dict[bytes, list[Path]]:
        """key -> replaced local segment files (``*.log.deleted``, awaiting file.delete.delay.ms)
        holding it below its bound."""
        out: dict[bytes, list[Path]] = {k: [] for k in self.bounds}
        for path in sorted(self.log.dir.glob(f"*.log{DELETED_SUFFIX}")):
            for k, yes in self._scan(path).items():
                if yes:
                    out[k].append(path)
        return out
