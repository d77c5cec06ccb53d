"""Pure epoch-lineage rules: the cleaner-offset vector's validation and Kafka's
isRemoteSegmentWithinLeaderEpochs. No database here, so they are unit-tested directly.

A *lineage* is the partition's leader-epoch history as ``{epoch -> start offset}``
(sorted), recorded by ``become_leader``. A *vector* is the cleaner-offset map
``{epoch -> cleaner offset}``.
"""

from __future__ import annotations

from collections.abc import Mapping

from log.types import TopicPartition
from metadata.errors import CleanerOffsetLineageError


def validate_cleaner_offsets(
    tp: TopicPartition,
    publisher_epoch: int,
    vector: Mapping[int, int],
    stored: Mapping[int, int],
    lineage: Mapping[int, int],
) -> None:
    """Reject a vector that contradicts what is already established (the zombie-leader rules below).

    * every epoch in the vector is in the lineage and not above the publisher's epoch;
    * entries for epochs below the publisher's are exactly the stored ones: a zombie that
      claims LE-0 -> 123 after LE-0 -> 100 was established is rejected, in either order;
    * the publisher's own entry never goes backwards;
    * values are non-decreasing by epoch.

    Raises:
        CleanerOffsetLineageError: with the rule that failed.
    """
    def fail(detail: str) -> None:
        raise CleanerOffsetLineageError(tp, publisher_epoch, detail)

    for e, off in vector.items():
        if e > publisher_epoch:
            fail(f"entry LE-{e} -> {off} is for an epoch after the publisher's")
        if e not in lineage:
            fail(f"entry LE-{e} -> {off} is for an epoch that is not in the lineage {dict(lineage)}")
    lower_new = {e: o for e, o in vector.items() if e < publisher_epoch}
    lower_stored = {e: o for e, o in stored.items() if e < publisher_epoch}
    if lower_new != lower_stored:
        fail(f"entries for earlier epochs {_fmt(lower_new)} differ from the established "
             f"{_fmt(lower_stored)}; an earlier epoch's cleaning is final (a zombie or stale publish)")
    if publisher_epoch in stored:
        mine = vector.get(publisher_epoch)
        if mine is None or mine < stored[publisher_epoch]:
            fail(f"cleaner offset for LE-{publisher_epoch} would go backwards from "
                 f"{stored[publisher_epoch]} to {mine}")
    prev: tuple[int, int] | None = None
    for e in sorted(vector):
        off = vector[e]
        if prev is not None and off < prev[1]:
            fail(f"LE-{e} -> {off} is below LE-{prev[0]} -> {prev[1]}: cleaner offsets never decrease")
        prev = (e, off)


def _fmt(vector: Mapping[int, int]) -> str:
    return "{" + ", ".join(f"LE-{e} -> {o}" for e, o in sorted(vector.items())) + "}"


def resolve_checkpoint(vector: Mapping[int, int]) -> int | None:
    """The value for the highest epoch in the vector (what a new leader continues from)."""
    return vector[max(vector)] if vector else None


def _filtered_epochs(segment_epochs: Mapping[int, int]) -> dict[int, int]:
    """Kafka's buildFilteredLeaderEpochMap: drop epochs that hold no record (an epoch whose
    start offset equals the next epoch's)."""
    items = sorted(segment_epochs.items())
    out: dict[int, int] = {}
    for i, (e, off) in enumerate(items):
        if i + 1 < len(items) and items[i + 1][1] == off:
            continue
        out[e] = off
    return out


def is_segment_within_leader_epochs(
    segment_epochs: Mapping[int, int],
    segment_end_offset: int,
    lineage: Mapping[int, int],
    log_end_offset: int | None = None,
) -> bool:
    """Kafka's RemoteLogManager.isRemoteSegmentWithinLeaderEpochs.

    True when the segment's epochs form a contiguous part of the lineage: each epoch of the
    segment is in the lineage with matching boundaries, and the segment ends before the
    next epoch starts (and before ``log_end_offset`` when given).
    """
    if not lineage or not segment_epochs:
        return False
    leader = dict(sorted(lineage.items()))
    lkeys = list(leader)
    seg = _filtered_epochs(segment_epochs)
    skeys = list(seg)
    seg_last = skeys[-1]
    if seg_last < lkeys[0] or seg_last > lkeys[-1]:
        return False
    seg_first = next((e for e in skeys if e >= lkeys[0]), None)
    if seg_first is None:
        return False

    def higher(keys: list[int], m: Mapping[int, int], e: int) -> tuple[int, int] | None:
        k = next((x for x in keys if x > e), None)
        return None if k is None else (k, m[k])

    for e, off in seg.items():
        if e < seg_first:
            continue
        if e not in leader:
            return False
        if e == seg_first and lkeys[0] < e and off < leader[e]:
            return False
        if e == seg_last:
            nxt = higher(lkeys, leader, e)
            if nxt is not None and segment_end_offset > nxt[1] - 1:
                return False
        elif higher(lkeys, leader, e) != higher(skeys, seg, e):
            return False
    return not (log_end_offset is not None and segment_end_offset >= log_end_offset)
