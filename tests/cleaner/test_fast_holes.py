"""The rewriting pass does not read runs of batches whose every record is superseded
(cleaner/fast_cleaner.py, the kernels' ``superseded_runs``): the chunk reader skips them as
holes yet keeps the reference's chunks, and a round cleans to the same bytes and stats as the
pure-Python kernels (which read every batch). Each test runs with both kernels (conftest's
``record_kernels``); holes exist only with the compiled ones.
"""

from __future__ import annotations

import random
import struct
from array import array

import pytest

from cleaner import fast_cleaner, fast_reader
from cleaner.cleaner import Cleaner, _chunks, build_offset_map_from_segments
from cleaner.config import CleanerConfig
from cleaner.fast_reader import ChunkReader
from cleaner.kernels import fastpath
from cleaner.log_to_clean import LogToClean, cleanable_offsets
from cleaner.offset_map import CompactOffsetMap
from cleaner.transactions import CleanedTransactionMetadata
from log.local_log import LocalLog, RecordSpec
from log.record import CompressionType
from tests.cleaner.model import Producers
from tests.cleaner.test_fast_chunks import DAMAGE, _damage, _error

NOTE = struct.Struct("=5q")


def _log(make_log, seed: int, *, producers: bool = False) -> LocalLog:
    """Plain batches of 5-60 records over 40 keys (most batches of the first half end up wholly
    superseded), some compressed, some of idempotent producers, a transaction."""
    rnd = random.Random(seed)
    log = make_log(**{"cleanup.policy": "compact", "segment.bytes": 1 << 24, "index.interval.bytes": 512})
    prod = Producers(log)
    for i in range(80):
        recs = [RecordSpec(b"k%d" % rnd.randrange(40) if rnd.random() < 0.95 else None, rnd.randbytes(rnd.randrange(20, 200)))
                for _ in range(rnd.randrange(5, 60))]
        codec = CompressionType.LZ4 if rnd.random() < 0.1 else CompressionType.NONE
        if producers and i % 7 == 3:
            prod.append(recs, pid=5 + i % 3, compression=codec)
        elif producers and i == 20:
            prod.append(recs, pid=9, transactional=True)
            prod.end(9, commit=rnd.random() < 0.5)
        else:
            prod.append(recs, compression=codec)
    # the last writes supersede everything earlier
    for k in range(40):
        log.append_records([RecordSpec(b"k%d" % k, b"final")])
    log.roll()
    return log


def _files(log: LocalLog) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(log.dir.iterdir()) if p.is_file()}


@pytest.fixture
def holes_everywhere(monkeypatch: pytest.MonkeyPatch) -> list[list[tuple[int, ...]]]:
    """Every plain batch noted and every run a hole; records the runs each rewrite got."""
    monkeypatch.setattr(fast_cleaner, "NOTE_MIN_BYTES", 0)
    monkeypatch.setattr(fast_cleaner, "MIN_HOLE_BYTES", 1)
    seen: list[list[tuple[int, ...]]] = []
    original = ChunkReader.__init__

    def init(self, *a, **kw):  # type: ignore[no-untyped-def]
        original(self, *a, **kw)
        if self.holes:
            seen.append(list(self.holes))

    monkeypatch.setattr(ChunkReader, "__init__", init)
    return seen


@pytest.mark.parametrize("seed", [1, 2, 3])
@pytest.mark.parametrize("producers", [False, True])
@pytest.mark.parametrize("io_buffer", [1024, 8192, 1 << 20])
def test_a_round_with_holes_cleans_as_one_reading_every_batch(make_log, clock, record_kernels, holes_everywhere,
                                                             seed, producers, io_buffer):
    results = {}
    for name, k in (("this", record_kernels), ("pure", fastpath.pure_kernels())):
        log = _log(lambda name=name, **cfg: make_log(topic=name, **cfg), seed, producers=producers)
        cfg = CleanerConfig(io_buffer_size=io_buffer)
        now = clock.milliseconds()
        o = cleanable_offsets(log, None, now)
        ltc = LogToClean(log.topic_partition, log, o.first_dirty_offset, o.first_uncleanable_dirty_offset)
        end, stats = Cleaner(CompactOffsetMap(1 << 20, k), cfg).do_clean(ltc, now)
        d = stats.as_dict()
        results[name] = (end, _files(log), {key: d[key] for key in (
            "bytes_read", "bytes_written", "records_read", "records_retained", "batches_copied", "batches_rebuilt",
            "batches_emptied", "batches_deleted", "map_bytes_read", "map_records_read")})
        log.close()
    assert results["this"] == results["pure"]
    if record_kernels is fastpath.compiled_kernels():
        assert holes_everywhere, "no batch run was skipped"
    else:
        assert not holes_everywhere


