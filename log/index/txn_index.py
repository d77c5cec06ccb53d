"""The transaction index ``<base>.txnindex``: one entry per aborted transaction.

Kafka's TransactionIndex / AbortedTxn (storage/.../log/): 34-byte big-endian entries

| bytes | field | meaning |
|---|---|---|
| 0-1   | version int16          | 0 |
| 2-9   | producerId int64       | |
| 10-17 | firstOffset int64      | first offset of the transaction |
| 18-25 | lastOffset int64       | offset of the ABORT marker |
| 26-33 | lastStableOffset int64 | the LSO when the marker was written |

The entry lives in the segment holding the ABORT marker. lastOffset strictly increases.
"""

from __future__ import annotations

import struct
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

from log.errors import CorruptIndexError
from log.index.base import EntryFile


@dataclass(frozen=True, slots=True)
class AbortedTxn:
    producer_id: int
    first_offset: int
    last_offset: int
    last_stable_offset: int

    def __post_init__(self) -> None:
        if self.last_offset < self.first_offset:
            raise ValueError(f"aborted txn last offset {self.last_offset} < first {self.first_offset}")


def parse_txn_index(data: bytes, *, source: str | None = None) -> list[AbortedTxn]:
    """The entries of a whole ``.txnindex`` held in memory (a fetched remote index)."""
    size = TransactionIndex.entry.size
    if len(data) % size:
        raise CorruptIndexError(f"transaction index length {len(data)} is not a multiple of {size}", source=source)
    out = []
    for i in range(0, len(data), size):
        version, pid, first, last, lso = TransactionIndex.entry.unpack_from(data, i)
        if version != 0:
            raise CorruptIndexError(f"transaction index entry version {version}", source=source, position=i)
        out.append(AbortedTxn(pid, first, last, lso))
    return out


def collect_aborted_txns(entries: Iterable[AbortedTxn], fetch_offset: int, upper: int,
                         ) -> tuple[list[AbortedTxn], bool]:
    """Kafka's ``TransactionIndex.collectAbortedTxns`` over one index's entries, in order.

    Returns the entries overlapping ``[fetch_offset, upper)`` (``lastOffset >= fetch_offset``
    and ``firstOffset < upper``) and whether the search is complete. It is complete as soon as
    *any* entry, matching or not, has ``lastStableOffset >= upper``: that entry's marker was
    written when every transaction starting below ``upper`` had been decided, and an entry is
    written with the marker, so no later index can hold an aborted transaction starting
    below ``upper`` whose marker is not already behind us.
    """
    out: list[AbortedTxn] = []
    for t in entries:
        if t.last_offset >= fetch_offset and t.first_offset < upper:
            out.append(t)
        if t.last_stable_offset >= upper:
            return out, True
    return out, False


#: one segment's transaction index in a chain: (segment base offset, loader of its entries)
TxnIndexLink = tuple[int, Callable[[], Iterable[AbortedTxn]]]


def collect_aborted_transactions(chain: Sequence[TxnIndexLink], start: int, upper: int) -> list[AbortedTxn]:
    """Kafka's ``collectAbortedTransactions(startOffset, upperBoundOffset)`` over any log.

    ``chain`` is every segment of the log (remote, then local-only) in offset order, each
    with a loader of its ``.txnindex`` entries. The walk starts at the segment holding
    ``start`` (the floor by base offset; the first segment if none) and reads forward through
    later indexes, past ``upper`` if need be, until one completes the search
    (:func:`collect_aborted_txns`). The ABORT marker of a transaction, and so its index entry,
    may lie in any later segment, so every engine (local, tiered, Spark) collects this way.
    A loader is called only when the walk reaches its segment.
    """
    if start >= upper or not chain:
        return []
    i = 0
    for j, (base, _load) in enumerate(chain):
        if base <= start:
            i = j
        else:
            break
    out: list[AbortedTxn] = []
    for _base, load in chain[i:]:
        found, complete = collect_aborted_txns(load(), start, upper)
        out.extend(found)
        if complete:
            break
    return out


class TransactionIndex(EntryFile):
    entry = struct.Struct(">hqqqq")

    def __init__(self, path: Path, base_offset: int) -> None:
        self.base_offset = base_offset
        super().__init__(path)

    def _check(self, entries: list[tuple[int, ...]]) -> None:
        last = -1
        for version, _pid, first, lastoff, _lso in entries:
            if version != 0 or lastoff <= last or lastoff < first:
                raise CorruptIndexError("transaction index entry invalid or out of order", source=str(self.path))
            last = lastoff

    def append(self, txn: AbortedTxn) -> None:
        if self._entries and txn.last_offset <= self._entries[-1][3]:
            raise CorruptIndexError(
                f"aborted txn last offset {txn.last_offset} is not above the last entry's {self._entries[-1][3]}",
                source=str(self.path))
        self._append_entry(0, txn.producer_id, txn.first_offset, txn.last_offset, txn.last_stable_offset)

    def extend(self, txns: Iterable[AbortedTxn]) -> None:
        for t in txns:
            self.append(t)

    def all(self) -> list[AbortedTxn]:
        return [AbortedTxn(p, f, la, lso) for _v, p, f, la, lso in self._entries]

    def collect(self, fetch_offset: int, upper: int) -> tuple[list[AbortedTxn], bool]:
        """Entries overlapping [fetch_offset, upper); ``complete`` once any entry's LSO >= upper
        (see :func:`collect_aborted_txns`)."""
        entries = (AbortedTxn(p, f, la, lso) for _v, p, f, la, lso in self._entries)  # stops where complete
        return collect_aborted_txns(entries, fetch_offset, upper)

    def truncate_to(self, offset: int) -> None:
        keep = len(self._entries)
        while keep and self._entries[keep - 1][3] >= offset:
            keep -= 1
        self._truncate_entries(keep)

    def _append_entry(self, *fields: int) -> None:
        super()._append_entry(*fields)
