"""Test helpers: a read_committed reader over a LocalLog and a replay model of compaction."""

from __future__ import annotations

from dataclasses import dataclass, field

from cleaner.cleaner import Cleaner
from cleaner.config import CleanerConfig
from cleaner.log_to_clean import LogToClean, cleanable_offsets
from cleaner.offset_map import CompactOffsetMap
from log.local_log import LocalLog, RecordSpec
from log.record import ControlRecordType, Record, RecordBatch


def all_batches(log: LocalLog) -> list[RecordBatch]:
    return [b for seg in log.all_segments() for _p, b in seg.batches()]


def committed_records(batches: list[RecordBatch]) -> list[Record]:
    """Data records a read_committed consumer sees, in offset order (fate from the markers)."""
    fate: dict[int, bool] = {}          # batch base offset -> committed?
    open_: dict[int, list[int]] = {}    # pid -> base offsets of its open transaction's batches
    for b in batches:
        if b.is_control:
            if b.records_count == 0:
                continue
            t = b.control_type()
            for base in open_.pop(b.producer_id, []):
                fate[base] = t is ControlRecordType.COMMIT
        elif b.is_transactional:
            open_.setdefault(b.producer_id, []).append(b.base_offset)
        else:
            fate[b.base_offset] = True
    out: list[Record] = []
    for b in batches:
        if not b.is_control and fate.get(b.base_offset, False):
            out.extend(b.records())
    return out


def aborted_offsets(batches: list[RecordBatch]) -> set[int]:
    """Record offsets of data batches that belong to aborted transactions."""
    open_: dict[int, list[RecordBatch]] = {}
    out: set[int] = set()
    for b in batches:
        if b.is_control and b.records_count:
            for d in open_.pop(b.producer_id, []):
                if b.control_type() is ControlRecordType.ABORT:
                    out.update(r.offset for r in d.records())
        elif b.is_transactional and not b.is_control:
            open_.setdefault(b.producer_id, []).append(b)
    return out


def replay(records: list[Record]) -> tuple[dict[bytes, bytes], list[tuple[int, bytes | None]]]:
    """Final state per key (tombstones delete) and the keyless records."""
    state: dict[bytes, bytes] = {}
    keyless: list[tuple[int, bytes | None]] = []
    for r in records:
        if r.key is None:
            keyless.append((r.offset, r.value))
        elif r.value is None:
            state.pop(r.key, None)
        else:
            state[r.key] = r.value
    return state, keyless


def latest_tombstones(records: list[Record]) -> set[int]:
    """Offsets of tombstones that are the last record of their key."""
    last: dict[bytes, Record] = {}
    for r in records:
        if r.key is not None:
            last[r.key] = r
    return {r.offset for r in last.values() if r.value is None}


@dataclass
class Producers:
    """Appends as plain, idempotent or transactional producers with correct sequences."""

    log: LocalLog
    seq: dict[int, int] = field(default_factory=dict)
    open_txn: set[int] = field(default_factory=set)

    def append(self, records: list[RecordSpec], pid: int = -1, transactional: bool = False, **kw) -> None:
        if pid < 0:
            self.log.append_records(records, **kw)
            return
        seq = self.seq.get(pid, 0)
        self.log.append_records(records, producer_id=pid, producer_epoch=0, base_sequence=seq,
                                transactional=transactional, **kw)
        self.seq[pid] = seq + len(records)
        if transactional:
            self.open_txn.add(pid)

    def end(self, pid: int, commit: bool) -> None:
        self.log.append_marker(pid, 0, ControlRecordType.COMMIT if commit else ControlRecordType.ABORT)
        self.open_txn.discard(pid)


def clean_until_done(log: LocalLog, now: int, *, dedupe_entries: int = 1000, checkpoint: int | None = None,
                     max_rounds: int = 200) -> int | None:
    """Run rounds (ignoring the dirty ratio) until the checkpoint stops moving; returns it."""
    cfg = CleanerConfig(dedupe_buffer_size=max(24 * dedupe_entries, 48), io_buffer_size=4096)
    # as many 16-byte slots as SkimpyOffsetMap would have had 24-byte ones: the same capacity rule
    cleaner = Cleaner(CompactOffsetMap(16 * (cfg.dedupe_buffer_per_thread // 24)), cfg)
    for _ in range(max_rounds):
        o = cleanable_offsets(log, checkpoint, now)
        ltc = LogToClean(log.topic_partition, log, o.first_dirty_offset, o.first_uncleanable_dirty_offset)
        if ltc.first_uncleanable_offset <= ltc.first_dirty_offset:
            return o.first_dirty_offset
        end, _stats = cleaner.do_clean(ltc, now)
        if end == checkpoint:
            return end
        checkpoint = end
    raise AssertionError("cleaning did not converge")