def _notes(seg) -> tuple[bytearray, list[tuple[int, int, int, int]]]:  # type: ignore[no-untyped-def]
    """Notes of every batch of ``seg`` as the map pass writes them, and (position, size) per batch."""
    notes = bytearray()
    sizes = []
    for pos, b in seg.batches():
        notes += NOTE.pack(pos, b.size_in_bytes, b.base_offset, b.last_offset, 2 * b.records_count)
        sizes.append((pos, b.size_in_bytes, b.base_offset, b.last_offset))
    return notes, sizes


@pytest.mark.parametrize("min_buffer", [64, 5000, 1 << 20])
@pytest.mark.parametrize("chunk", [1, 3000, 20_000, 1 << 18])
@pytest.mark.parametrize("seed", [1, 2])
def test_a_reader_with_holes_keeps_the_reference_chunks(make_log, record_kernels, monkeypatch, min_buffer, chunk, seed):
    log = _log(make_log, seed)
    seg = log.all_segments()[0]
    monkeypatch.setattr(fast_reader, "MIN_BUFFER", min_buffer)
    notes, batches = _notes(seg)
    rnd = random.Random(seed)
    for start_index in (0, 3):
        start = batches[start_index][0]
        # random runs of consecutive batches as holes
        holes = []
        i = start_index
        while i < len(batches):
            n = rnd.randrange(1, 12)
            if rnd.random() < 0.5:
                run = batches[i:i + n]
                holes.append((run[0][0], run[-1][0] + run[-1][1], i, len(run), 0, run[-1][3]))
            i += n + rnd.randrange(0, 3)
        ref_chunk = {}  # batch position -> index of its reference chunk
        for c, (bs, _size) in enumerate(_chunks(seg, start, chunk)):
            for b in bs:
                ref_chunk[b.base_offset] = c
        in_hole = {pos for h in holes for pos, _s, _b, _l in batches[h[2]:h[2] + h[3]]}
        reader = ChunkReader(seg, start, record_kernels, chunk, holes=holes, notes=notes)
        seen_batches: list[int] = []
        read_chunks: list[set[int]] = []
        for buf, pieces in reader.pieces():
            here: set[int] = set()
            for lo, hi, base, hole in pieces:
                if hole >= 0:
                    h = reader.holes[hole]
                    seen_batches += [pos for pos, _s, _b, _l in batches[h[2]:h[2] + h[3]]]
                    continue
                p = lo
                while p < hi:
                    size = int.from_bytes(buf[p + 8:p + 12], "big") + 12
                    assert base + p not in in_hole
                    seen_batches.append(base + p)
                    here.add(ref_chunk[int.from_bytes(buf[p:p + 8], "big")])
                    p += size
            if here:
                read_chunks.append(here)
        # every batch once, in order, read or skipped
        assert seen_batches == [pos for pos, _s, _b, _l in batches[start_index:]]
        # the batches read together are exactly one reference chunk's
        assert all(len(c) == 1 for c in read_chunks)
        assert len({next(iter(c)) for c in read_chunks}) == len(read_chunks)


