"""Cleaner throughput in wall time: 1M records / 100k keys / 100-byte values, uncompressed and lz4.

One round of what ``tiercompact clean`` runs (LogCleaner with its production map, the 16-byte-slot
CompactOffsetMap over the compiled record kernels). Writes bench/results/cleaner.json with, per
codec: cleaning MB/s and records/s (source bytes and records over the round's elapsed wall time),
the offset-map phase's share, and next to it the ceiling measured in the same run: the time to
merely read every batch of the same segments and check its CRC. Also the offset map's bytes per
slot and the process's peak RSS. ``bench fastpath`` measures the same round per CPU-second against
a fuller ceiling; this one is the wall-clock view.

Run: .venv/bin/python bench/bench_cleaner.py [--records N] [--keys K]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import random
import resource
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from cleaner.config import CleanerConfig  # noqa: E402
from cleaner.log_cleaner import clean_partition  # noqa: E402
from cleaner.offset_map import COMPACT_ENTRY_SIZE  # noqa: E402
from log.log_manager import LogManager  # noqa: E402
from log.record import CompressionType, RecordBatchBuilder  # noqa: E402
from log.types import TopicPartition  # noqa: E402

BATCH = 1000


def build(lm: LogManager, topic: str, codec: CompressionType, records: int, keys: int, value_size: int) -> float:
    lm.create_topic(topic, 1, {"segment.bytes": 64 * 1024 * 1024, "max.message.bytes": 8 * 1024 * 1024})
    log = lm.get_log(TopicPartition(topic, 0))
    rnd = random.Random(42)
    value = bytes(rnd.getrandbits(8) for _ in range(value_size))
    t0 = time.perf_counter()
    ts = lm.clock.milliseconds()  # recent: an old first timestamp would force a roll per batch
    for base in range(0, records, BATCH):
        b = RecordBatchBuilder(0, compression=codec)
        for i in range(min(BATCH, records - base)):
            b.append(i, ts, b"key-%08d" % rnd.randrange(keys), value)
        log.append_batches(b.build())
    log.roll()
    log.flush()
    return time.perf_counter() - t0


def read_and_crc(lm: LogManager, topic: str) -> tuple[float, int, int]:
    log = lm.get_log(TopicPartition(topic, 0))
    t0 = time.perf_counter()
    nbytes = nrec = 0
    for seg in log.all_segments():
        for _pos, batch in seg.batches():
            batch.ensure_valid()
            nbytes += batch.size_in_bytes
            nrec += batch.records_count
    return time.perf_counter() - t0, nbytes, nrec


def main(argv: list[str] | None = None) -> None:
    """``argv``: this bench's own options (``python -m bench`` passes none)."""
    ap = argparse.ArgumentParser()
    ap.add_argument("--records", type=int, default=1_000_000)
    ap.add_argument("--keys", type=int, default=100_000)
    ap.add_argument("--value-size", type=int, default=100)
    ap.add_argument("--out", default=str(Path(__file__).resolve().parent / "results" / "cleaner.json"))
    args = ap.parse_args(argv if argv is not None else [])
    cfg = CleanerConfig()  # production defaults: 128 MiB dedupe buffer, load factor 0.9
    results = {}
    with tempfile.TemporaryDirectory() as tmp:
        lm = LogManager(Path(tmp))
        for codec in (CompressionType.NONE, CompressionType.LZ4):
            topic = f"bench-{codec.name.lower()}"
            build_s = build(lm, topic, codec, args.records, args.keys, args.value_size)
            crc_s, nbytes, nrec = read_and_crc(lm, topic)
            stats = clean_partition(lm, TopicPartition(topic, 0), cfg)
            d = stats.as_dict()
            secs = stats.elapsed_secs
            results[codec.name.lower()] = {
                "records": nrec,
                "source_bytes": nbytes,
                "build_secs": round(build_s, 3),
                "clean_secs": round(secs, 3),
                "map_phase_secs": round(stats.elapsed_index_secs, 3),
                "clean_mb_per_sec": round(d["bytes_read"] / secs / 1e6, 2),
                "clean_records_per_sec": round(d["records_read"] / secs),
                "bytes_written": d["bytes_written"],
                "records_retained": d["records_retained"],
                "buffer_utilization": round(stats.buffer_utilization, 5),
                "ceiling_read_crc_secs": round(crc_s, 3),
                "ceiling_read_crc_mb_per_sec": round(nbytes / crc_s / 1e6, 2),
                "clean_vs_ceiling": round(crc_s / secs, 4),
            }
            print(codec.name, json.dumps(results[codec.name.lower()]), flush=True)
        lm.close()
    out = {
        "benchmark": "cleaner",
        "workload": {"records": args.records, "keys": args.keys, "value_bytes": args.value_size,
                     "records_per_batch": BATCH, "segment_bytes": 64 * 1024 * 1024},
        "cleaner_config": {"dedupe_buffer_size": cfg.dedupe_buffer_size, "load_factor": cfg.load_factor,
                           "io_buffer_size": cfg.io_buffer_size, "threads": 1},
        "offset_map": "CompactOffsetMap",
        "offset_map_bytes_per_entry": COMPACT_ENTRY_SIZE,
        "results": results,
        "peak_rss_mb": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1),
        "load_average_1_5_15": [round(x, 2) for x in os.getloadavg()],
        "cpus": os.cpu_count(),
        "python": platform.python_version(),
        "machine": platform.machine(),
        "notes": "One round per codec with the production map (CompactOffsetMap, 16-byte slots, growing "
                 "with the keys up to the 128 MiB dedupe buffer; RSS includes what it touched). MB/s = source bytes read by the round / round elapsed. The ceiling "
                 "is reading every batch and checking its CRC32C, no decoding.",
    }
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(out, indent=2) + "\n")
    print(json.dumps(out, indent=2))


if __name__ == "__main__":
    main(sys.argv[1:])
