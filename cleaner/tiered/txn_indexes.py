"""The transaction indexes of a tiered log for one round, walked forward over both tiers."""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence

from cleaner.round_metadata import RoundMetadata
from cleaner.tiered.view import PartitionView, partition_view
from log.index.bloom import KeyBloomFilter
from log.index.txn_index import AbortedTxn, TxnIndexLink, collect_aborted_transactions, parse_txn_index
from log.local_log import LocalLog
from metadata.types import RemoteLogSegmentMetadata

logger = logging.getLogger(__name__)


class RoundTxnIndexes:
    """The transaction indexes of a tiered log for one round: every referenced remote segment,
    then the local segments above the remote tier, in offset order.

    Aborted transactions are collected as Kafka collects them (:func:`~log.index.txn_index.
    collect_aborted_transactions`): from the segment holding the start offset forward,
    through later remote *and local* indexes, until the search is complete. An ABORT marker,
    and so its index entry, may sit in any later segment (a later remote segment, or the local
    log not yet tiered), so giving a source only its own index, or the map pass only the
    dirty range's, takes aborted data for committed data. The in-process round and the Spark
    driver both collect through this class, so their aborted sets are the same.

    Each remote index is loaded at most once per round: from an identical local copy when
    there is one, as empty when the segment's bloom summary says it holds no transactional or
    control batch (so it has no ABORT marker, hence no entry), otherwise fetched.
    ``known`` seeds entries already fetched (the Spark scan returns them). Not thread-safe.
    """

    def __init__(self, log: PartitionView | LocalLog, segments: Sequence[RemoteLogSegmentMetadata],
                 rlmm: RoundMetadata, fetch: Callable[[RemoteLogSegmentMetadata], bytes], *,
                 local_copies: bool = False,
                 on_download: Callable[[int], None] | None = None,
                 known: dict[str, list[AbortedTxn]] | None = None) -> None:
        self.log = partition_view(log)
        self.rlmm = rlmm
        self._fetch = fetch
        self._local_copies = local_copies
        self._on_download = on_download
        self._cache: dict[str, list[AbortedTxn]] = dict(known or {})
        segs = sorted(segments, key=lambda m: m.start_offset)
        self._segment_ids = {m.id for m in segs}
        #: the remote segments' bloom filters (their summaries), read in one batch at first need
        self._blooms: dict[str, bytes] | None = None
        chain: list[TxnIndexLink] = [(md.start_offset, self._remote_loader(md)) for md in segs]
        remote_end = segs[-1].end_offset + 1 if segs else 0
        chain += self.log.local_txn_links(remote_end)
        self.chain = chain
        #: remote indexes actually fetched from the object store this round
        self.fetched = 0

    def _remote_loader(self, md: RemoteLogSegmentMetadata) -> Callable[[], list[AbortedTxn]]:
        return lambda: self.entries(md)

    def entries(self, md: RemoteLogSegmentMetadata) -> list[AbortedTxn]:
        """Every entry of the remote segment's transaction index."""
        entries = self._cache.get(md.id)
        if entries is not None:
            return entries
        local = self.log.local_copy_txns(md) if self._local_copies else None
        if local is not None:
            entries = local
        else:
            if self._blooms is None:  # a walk without transactions reads every later summary: batch them
                self._blooms = self.rlmm.get_bloom_filters(md.topic_partition, sorted(self._segment_ids))
            blob = self._blooms.get(md.id)
            if blob is None and md.id not in self._segment_ids:
                blob = self.rlmm.get_bloom_filter(md.remote_log_segment_id)
            if blob is not None and not KeyBloomFilter.from_bytes(blob, source=md.id).has_transactional_batches:
                entries = []
            else:
                data = self._fetch(md)
                self.fetched += 1
                if self._on_download is not None:
                    self._on_download(len(data))
                entries = parse_txn_index(data, source=md.id)
        self._cache[md.id] = entries
        return entries

    def collect(self, start: int, upper: int) -> list[AbortedTxn]:
        """Aborted transactions overlapping ``[start, upper)``, read forward until complete."""
        return collect_aborted_transactions(self.chain, start, upper)

    def for_sources(self, group: Sequence[RemoteLogSegmentMetadata]) -> list[list[AbortedTxn]]:
        """What a rewrite adds before each source of ``group`` (Kafka's cleanSegments: from the
        source's base to the next source's base, or to the source's end for the last)."""
        out = []
        for k, md in enumerate(group):
            upper = group[k + 1].start_offset if k + 1 < len(group) else md.end_offset + 1
            out.append(self.collect(md.start_offset, upper))
        return out