@pytest.mark.parametrize("kind", DAMAGE)
def test_damage_outside_the_holes_raises_the_reference_error(make_log, record_kernels, kind):
    log = _log(make_log, 4)
    seg = log.all_segments()[0]
    notes, batches = _notes(seg)
    n = len(batches)
    holes = [(batches[i][0], batches[i + 3][0] + batches[i + 3][1], i, 4, 0, batches[i + 3][3])
             for i in (2, n // 2 - 6)]
    for index in (0, n // 2, n - 1):
        original = seg.log_path.read_bytes()
        _damage(seg.log_path, kind, index)
        seg.size = seg.log_path.stat().st_size
        for chunk in (1, 3000, 1 << 18):
            ref = _error(lambda chunk=chunk: list(_chunks(seg, 0, chunk)))
            with_holes = [h for h in holes if h[1] <= seg.size]
            got = _error(lambda chunk=chunk, hs=with_holes: list(
                ChunkReader(seg, 0, record_kernels, chunk, holes=hs, notes=notes).pieces()))
            assert (str(got), got.source, got.position) == (str(ref), ref.source, ref.position), (kind, index)
        seg.log_path.write_bytes(original)
        seg.size = len(original)


def test_notes_that_do_not_match_the_bytes_are_ignored(make_log, record_kernels):
    """A hole whose first batch would not start where a batch ends is dropped, with every
    later one: the reader then reads the bytes (it never trusts notes over the file)."""
    log = _log(make_log, 5)
    seg = log.all_segments()[0]
    notes, batches = _notes(seg)
    bad = (batches[4][0] + 10, batches[6][0], 4, 2, 0, batches[5][3])  # starts inside batch 4
    reader = ChunkReader(seg, 0, record_kernels, 1 << 18, holes=[bad], notes=notes)
    positions = []
    for buf, pieces in reader.pieces():
        for lo, hi, base, hole in pieces:
            assert hole < 0
            p = lo
            while p < hi:
                positions.append(base + p)
                p += int.from_bytes(buf[p + 8:p + 12], "big") + 12
    assert positions == [pos for pos, _s, _b, _l in batches]


@pytest.mark.parametrize("record_kernels", ["compiled"], indirect=True)  # a function of the compiled kernels only
def test_superseded_runs_follow_the_kernels_decisions(make_log, record_kernels, monkeypatch):
    """The runs the compiled kernels report are batches the rewriting pass deletes whole: never
    a producer's last batch, the batch at the round's upper bound, or one with a live record."""
    k = record_kernels
    monkeypatch.setattr(fast_cleaner, "NOTE_MIN_BYTES", 0)
    log = _log(make_log, 6, producers=True)
    seg = log.all_segments()[0]
    omap = CompactOffsetMap(1 << 20, k)
    build_offset_map_from_segments([seg], 0, 10**9, omap, CleanedTransactionMetadata(), max_entries=10**5)
    notes = omap.batch_notes(seg)
    assert notes is not None
    latest = omap.latest_offset
    batches = {b.base_offset: b for _p, b in seg.batches()}
    live = {}
    for b in batches.values():
        for r in b.records():
            live[r.key] = r.offset
    upper = seg.read_next_offset()
    specials = [b.last_offset for b in batches.values() if b.producer_id >= 0]
    runs = k.superseded_runs(omap.table, notes, latest, upper, array("q", sorted(specials)), 1)
    assert runs
    skipped = 0
    for start, end, first, n, records, last in runs:
        got = [NOTE.unpack_from(notes, (first + i) * NOTE.size) for i in range(n)]
        assert got[0][0] == start and got[-1][0] + got[-1][1] == end and max(g[3] for g in got) == last
        assert sum(g[4] >> 1 for g in got) == records
        for _pos, _size, base, _last, _c in got:
            b = batches[base]
            assert b.producer_id < 0 and not b.is_transactional and not b.is_control
            assert all(r.key is not None and live[r.key] > r.offset for r in b.records())
            skipped += 1
    assert skipped > 5
    # the same with every producer batch special and the upper bound at the end of run 0: those go
    first_run_last = runs[0][5]
    runs2 = k.superseded_runs(omap.table, notes, latest, first_run_last + 1, array("q", sorted(specials)), 1)
    assert all(r[5] != first_run_last for r in runs2)
