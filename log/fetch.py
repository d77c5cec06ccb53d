"""Turning fetched batches into the records a consumer sees.

``read_uncommitted`` returns every data record; ``read_committed`` (the caller bounds
the fetch by the last stable offset) also drops the records of aborted transactions,
using the aborted-transaction list the way Kafka's consumer does (Fetcher's
``abortedProducerIds``). Control batches are never returned, but they advance the
next fetch offset. Records below ``start_offset`` inside the first batch are skipped,
so an offset removed by compaction reads as the next one present.
"""

from __future__ import annotations

import heapq
from collections.abc import Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from log.errors import InvalidRequestError
from log.index.txn_index import AbortedTxn
from log.record import ControlRecordType, Record, RecordBatch
from log.record.batch import make_record
from log.record.decode import RecordFields

if TYPE_CHECKING:
    from log.local_log import LocalLog

READ_COMMITTED = "read_committed"
READ_UNCOMMITTED = "read_uncommitted"


def check_isolation(isolation: str) -> str:
    if isolation not in (READ_COMMITTED, READ_UNCOMMITTED):
        raise InvalidRequestError(f"isolation={isolation!r} is invalid: use read_committed or read_uncommitted")
    return isolation


@dataclass(frozen=True, slots=True)
class FetchResult:
    """A page of records. ``fields`` holds each record as the ``(offset, timestamp, key, value,
    headers, sequence)`` tuple it was decoded to; :attr:`records` makes Record objects of them
    (on each access: a reader that only encodes the page, like the HTTP read, never needs them)."""

    fields: list[RecordFields]
    next_offset: int

    @property
    def records(self) -> list[Record]:
        make = make_record
        return [make(*f) for f in self.fields]


def records_from_batches(batches: Iterable[RecordBatch], start_offset: int, *, isolation: str = READ_UNCOMMITTED,
                         aborted: Iterable[AbortedTxn] = (), max_records: int = 500) -> FetchResult:
    check_isolation(isolation)
    heap = [(t.first_offset, t.producer_id) for t in aborted] if isolation == READ_COMMITTED else []
    heapq.heapify(heap)
    aborted_pids: set[int] = set()
    out: list[RecordFields] = []
    next_offset = start_offset
    for batch in batches:
        if batch.last_offset < start_offset:
            continue
        while heap and heap[0][0] <= batch.last_offset:
            aborted_pids.add(heapq.heappop(heap)[1])
        if batch.is_control:
            if batch.records_count and batch.control_type() is ControlRecordType.ABORT:
                aborted_pids.discard(batch.producer_id)
            next_offset = max(next_offset, batch.next_offset)
            continue
        if batch.is_transactional and batch.producer_id in aborted_pids:
            next_offset = max(next_offset, batch.next_offset)
            continue
        for fields in batch.reader_fields():
            if fields[0] < start_offset:
                continue
            if len(out) >= max_records:
                return FetchResult(out, next_offset)
            out.append(fields)
            next_offset = fields[0] + 1
        next_offset = max(next_offset, batch.next_offset)
    return FetchResult(out, next_offset)


def read_local(log: LocalLog, offset: int, *, max_bytes: int, isolation: str = READ_UNCOMMITTED,
               max_records: int = 500) -> FetchResult:
    """One page of the local log from ``offset``: bounded by the last stable offset for
    read_committed, with the aborted transactions that overlap the batches read.

    Raises OffsetOutOfRangeError outside the local log.
    """
    check_isolation(isolation)
    committed = isolation == READ_COMMITTED
    batches = log.read(offset, max_bytes=max_bytes, max_offset=log.last_stable_offset if committed else None,
                       max_records=max_records)
    aborted = log.collect_aborted_transactions(offset, batches[-1].next_offset) if committed and batches else []
    return records_from_batches(batches, offset, isolation=isolation, aborted=aborted, max_records=max_records)
