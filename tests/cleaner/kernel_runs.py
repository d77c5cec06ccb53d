"""One local cleaning pass over a single segment with chosen record kernels, for the tests that
compare the compiled kernels with the pure-Python ones on hand-made segments."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from cleaner.cleaner import CleanContext, build_offset_map_from_segments, clean_into
from cleaner.offset_map import CompactOffsetMap
from cleaner.stats import CleanerStats
from cleaner.transactions import CleanedTransactionMetadata
from log.segment import LogSegment


def map_then_clean(kernels: Any, seg: LogSegment, out: Path, *, start: int = 0,
                   max_entries: int = 1000) -> tuple[dict[str, bytes], dict[str, Any], tuple[str, str] | None,
                                                     CompactOffsetMap]:
    """Map ``seg`` from ``start`` then clean it into a new segment under ``out`` with ``kernels``
    (tiny read buffers, every record's deadline passed). Returns the output files' bytes, the
    stats without timings, the error either pass raised (type name, message) and the map; ``seg``
    is closed."""
    omap = CompactOffsetMap(16 * 64, kernels)
    stats = CleanerStats()
    out.mkdir()
    dest = LogSegment(out, 0, create=True, index_interval_bytes=64)
    error = None
    try:
        build_offset_map_from_segments([seg], start, 10**6, omap, CleanedTransactionMetadata(),
                                       max_entries=max_entries, stats=stats, io_buffer_size=1)
        ctx = CleanContext(now_ms=10**9, delete_retention_ms=0, upper_bound_of_round=10**6, active_producers={},
                           txn_metadata=CleanedTransactionMetadata(), io_buffer_size=1)
        clean_into(seg, dest, omap, ctx, stats)
    except Exception as e:  # both engines must fail alike
        error = (type(e).__name__, str(e))
    dest.close_writer()
    files = {p.name: p.read_bytes() for p in out.iterdir()}
    seg.close()
    dest.close()
    counts = {k: v for k, v in stats.as_dict().items() if not k.endswith("elapsed_ms")}
    return files, counts, error, omap
