"""A seeded random transactional workload and the small model that checks read_committed.

Shared by the local and tiered random-workload tests: :meth:`TxnWorkload.append` draws plain
records and tombstones, transactional records of three producers and COMMIT/ABORT markers
(the engine-specific operations, roll, tier, clean, are the caller's); :meth:`TxnWorkload.check`
asserts that every visible record is committed and below the LSO, with its original key and
value at its original offset, and that each key's newest committed value is the one seen.
"""

from __future__ import annotations

import random
from typing import Any

from log.clock import Clock
from log.local_log import LocalLog, RecordSpec
from log.record import ControlRecordType

Record = tuple[bytes, bytes | None]
Visible = list[tuple[int, bytes | None, bytes | None]]


class TxnWorkload:
    def __init__(self, rnd: random.Random, *, clock: Clock | None = None) -> None:
        self.rnd = rnd
        #: with a clock, records carry its time as their timestamp (else the log assigns one)
        self.clock = clock
        self.records: dict[int, Record] = {}
        self.status: dict[int, str] = {}  # offset -> committed | open | aborted
        self.open_txn: dict[int, list[int]] = {}
        self.seq: dict[int, int] = {}

    def _spec(self, k: bytes, v: bytes | None) -> RecordSpec:
        return RecordSpec(k, v) if self.clock is None else RecordSpec(k, v, timestamp=self.clock.milliseconds())

    def append(self, log: LocalLog, op: float, step: int) -> bool:
        """The workload's own operation for the draw ``op`` in [0, 0.7): a plain record or
        tombstone (< 0.3), a transactional record (< 0.55) or a marker (< 0.7, when a
        transaction is open). False: ``op`` is the caller's to act on."""
        rnd = self.rnd
        if op < 0.3:
            k = f"k{rnd.randrange(4)}".encode()
            v = None if rnd.random() < 0.1 else f"p{step}".encode()
            off = log.append_records([self._spec(k, v)]).base_offset
            self.records[off], self.status[off] = (k, v), "committed"
        elif op < 0.55:
            pid = rnd.choice([5, 6, 7])
            k, v = f"k{rnd.randrange(4)}".encode(), f"t{pid}-{step}".encode()
            s = self.seq.get(pid, 0)
            off = log.append_records([self._spec(k, v)], producer_id=pid, producer_epoch=0, base_sequence=s,
                                     transactional=True).base_offset
            self.seq[pid] = s + 1
            self.records[off], self.status[off] = (k, v), "open"
            self.open_txn.setdefault(pid, []).append(off)
        elif op < 0.7 and self.open_txn:
            pid = rnd.choice(sorted(self.open_txn))
            commit = rnd.random() < 0.5
            log.append_marker(pid, 0, ControlRecordType.COMMIT if commit else ControlRecordType.ABORT)
            for o in self.open_txn.pop(pid):
                self.status[o] = "committed" if commit else "aborted"
        else:
            return False
        return True

    def check(self, visible: Visible, lso: int, where: Any = None) -> None:
        """``visible`` is read_committed from the log start: what the model allows, and all of it."""
        for off, k, v in visible:
            assert off < lso and self.status.get(off) == "committed", (where, off, self.status.get(off), lso)
            assert self.records[off] == (k, v), (where, off)
        expected = {self.records[off][0]: (off, self.records[off][1]) for off in sorted(self.records)
                    if off < lso and self.status[off] == "committed"}
        got = {k: (off, v) for off, k, v in visible}
        for k, (off, v) in expected.items():
            if v is None:
                assert k not in got or got[k][1] is None, (where, k, got.get(k))
            else:
                assert got.get(k) == (off, v), (where, k, (off, v), got.get(k))
        assert set(got) <= set(expected)
