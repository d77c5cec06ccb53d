"""The tiered engine over the record kernels: a TieredCleaner with CompactOffsetMap (compiled
and pure-Python kernels) writes the same remote segments, byte for byte, as with the reference
SkimpyOffsetMap path, round after round."""

from __future__ import annotations

import random
from pathlib import Path

import pytest

from cleaner.config import CleanerConfig
from cleaner.kernels import fastpath
from cleaner.offset_map import CompactOffsetMap, SkimpyOffsetMap
from cleaner.tiered import TieredCleaner
from log.clock import MockClock
from log.record import CompressionType, ControlRecordType
from tests.tiered.conftest import TP, World


def _run(root: Path, engine: str) -> list[object]:
    clock = MockClock()
    w = World(root, clock, (f"file://{root / 'objects'}", {}), f"sqlite:///{root / 'md.db'}")
    try:
        rnd = random.Random(11)
        seq = 0
        out: list[object] = []
        for step in range(6):
            for _ in range(40):
                k = b"k%d" % rnd.randrange(30)
                v = None if rnd.random() < 0.15 else rnd.randbytes(rnd.randrange(0, 60))
                codec = rnd.choice(list(CompressionType))
                w.log.append_records([_spec(k, v, clock)], compression=codec)
            if step % 2:  # a transaction, committed or aborted
                w.log.append_records([_spec(b"t%d" % step, b"x", clock)], producer_id=7, producer_epoch=0,
                                     base_sequence=seq, transactional=True)
                seq += 1
                w.log.append_marker(7, 0, ControlRecordType.COMMIT if step % 4 == 1 else ControlRecordType.ABORT)
            w.roll_and_tier()
            cfg = CleanerConfig(dedupe_buffer_size=1 << 16, io_buffer_size=64 * 1024)
            if engine == "reference":
                omap = SkimpyOffsetMap(24 * 4096)
            else:
                k = fastpath.compiled_kernels() if engine == "compiled" else fastpath.pure_kernels()
                assert k is not None, "the compiled record kernels are not built"
                omap = CompactOffsetMap(16 * 4096, k)
            cleaner = TieredCleaner(w.rlmm, w.rsm, omap, cfg, temp_dir=root / "tmp", clock=clock)
            w.clean(cleaner)
            clock.advance(600)  # tombstones stamped in one round expire two rounds later
            segs = w.rlmm.list_remote_log_segments(TP)
            out.append([(md.start_offset, md.end_offset, w.rsm.fetch_log_segment(md, 0)) for md in segs])
            out.append(w.read_all())
        return out
    finally:
        w.close()


def _spec(k: bytes, v: bytes | None, clock: MockClock):
    from log.local_log import RecordSpec

    return RecordSpec(k, v, timestamp=clock.milliseconds())


@pytest.mark.parametrize("engine", ["compiled", "pure"])
def test_tiered_rounds_write_the_reference_segments(tmp_path: Path, engine: str):
    assert _run(tmp_path / engine, engine) == _run(tmp_path / "reference", "reference")
