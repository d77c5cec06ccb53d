"""A remote read stops once the batches it checked may hold ``max_records`` records, as a local
read does, instead of CRC-checking a whole fetch window (1 MiB by default) for a small page; the
pages read are the same either way."""

from __future__ import annotations

from pathlib import Path

from log.clock import MockClock
from log.fetch import READ_COMMITTED, READ_UNCOMMITTED
from tests.remote.tiering import TP, TierEnv, local_records, produce, read_all


def test_remote_pages_stop_at_max_records(tmp_path: Path, clock: MockClock) -> None:
    env = TierEnv(tmp_path, clock)
    try:
        log = env.create(local_retention_ms=-1)
        produce(log, batches=60, clock=env.clock)
        log.roll()
        expected = {iso: local_records(log, iso) for iso in (READ_UNCOMMITTED, READ_COMMITTED)}
        env.rlm.copy_rolled_segments(TP)
        env.clock.advance(1)
        log.delete_segments(log.all_segments()[:-1])
        assert env.rlm.log_start_offset(TP) == 0 < log.log_start_offset
        reader = env.rlm.read_path.reader
        returned: list[int] = []
        real = reader.read

        def spy(md, offset, max_bytes, max_records=None):
            batches = real(md, offset, max_bytes, max_records)
            returned.append(len(batches))
            return batches

        reader.read = spy
        for iso, recs in expected.items():
            for start in range(0, 40, 7):
                got = read_all(env.rlm, TP, iso, start=start, max_records=3, max_bytes=1 << 20)
                assert got == [r for r in recs if r[0] >= start], (iso, start)
        # batches hold 1-4 records: a page of 3 needs at most 3 data batches (plus control
        # batches), never the whole segment a 1 MiB window holds
        assert returned and max(returned) <= 6
    finally:
        env.close()
