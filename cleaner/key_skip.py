"""Which clean remote segments a tiered round must rewrite: bloom filter first, exact key index second.

A tiered round rewrites every dirty segment (the offset map was built from them) and, in the
clean region below the first dirty offset, only the segments that can change:

1. **Summary.** A segment holding transactional or control batches, or a tombstone / marker
   whose delete horizon has passed, is rewritten (markers and tombstones must go once due).
   The summary comes with the bloom filter, or with the key index when there is no filter.
2. **Bloom filter** (metadata store, no object-store call): "certainly none of the dirty keys"
   carries the segment forward. Cheapest, and decisive when few keys are dirty; but a
   segment escapes N keys with probability (1 - fpp)^N, so from a few hundred keys on it
   answers "maybe" for nearly every segment. The digests are probed in growing blocks (a
   "maybe" costs a few hundred probes), and a segment with a key index skips the probe when
   its escape chance is below BLOOM_MIN_ESCAPE (the index decides anyway).
3. **Exact key index** (:mod:`log.index.key_index`, an object beside the segment, read
   through the node's remote read cache, which keeps it across restarts): how many of the
   segment's records a dirty key supersedes (sorted-hash look-ups, screened by a table of the
   dirty hashes' top bits when the set is large). None: carried forward without a download.
   A segment without an index (copied before indexes existed), or whose index does not
   decode, is downloaded once, its index built from the download (uploaded and recorded in
   its metadata for the next rounds) and the same test applied; the download stays on disk
   for the rewrite when it fits.
4. **Cost gate** (``remote.compaction.min.reclaimable.ratio``, off by default): a segment
   whose superseded share is below the threshold is carried forward. A carried-forward
   superseded record is only revisited when its key is written again (later rounds map only
   their own dirty keys), so the gate never defers what a deadline needs gone: not under a
   finite ``max.compaction.lag.ms``, and not a record a dirty tombstone deletes (it would
   resurface once that tombstone's horizon passes). Expired horizons are step 1.

A wrong "skip" would keep a superseded record forever, so every doubt rewrites: an unknown
summary, an unreadable index (after a download rebuilds it), a 64-bit hash collision (a
needless rewrite). The dirty key set may be a superset of the keys the map holds (a map
that filled): that too only costs a rewrite that changes nothing.

Planning over thousands of segments costs no per-segment metadata round trip:
:meth:`SkipPolicy.prefetch` (or :meth:`SkipPolicy.decide_all`) reads the bloom filters in
batched queries first (bench_tiered's ``planning``: 10,000 segments in under 2 s).

Thread-safety: a policy belongs to one round of one TieredCleaner.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from cleaner.round_metadata import RoundMetadata
from cleaner.stats import CleanerStats
from log.errors import CorruptIndexError, TiercompactError
from log.index.bloom import KeyBloomFilter
from log.index.key_index import KeyIndex, build_segment_key_index, stable_hashes
from log.types import TopicPartition
from metadata.reports import ACTION_CARRIED_FORWARD, ACTION_SKIPPED_BY_BLOOM, ACTION_SKIPPED_BY_KEY_INDEX
from metadata.types import RemoteLogSegmentMetadata
from remote.errors import ObjectNotFoundError
from remote.storage_manager import IndexType, RemoteStorageManager

logger = logging.getLogger(__name__)

LONG_MAX = 2**63 - 1
#: dirty digests of the first bloom probe block (the next blocks grow fourfold)
BLOOM_FIRST_PROBES = 128
#: below this chance of the bloom filter ruling a segment out, an indexed segment skips the probe
BLOOM_MIN_ESCAPE = 1e-3
#: DirtyKeys.count_superseded screens index entries by this many top hash bits (a 4 MiB table)...
PREFILTER_BITS = 22
_PREFILTER_SHIFT = np.uint64(64 - PREFILTER_BITS)
#: ...once a round has at least this many dirty keys (fewer: binary searches are as cheap)
PREFILTER_MIN_KEYS = 1024


def bloom_escape_probability(bloom: KeyBloomFilter, dirty_keys: int) -> float:
    """The chance that ``bloom`` answers "none" for ``dirty_keys`` keys it does not hold:
    (1 - p)^N, p its false-positive rate at its fill, (1 - e^(-k n / m))^k."""
    m, n = max(bloom.num_bits, 1), bloom.count
    k = max(1, round(m / max(bloom.capacity, 1) * math.log(2)))
    p = (1.0 - math.exp(-k * n / m)) ** k
    if p >= 1.0:
        return 0.0
    return math.exp(dirty_keys * math.log1p(-p))


class DirtyKeys:
    """The dirty keys of a round as MD5 digests (bloom probes) and sorted unique stable
    hashes (key index lookups); each key is hashed once, by the map pass's scan."""

    def __init__(self) -> None:
        self._parts: list[np.ndarray] = []
        self._dead: list[np.ndarray] = []
        self._digests: np.ndarray | None = None
        self._hashes: np.ndarray | None = None
        self._tombstone_hashes: np.ndarray | None = None
        self._prefilter: np.ndarray | None = None

    def add(self, digests: np.ndarray, tombstones: np.ndarray | None = None) -> None:
        """Digests of dirty keys, and of those among them with a tombstone in the dirty range."""
        if len(digests):
            self._parts.append(digests)
            self._digests = self._hashes = self._prefilter = None
        if tombstones is not None and len(tombstones):
            self._dead.append(tombstones)
            self._tombstone_hashes = None

    @property
    def tombstone_hashes(self) -> np.ndarray:
        if self._tombstone_hashes is None:
            dead = np.concatenate(self._dead) if self._dead else np.zeros((0, 16), dtype=np.uint8)
            self._tombstone_hashes = np.unique(stable_hashes(dead))
        return self._tombstone_hashes

    @property
    def digests(self) -> np.ndarray:
        if self._digests is None:
            joined = np.concatenate(self._parts) if self._parts else np.zeros((0, 16), dtype=np.uint8)
            rows = np.unique(np.ascontiguousarray(joined).view("V16").ravel())
            self._digests = rows.view(np.uint8).reshape(-1, 16)
        return self._digests

    @property
    def hashes(self) -> np.ndarray:
        if self._hashes is None:
            self._hashes = np.unique(stable_hashes(self.digests))
        return self._hashes

    def __len__(self) -> int:
        return len(self.digests)

    def count_superseded(self, index: KeyIndex) -> int:
        """``index.count_matching(self.hashes)``, the same count. With more dirty keys than index
        entries (thousands of segments checked against one large set), the entries are first
        screened by a table of the dirty hashes' top PREFILTER_BITS bits (one gather; about
        N / 2^22 of them pass) and only those are looked up exactly."""
        hashes, entries = self.hashes, index.entries
        if len(hashes) < PREFILTER_MIN_KEYS or len(hashes) <= len(entries):
            return index.count_matching(hashes)
        if self._prefilter is None:
            table = np.zeros(1 << PREFILTER_BITS, dtype=bool)
            table[hashes >> _PREFILTER_SHIFT] = True
            self._prefilter = table
        candidates = entries[self._prefilter[entries >> _PREFILTER_SHIFT]]
        if not len(candidates):
            return 0
        at = np.searchsorted(hashes, candidates)
        np.minimum(at, len(hashes) - 1, out=at)
        return int(np.count_nonzero(hashes[at] == candidates))


