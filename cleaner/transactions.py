"""What one cleaning round knows about transactions (Kafka's CleanedTransactionMetadata).

The round walks batches in log order. Aborted transactions come from the ``.txnindex`` files
(:meth:`add_aborted`) and are "consumed" as the walk passes their first offset:

* a data batch of a producer with a consumed, not yet closed aborted transaction is
  discardable (its records are removed);
* an ABORT marker is kept, and its index entry re-appended to the cleaned ``.txnindex``,
  iff some batch of that transaction was read in this round; otherwise it is discardable
  (stamped with a delete horizon, later removed);
* a COMMIT marker is discardable iff no batch of its transaction was read in this round;
* a control batch with no records (already emptied) is discardable.

One instance serves a whole round, across groups and segments (Kafka shares it the same way),
so a transaction that spans segments is followed correctly. Not thread-safe.
"""

from __future__ import annotations

import heapq
from collections.abc import Iterable

from log.index.txn_index import AbortedTxn, TransactionIndex
from log.record import ControlRecordType, RecordBatch


class CleanedTransactionMetadata:
    def __init__(self) -> None:
        self._heap: list[tuple[int, int, int, AbortedTxn]] = []
        self._added: set[AbortedTxn] = set()
        # producer id -> [aborted txn, last observed batch offset or None]
        self._ongoing_aborted: dict[int, list] = {}
        self._ongoing_committed: set[int] = set()
        #: where retained ABORT markers' index entries go (the cleaned segment's .txnindex)
        self.cleaned_index: TransactionIndex | None = None

    def add_aborted(self, txns: Iterable[AbortedTxn]) -> None:
        """Add aborted transactions; re-adding one already known is a no-op."""
        for t in txns:
            if t not in self._added:
                self._added.add(t)
                heapq.heappush(self._heap, (t.first_offset, t.last_offset, t.producer_id, t))

    def _consume_up_to(self, offset: int) -> None:
        heap = self._heap
        while heap and heap[0][0] <= offset:
            t = heapq.heappop(heap)[3]
            self._ongoing_aborted.setdefault(t.producer_id, [t, None])

    def on_batch_read(self, batch: RecordBatch) -> bool:
        """A data batch was read; returns True if it belongs to an aborted transaction."""
        self._consume_up_to(batch.last_offset)
        if not batch.is_transactional:
            return False
        entry = self._ongoing_aborted.get(batch.producer_id)
        if entry is not None:
            entry[1] = batch.last_offset
            return True
        self._ongoing_committed.add(batch.producer_id)
        return False

    def on_plain_batches_read(self, last_offset: int) -> None:
        """Data batches that are neither transactional nor control were read, the highest last
        offset among them being ``last_offset`` (the compiled loops report such runs at once):
        what :meth:`on_batch_read` does for each of them, since they are never aborted."""
        self._consume_up_to(last_offset)

    def on_control_batch_read(self, batch: RecordBatch) -> bool:
        """A control batch was read; returns True if the marker may be discarded."""
        self._consume_up_to(batch.last_offset)
        if batch.records_count == 0:
            return True
        ctype = batch.control_type()
        if ctype is ControlRecordType.ABORT:
            entry = self._ongoing_aborted.pop(batch.producer_id, None)
            if entry is not None and entry[1] is not None:
                if self.cleaned_index is not None:
                    self.cleaned_index.append(entry[0])
                return False
            return True
        if ctype is ControlRecordType.COMMIT:
            if batch.producer_id in self._ongoing_committed:
                self._ongoing_committed.discard(batch.producer_id)
                return False
            return True
        return False
