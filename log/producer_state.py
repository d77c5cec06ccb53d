"""Producer state of one partition: idempotent sequences, epochs and open transactions.

Kafka's ProducerStateManager, reduced to what a single-replica log needs:

* per producer id: epoch, last sequence and last data batch (for the cleaner's "keep each
  producer's last batch" rule, A.7), the metadata of its last
  :data:`NUM_BATCHES_TO_RETAIN` batches (Kafka's ProducerStateEntry.batchMetadata: a retry of
  any of them is answered with its original offsets), and the first offset of its open
  transaction, if any;
* the open transactions, whose earliest first offset bounds the last stable offset;
* on an ABORT marker, the :class:`AbortedTxn` entry for the transaction index.

On open, the LocalLog loads the newest ``<offset>.snapshot`` (log/producer_snapshot.py,
written at every roll as Kafka does) and replays the batch headers after it (no record is
decoded), so producers whose batches now live only in remote storage are remembered.
Idle producers are expired as Kafka's removeExpiredProducers does: a producer with no open
transaction whose last batch's timestamp is ``producer.id.expiration.ms`` old is forgotten,
so the cleaner no longer keeps its last batch and later snapshots leave it out.
Not thread-safe: the LocalLog serialises access.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from log.errors import (
    InvalidProducerEpochError,
    InvalidTxnStateError,
    OutOfOrderSequenceError,
    UnknownProducerIdError,
)
from log.index.txn_index import AbortedTxn
from log.record import ControlRecordType, RecordBatch

INT32_MAX = 2**31 - 1
#: batches remembered per producer for duplicate detection (Kafka's NUM_BATCHES_TO_RETAIN,
#: the limit of max.in.flight.requests.per.connection for idempotent producers)
NUM_BATCHES_TO_RETAIN = 5


@dataclass(slots=True)
class ProducerStateEntry:
    producer_id: int
    producer_epoch: int
    first_sequence: int = -1      # of the last data batch
    last_sequence: int = -1
    first_data_offset: int = -1   # of the last data batch
    last_data_offset: int = -1
    last_timestamp: int = -1
    coordinator_epoch: int = -1
    current_txn_first_offset: int | None = None
    #: (first_sequence, last_sequence, first_offset, last_offset) of the newest batches of the
    #: current epoch, oldest first; a snapshot keeps only the last one (as Kafka's does)
    recent: list[tuple[int, int, int, int]] = field(default_factory=list)

    def find_duplicate(self, epoch: int, first_seq: int, last_seq: int) -> tuple[int, int] | None:
        """The offsets of the remembered batch with this epoch and sequence range, if any."""
        if epoch != self.producer_epoch or first_seq < 0:
            return None
        for f, last, first_off, last_off in self.recent:
            if f == first_seq and last == last_seq:
                return first_off, last_off
        if first_seq == self.first_sequence and last_seq == self.last_sequence and self.last_data_offset >= 0:
            return self.first_data_offset, self.last_data_offset
        return None


@dataclass(frozen=True, slots=True)
class AppendInfo:
    """What validating a batch found: a duplicate of the last batch returns its offsets."""

    duplicate_of: tuple[int, int] | None = None


def _next_seq(seq: int) -> int:
    return 0 if seq == INT32_MAX else seq + 1


class ProducerStateManager:
    def __init__(self) -> None:
        self.producers: dict[int, ProducerStateEntry] = {}
        self._ongoing: dict[int, int] = {}  # producer id -> first offset of its open transaction

    # ---- validation (client appends only) ---------------------------------------------
    def validate(self, batch: RecordBatch, *, strict: bool = False) -> AppendInfo:
        """Check a producer batch before offsets are assigned; detect a retried duplicate.

        Kafka's order (UnifiedLog.analyzeAndValidateProducerState, ProducerAppendInfo): a
        retry of one of the producer's last :data:`NUM_BATCHES_TO_RETAIN` batches is answered
        with its offsets; otherwise an older epoch is fenced (InvalidProducerEpochError), a new
        epoch must start at sequence 0 and a known epoch must continue its last sequence
        (OutOfOrderSequenceError). ``strict`` (the Kafka listener) also refuses a sequence
        other than 0 from a producer the log does not know (UnknownProducerIdError); the HTTP
        API accepts it, as it always has.
        """
        pid = batch.producer_id
        if pid < 0:
            if batch.is_transactional:
                raise InvalidTxnStateError("a transactional batch needs a producer id")
            return AppendInfo()
        e = self.producers.get(pid)
        if e is None:
            if strict and batch.base_sequence > 0:
                raise UnknownProducerIdError(
                    f"found no record of producer {pid} (its state expired or its batches were removed) but "
                    f"it sent sequence {batch.base_sequence}: the producer must start again")
            return AppendInfo()
        dup = e.find_duplicate(batch.producer_epoch, batch.base_sequence, batch.last_sequence)
        if dup is not None:
            return AppendInfo(duplicate_of=dup)
        if batch.producer_epoch < e.producer_epoch:
            raise InvalidProducerEpochError(
                f"producer {pid} wrote with epoch {batch.producer_epoch} but epoch {e.producer_epoch} "
                f"is current: this producer has been fenced; restart it with a new epoch")
        if batch.base_sequence >= 0:
            if batch.producer_epoch > e.producer_epoch:
                if strict and batch.base_sequence != 0:
                    raise OutOfOrderSequenceError(
                        f"producer {pid} started epoch {batch.producer_epoch} at sequence {batch.base_sequence}, "
                        f"expected 0")
            elif e.last_sequence >= 0 and batch.base_sequence != _next_seq(e.last_sequence):
                raise OutOfOrderSequenceError(
                    f"producer {pid} sent base sequence {batch.base_sequence}, expected "
                    f"{_next_seq(e.last_sequence)}: a batch was lost or reordered")
            elif strict and e.last_sequence < 0 and batch.base_sequence != 0:
                raise OutOfOrderSequenceError(
                    f"producer {pid} sent base sequence {batch.base_sequence} as its first batch of epoch "
                    f"{e.producer_epoch}, expected 0")
        if batch.is_transactional and e.current_txn_first_offset is None and batch.producer_epoch < e.producer_epoch:
            raise InvalidTxnStateError(f"producer {pid} has no open transaction at epoch {batch.producer_epoch}")
        return AppendInfo()

    # ---- updates (every append, client or replay) --------------------------------------
    def on_data_batch(self, batch: RecordBatch) -> None:
        pid = batch.producer_id
        if pid < 0:
            return
        e = self.producers.get(pid)
        if e is None or batch.producer_epoch > e.producer_epoch:
            first_txn = e.current_txn_first_offset if e is not None else None
            e = ProducerStateEntry(pid, batch.producer_epoch, current_txn_first_offset=first_txn)
            self.producers[pid] = e
        e.first_sequence = batch.base_sequence
        e.last_sequence = batch.last_sequence
        e.first_data_offset = batch.base_offset
        e.last_data_offset = batch.last_offset
        if batch.base_sequence >= 0:
            e.recent.append((batch.base_sequence, e.last_sequence, batch.base_offset, batch.last_offset))
            if len(e.recent) > NUM_BATCHES_TO_RETAIN:
                del e.recent[0]
        e.last_timestamp = batch.max_timestamp
        if batch.is_transactional and e.current_txn_first_offset is None:
            e.current_txn_first_offset = batch.base_offset
            self._ongoing[pid] = batch.base_offset

    def on_control_batch(self, batch: RecordBatch, last_stable_offset_after: int | None = None) -> AbortedTxn | None:
        """Apply a COMMIT/ABORT marker; returns the aborted-transaction entry for an ABORT.

        ``last_stable_offset_after`` is the LSO once this transaction is complete; computed
        here when not given.
        """
        if batch.records_count == 0:
            # a marker the cleaner emptied (RETAIN_EMPTY header): no-op, as Kafka's ProducerAppendInfo
            return None
        pid = batch.producer_id
        ctype = batch.control_type()
        if ctype not in (ControlRecordType.COMMIT, ControlRecordType.ABORT):
            return None
        e = self.producers.get(pid)
        if e is None:
            e = ProducerStateEntry(pid, batch.producer_epoch)
            self.producers[pid] = e
        if batch.producer_epoch > e.producer_epoch:
            # Kafka's maybeUpdateProducerEpoch: a marker that bumps the epoch clears the old
            # epoch's batch metadata, so the producer starts again at sequence 0
            e.producer_epoch = batch.producer_epoch
            e.first_sequence = e.last_sequence = -1
            e.first_data_offset = e.last_data_offset = -1
            e.recent.clear()
        e.last_timestamp = batch.max_timestamp
        first = e.current_txn_first_offset
        e.current_txn_first_offset = None
        self._ongoing.pop(pid, None)
        if ctype is ControlRecordType.ABORT:
            if first is None:
                first = batch.base_offset
            lso = last_stable_offset_after
            if lso is None:
                # Kafka's ProducerStateManager.lastStableOffset(completedTxn): the first offset
                # of the earliest other open transaction, else the marker's offset + 1. Offset 0
                # is a real first unstable offset, not "none".
                first_unstable = self.first_unstable_offset()
                lso = first_unstable if first_unstable is not None else batch.last_offset + 1
            return AbortedTxn(pid, first, batch.last_offset, lso)
        return None

    def check_marker(self, producer_id: int, producer_epoch: int) -> None:
        e = self.producers.get(producer_id)
        if e is not None and producer_epoch < e.producer_epoch:
            raise InvalidProducerEpochError(
                f"marker for producer {producer_id} has epoch {producer_epoch} below the current {e.producer_epoch}")

    # ---- queries ---------------------------------------------------------------------
    def first_unstable_offset(self) -> int | None:
        return min(self._ongoing.values()) if self._ongoing else None

    def ongoing_transactions(self) -> dict[int, int]:
        return dict(self._ongoing)

    def active_producers(self) -> dict[int, ProducerStateEntry]:
        return dict(self.producers)

    def remove_expired_producers(self, now_ms: int, expiration_ms: int) -> list[int]:
        """Forget producers idle for ``expiration_ms`` (Kafka's isProducerExpired: no open
        transaction and ``now - last_timestamp >= expiration``); returns their ids."""
        expired = [pid for pid, e in self.producers.items()
                   if e.current_txn_first_offset is None and now_ms - e.last_timestamp >= expiration_ms]
        for pid in expired:
            del self.producers[pid]
        return expired

    def truncate_and_reset(self) -> None:
        self.producers.clear()
        self._ongoing.clear()

    def load(self, producers: dict[int, ProducerStateEntry]) -> None:
        """Replace the state with a snapshot's (open transactions included)."""
        self.truncate_and_reset()
        self.producers.update(producers)
        self._ongoing.update({pid: e.current_txn_first_offset for pid, e in producers.items()
                              if e.current_txn_first_offset is not None})