@dataclass(frozen=True, slots=True)
class Decision:
    """Whether a clean-region segment is rewritten; ``action`` is the report action of a skip."""

    rewrite: bool
    reason: str
    action: str | None = None
    #: records of the segment a dirty key supersedes (from its key index), None if not looked up
    superseded: int | None = None


REWRITE_DISABLED = Decision(True, "skipping disabled")


class SkipPolicy:
    """Decides, segment by segment, what a round does with the clean region. See the module docstring.

    ``download(md)`` fetches the segment for the round (the cleaner keeps it for the rewrite
    when its disk bound allows) and returns the local ``.log`` path.
    """

    def __init__(self, rlmm: RoundMetadata, rsm: RemoteStorageManager, keys: DirtyKeys, *,
                 now: int, max_compaction_lag_ms: int, min_reclaimable_ratio: float, use_key_index: bool,
                 stats: CleanerStats, download: Callable[[RemoteLogSegmentMetadata], Path]) -> None:
        self.rlmm = rlmm
        self.rsm = rsm
        self.keys = keys
        self.now = now
        self.max_lag = max_compaction_lag_ms
        self.min_ratio = min_reclaimable_ratio
        self.use_key_index = use_key_index
        self.stats = stats
        self.download = download
        #: key index objects read from the object store (not the cache) this round
        self.index_fetches = 0
        #: key indexes built from a download this round (the segment had none, or a corrupt one)
        self.indexes_built = 0
        #: bloom filters read ahead by :meth:`prefetch` (segment id -> bytes) and the ids asked
        self._blooms: dict[str, bytes] = {}
        self._prefetched: set[str] = set()

    def prefetch(self, segments: Sequence[RemoteLogSegmentMetadata]) -> None:
        """Read the bloom filters of ``segments`` in batched metadata queries, so deciding them
        costs no per-segment round trip (a round may plan over thousands of segments)."""
        by_tp: dict[TopicPartition, list[str]] = {}
        for md in segments:
            if md.id not in self._prefetched:
                by_tp.setdefault(md.topic_partition, []).append(md.id)
        for tp, ids in by_tp.items():
            self._blooms.update(self.rlmm.get_bloom_filters(tp, ids))
            self._prefetched.update(ids)

    def decide_all(self, segments: Sequence[RemoteLogSegmentMetadata]) -> list[Decision]:
        """:meth:`decide` for each segment, their bloom filters read in batches first."""
        self.prefetch(segments)
        return [self.decide(md) for md in segments]

    def decide(self, md: RemoteLogSegmentMetadata) -> Decision:
        bloom = self._bloom(md)
        if bloom is not None:
            due = self._summary_requires_rewrite(bloom.has_transactional_batches, bloom.min_delete_horizon_ms)
            if due is not None:
                return Decision(True, due)
            if self._bloom_worth_probing(md, bloom) and not self._bloom_may_match(bloom):
                return Decision(False, "bloom filter", ACTION_SKIPPED_BY_BLOOM, 0)
        if not self.use_key_index:
            return Decision(True, "bloom filter may match")
        index = self._index(md)
        if bloom is None:
            due = self._summary_requires_rewrite(index.has_transactional_batches, index.min_delete_horizon_ms)
            if due is not None:
                return Decision(True, due)
        superseded = self.keys.count_superseded(index)
        if superseded == 0:
            return Decision(False, "key index", ACTION_SKIPPED_BY_KEY_INDEX, 0)
        if (self.min_ratio > 0 and superseded < self.min_ratio * len(index) and self.max_lag >= LONG_MAX
                and index.count_matching(self.keys.tombstone_hashes) == 0):
            return Decision(False, f"cost gate: {superseded} of {len(index)} records superseded",
                            ACTION_CARRIED_FORWARD, superseded)
        return Decision(True, "superseded records", superseded=superseded)

    def _bloom_worth_probing(self, md: RemoteLogSegmentMetadata, bloom: KeyBloomFilter) -> bool:
        """Whether the filter can plausibly rule the segment out. A filter answers "none" for
        N dirty keys with probability (1 - p)^N (p its false-positive rate at its fill): when
        that is below BLOOM_MIN_ESCAPE and the segment has an exact key index (which decides
        anyway, usually from the local cache), the probe is skipped as wasted work. A segment
        without an index is always probed: a "none" there saves a download."""
        if not self.use_key_index or md.key_index_bytes is None:
            return True
        return bloom_escape_probability(bloom, len(self.keys)) >= BLOOM_MIN_ESCAPE

    def _bloom_may_match(self, bloom: KeyBloomFilter) -> bool:
        """Whether the filter may hold any dirty key: the same answer as probing every digest
        at once, but probed in growing blocks, so the usual "maybe" of a round with many dirty
        keys (each probe matches with the false-positive rate) costs a few hundred probes, not
        one per dirty key."""
        digests = self.keys.digests
        lo, step = 0, BLOOM_FIRST_PROBES
        while lo < len(digests):
            hi = min(len(digests), lo + step)
            if bloom.might_contain_any_digest(digests[lo:hi]):
                return True
            lo, step = hi, step * 4
        return False

    # ---- inputs ------------------------------------------------------------------------------
    def _bloom(self, md: RemoteLogSegmentMetadata) -> KeyBloomFilter | None:
        if md.id in self._prefetched:
            blob = self._blooms.pop(md.id, None)  # decided once per round: no need to keep it
        else:
            blob = self.rlmm.get_bloom_filter(md.remote_log_segment_id)
        if blob is None:
            return None
        try:
            return KeyBloomFilter.from_bytes(blob, source=md.id)
        except CorruptIndexError as e:  # the exact index (or a download) decides instead
            logger.warning("bloom filter of %s is unreadable (%s); using its key index", md.id, e)
            return None

    def _index(self, md: RemoteLogSegmentMetadata) -> KeyIndex:
        """The segment's key index: cached, fetched, or built from a download (then stored)."""
        if md.key_index_bytes is not None:
            key = self.rsm.object_key(md, IndexType.KEY_INDEX)
            try:
                data, fetched = self.rsm.fetch_key_index(md)
                if fetched:
                    self.index_fetches += 1
                    self.stats.bytes_downloaded += len(data)
                    account = self.stats.account(md.id, None, md.start_offset, md.end_offset)
                    account.downloaded += len(data)
                    account.requests += 1
                return KeyIndex.from_bytes(data, source=key)
            except (CorruptIndexError, ObjectNotFoundError) as e:
                # never trust it: rebuild from the segment itself (and replace the object)
                logger.warning("key index %s is unusable (%s); downloading the segment instead", key, e)
                self.rsm.drop_cached_key_index(md)
        path = self.download(md)
        index = build_segment_key_index(path)
        self.indexes_built += 1
        data = index.to_bytes()
        try:
            self.rsm.put_key_index(md, data)
            self.rlmm.set_key_index(md.remote_log_segment_id, len(data))
            account = self.stats.account(md.id, None, md.start_offset, md.end_offset)
            account.uploaded += len(data)
            account.requests += 1
        except TiercompactError as e:  # the next round downloads it again; nothing is wrong meanwhile
            logger.warning("could not store the key index of %s: %s", md.id, e)
        return index

    def _summary_requires_rewrite(self, transactional: bool, horizon: int | None) -> str | None:
        if transactional:
            return "transactional or control batches"
        if horizon is not None and horizon <= self.now:
            return "a delete horizon has passed"
        return None

