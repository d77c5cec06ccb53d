"""The soak client's model of what each partition must (and may) hold.

Every record the client sends carries a header ``soak-id`` = ``<request id>.<index>``, so a
record read back is identified whatever compaction did around it. A write's fate is:

* ``acked``: the server answered 2xx; its offsets are known;
* ``failed``: the server answered 4xx or the connection was refused: it must never appear;
* ``unknown``: a timeout, a 5xx, a dropped connection: it may or may not exist. Once read
  back, an unknown record is known to exist and is promoted to ``acked`` at that offset.

Transactions are ``open`` until their marker is acknowledged (``committed``/``aborted``);
``unknown`` when the client gave up on them (their records may be either).

:func:`check_read` compares one full read of a partition with the model:

* soundness: every record is one the client sent, with its key, value and offset, at most
  once; records of rejected writes never appear; read_committed never shows aborted or open
  transactions;
* completeness: for each key, the newest *definite* record (acked, and committed or not
  transactional) is visible, or superseded by a newer visible record; a tombstone may be
  gone (delete.retention.ms), but then nothing older for its key may be visible either
  (that would be a resurrection). Topics with ``cleanup.policy=delete`` and infinite retention
  must show every definite record.

Pure and in-process: the client serialises access with its own lock.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

HEADER = "soak-id"


@dataclass(slots=True)
class Txn:
    txn_id: str
    topic: str
    partition: int
    producer_id: int
    producer_epoch: int
    state: str = "open"  # open | committing | aborting (marker in doubt) | committed | aborted
    want: str | None = None  # the marker type being written (commit | abort)


@dataclass(slots=True)
class Rec:
    rid: str  # "<request id>.<index>"
    topic: str
    partition: int
    key: str | None
    value: str | None
    status: str  # acked | failed | unknown | pending
    offset: int | None = None
    txn: Txn | None = None
    seq: int = 0  # the order the client sent records in (model time)


@dataclass
class Violation:
    kind: str
    detail: str

    def as_dict(self) -> dict[str, str]:
        return {"kind": self.kind, "detail": self.detail}


@dataclass
class Model:
    records: dict[str, Rec] = field(default_factory=dict)
    txns: dict[str, Txn] = field(default_factory=dict)
    by_tp: dict[tuple[str, int], list[Rec]] = field(default_factory=dict)
    tombstones: dict[tuple[str, int, str | None], list[Rec]] = field(default_factory=dict)
    _seq: int = 0

    def add(self, rid: str, topic: str, partition: int, key: str | None, value: str | None,
            txn: Txn | None = None) -> Rec:
        self._seq += 1
        rec = Rec(rid, topic, partition, key, value, "pending", txn=txn, seq=self._seq)
        self.records[rid] = rec
        self.by_tp.setdefault((topic, partition), []).append(rec)
        if value is None:
            self.tombstones.setdefault((topic, partition, key), []).append(rec)
        return rec

    def partition_records(self, topic: str, partition: int) -> list[Rec]:
        return self.by_tp.get((topic, partition), [])


def _definite(rec: Rec, committed_only: bool) -> bool:
    """The record certainly exists and is visible in a read of that isolation."""
    if rec.status != "acked" or rec.offset is None:
        return False
    if rec.txn is None:
        return True
    return rec.txn.state == "committed"


def _may_supersede(rec: Rec) -> bool:
    """Could this record be the reason an older value of its key was compacted away?"""
    if rec.status in ("failed",):
        return False
    return not (rec.txn is not None and rec.txn.state in ("aborted", "aborting"))


def check_read(model: Model, topic: str, partition: int, records: list[dict[str, Any]], *, isolation: str,
               upper: int, compacted: bool, promote: bool = True, full: bool = True) -> list[Violation]:
    """Check one read of the partition (``records`` from offset 0 up to ``upper``: the high
    watermark for read_uncommitted, the last stable offset for read_committed).

    ``full=False`` checks soundness only (a partial read from some offset)."""
    out: list[Violation] = []
    where = f"{topic}-{partition} ({isolation})"
    seen: dict[str, int] = {}
    last_offset = -1
    visible_by_key: dict[str | None, list[tuple[int, Rec]]] = {}
    for r in records:
        off = int(r["offset"])
        if off <= last_offset:
            out.append(Violation("order", f"{where}: offset {off} after {last_offset}"))
        last_offset = max(last_offset, off)
        hdrs = {h["key"]: h["value"] for h in r.get("headers") or []}
        rid = hdrs.get(HEADER)
        if rid is None:
            out.append(Violation("unidentified", f"{where}: record at {off} has no {HEADER} header: {r}"))
            continue
        rec = model.records.get(rid)
        if rec is None:
            out.append(Violation("unidentified", f"{where}: record at {off} has id {rid!r} the client never sent"))
            continue
        if (rec.topic, rec.partition) != (topic, partition):
            out.append(Violation("misplaced", f"{where}: record {rid} belongs to {rec.topic}-{rec.partition}"))
            continue
        if rec.key != r.get("key") or rec.value != r.get("value"):
            out.append(Violation("corrupt", f"{where}: record {rid} at {off} is key={r.get('key')!r} "
                                            f"value={r.get('value')!r}, sent key={rec.key!r} value={rec.value!r}"))
        if rid in seen:
            out.append(Violation("duplicate", f"{where}: record {rid} at offsets {seen[rid]} and {off}"))
        seen[rid] = off
        if rec.status == "failed":
            out.append(Violation("phantom", f"{where}: record {rid} at {off} was rejected (4xx / connection "
                                            f"refused) but is visible"))
        elif rec.offset is not None and rec.offset != off:
            out.append(Violation("moved", f"{where}: record {rid} acknowledged at {rec.offset}, read at {off}"))
        elif rec.status in ("unknown", "pending") and promote and rec.status != "pending":
            rec.status, rec.offset = "acked", off
        if off >= upper:
            out.append(Violation("beyond-upper", f"{where}: record {rid} at {off} >= bound {upper}"))
        if isolation == "read_committed" and rec.txn is not None:
            if rec.txn.state in ("aborted", "aborting"):
                out.append(Violation("aborted-visible", f"{where}: record {rid} at {off} of aborted transaction "
                                                        f"{rec.txn.txn_id} visible in read_committed"))
            elif rec.txn.state == "open":
                out.append(Violation("open-visible", f"{where}: record {rid} at {off} of open transaction "
                                                     f"{rec.txn.txn_id} visible in read_committed"))
        visible_by_key.setdefault(rec.key, []).append((off, rec))
    if not full:
        return out

    committed_only = isolation == "read_committed"
    newest: dict[str | None, Rec] = {}
    for rec in model.partition_records(topic, partition):
        if not _definite(rec, committed_only) or rec.offset is None or rec.offset >= upper:
            continue
        if not compacted:
            if rec.rid not in seen:
                out.append(Violation("lost", f"{where}: record {rec.rid} acknowledged at {rec.offset} "
                                             f"(key={rec.key!r}) is missing (no compaction on this topic)"))
            continue
        cur = newest.get(rec.key)
        if cur is None or (cur.offset or -1) < rec.offset:
            newest[rec.key] = rec
    if not compacted:
        return out
    for key, must in newest.items():
        assert must.offset is not None
        # only a record that can supersede explains a missing older one (not an aborted one)
        vis = [(o, r) for o, r in visible_by_key.get(key, []) if _may_supersede(r)]
        top = max((o for o, _ in vis), default=None)
        if top is not None and top >= must.offset:
            continue
        if top is None and (must.value is None or _later_possible_tombstone(model, must)):
            continue  # a tombstone (the newest, or maybe a newer one) past delete.retention.ms
        if top is None:
            out.append(Violation("lost", f"{where}: key {key!r}: newest value {must.rid} at {must.offset} "
                                         f"(value={must.value!r}) is missing and nothing newer is visible"))
        else:
            older = next(r for o, r in vis if o == top)
            out.append(Violation("resurrected" if must.value is None else "lost",
                                 f"{where}: key {key!r}: newest {'tombstone' if must.value is None else 'value'} "
                                 f"{must.rid} at {must.offset} is missing but the older {older.rid} at {top} "
                                 f"(value={older.value!r}) is visible"))
    return out


def _later_possible_tombstone(model: Model, must: Rec) -> bool:
    """A tombstone for ``must``'s key whose fate or offset is unknown and that may be newer."""
    for rec in model.tombstones.get((must.topic, must.partition, must.key), []):
        if not _may_supersede(rec):
            continue
        if rec.offset is None and rec.seq > 0:
            return True
        if rec.offset is not None and rec.offset > (must.offset or 0):
            return True
    return False
