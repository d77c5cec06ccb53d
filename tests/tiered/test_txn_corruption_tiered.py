"""A tiered round never re-signs a corrupt batch: the source batch's CRC is verified before it is
mapped or filtered, and the error names the remote object (not the temporary download) and the
batch's byte position. Nothing is published and the round's uploads are removed."""

from __future__ import annotations

from pathlib import Path

import pytest

from cleaner.config import CleanerConfig
from cleaner.log_cleaner import LogCleaner
from cleaner.tiered import TieredContext, TieredLogToClean, tiered_log_to_clean
from log.errors import CorruptRecordError
from log.record import iter_batches
from tests.tiered.conftest import TP, World


def _corrupt_object(w: World, needle: bytes) -> tuple[str, int]:
    """Flip a bit of ``needle`` inside the remote segment holding it, behind the store's back
    (bit rot at rest); returns (object key, position of the batch holding it)."""
    for md in w.rlmm.list_remote_log_segments(TP):
        key = w.rsm.object_key(md)
        path = Path(w.store.root) / key  # type: ignore[attr-defined]
        data = bytearray(path.read_bytes())
        at = data.find(needle)
        if at < 0:
            continue
        data[at] ^= 0x01
        path.write_bytes(bytes(data))
        for pos, batch in iter_batches(bytes(data)):
            if pos <= at < pos + batch.size_in_bytes:
                return key, pos
    raise AssertionError(f"{needle!r} is in no remote segment")


def _build(w: World) -> None:
    for r in range(3):
        w.produce([(f"k{i}".encode(), f"v{r}-{i}".encode()) for i in range(6)])
        w.roll_and_tier()


@pytest.mark.parametrize("needle", [b"v2-3", b"v2-0"], ids=["dirty", "rewritten-only"])
def test_a_corrupt_remote_batch_stops_the_round_and_names_the_object(make_world, needle: bytes) -> None:
    w = make_world()
    _build(w)
    if needle == b"v2-0":
        w.clean()  # the first segments are clean now; dirty the last key so they are rewritten again
        w.produce([(b"k4", b"new")])
        w.roll_and_tier()
    before = [(m.id, m.start_offset) for m in w.rlmm.list_remote_log_segments(TP)]
    objects = w.object_keys()
    key, pos = _corrupt_object(w, needle)
    with pytest.raises(CorruptRecordError) as info:
        w.clean()
    assert info.value.position == pos and key in str(info.value.source)
    assert f"{key} at byte {pos}" in str(info.value)
    assert [(m.id, m.start_offset) for m in w.rlmm.list_remote_log_segments(TP)] == before
    assert w.object_keys() == objects  # the round's uploads (if any) were removed, nothing else touched


def test_the_tiered_pool_marks_the_partition_uncleanable_with_the_reason(make_world) -> None:
    w = make_world()
    _build(w)
    key, pos = _corrupt_object(w, b"v1-2")
    ctx = TieredContext(rlmm=w.rlmm, rsm=w.rsm, leader_epoch=w.rlm.leader_epoch, temp_dir=w.root / "tmp")
    lc = LogCleaner(CleanerConfig(dedupe_buffer_size=1 << 20), w.lm, clock=w.clock, tiered=ctx)
    ltc = tiered_log_to_clean(ctx, TP, w.log, None, w.clock.milliseconds())
    assert isinstance(ltc, TieredLogToClean)
    lc.manager.start_cleaning(TP)
    assert lc.run_round(lc.new_tiered_cleaner(lc._new_map()), ltc) is None
    assert lc.manager.uncleanable_partitions() == {TP}
    reason = lc.status()["uncleanable_reasons"][str(TP)]
    assert reason.startswith("CorruptRecordError") and f"{key} at byte {pos}" in reason
