"""Record batch v2 build and parse throughput: tiercompact's log.record vs kafka-python's kafka.record.

1M records (16-byte keys, 100-byte values) in batches of 1000, uncompressed and lz4. For each
implementation: build (append + build per batch), full parse (every field of every record),
and for tiercompact also the cleaner's key/offset fast path. MB/s counts the batch bytes
(compressed size for lz4), so build and parse figures are comparable. Writes
bench/results/format_records.json.

    .venv/bin/python bench/bench_format_records.py [--records N] [--batch N]
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import platform
import sys
import time
from collections.abc import Iterator
from pathlib import Path

from kafka.record.default_records import DefaultRecordBatch, DefaultRecordBatchBuilder

from log.record import CompressionType, RecordBatch, RecordBatchBuilder

KEY_SIZE = 16
VALUE_SIZE = 100
BASE_TS = 1_700_000_000_000


def make_rows(n: int) -> list[tuple[int, bytes, bytes]]:
    rnd = os.urandom(n * 8)
    rows = []
    for i in range(n):
        key = b"key-%012d" % (i % 100_000)  # 16 bytes, repeating keys like a compacted topic
        # half random, half text: compressible roughly like real payloads
        value = rnd[i * 8 : i * 8 + 8] * 6 + (b"value-%010d" % i) * 3 + b"----"
        rows.append((BASE_TS + i, key, value[:VALUE_SIZE]))
    assert len(rows[0][1]) == KEY_SIZE and len(rows[0][2]) == VALUE_SIZE
    return rows


def build_ours(rows, batch_size: int, codec: CompressionType) -> list[bytes]:
    out = []
    for start in range(0, len(rows), batch_size):
        b = RecordBatchBuilder(start, compression=codec)
        append = b.append
        for i, (ts, key, value) in enumerate(rows[start : start + batch_size], start):
            append(i, ts, key, value)
        out.append(b.build())
    return out


def build_kafka_python(rows, batch_size: int, codec: CompressionType) -> list[bytes]:
    out = []
    for start in range(0, len(rows), batch_size):
        b = DefaultRecordBatchBuilder(
            magic=2,
            compression_type=int(codec),
            is_transactional=False,
            producer_id=-1,
            producer_epoch=-1,
            base_sequence=-1,
            batch_size=1 << 30,
        )
        append = b.append
        for i, (ts, key, value) in enumerate(rows[start : start + batch_size]):
            append(i, ts, key, value, [])
        out.append(bytes(b.build()))
    return out


def _valid_batches(batches: list[bytes]) -> Iterator[RecordBatch]:
    """Each batch parsed and CRC-checked, as a reader of ours sees it."""
    for data in batches:
        batch = RecordBatch(data)
        batch.ensure_valid()
        yield batch


def parse_ours(batches: list[bytes]) -> int:
    n = 0
    for batch in _valid_batches(batches):
        for r in batch.records():
            n += 1
            _ = r.value
    return n


def key_offsets_ours(batches: list[bytes]) -> int:
    n = 0
    for batch in _valid_batches(batches):
        for _offset, _key, _has_value in batch.iter_key_offsets():
            n += 1
    return n


def parse_kafka_python(batches: list[bytes]) -> int:
    n = 0
    for data in batches:
        batch = DefaultRecordBatch(data)
        assert batch.validate_crc()
        for r in batch:
            n += 1
            _ = r.value
    return n


def timed(fn, *args):
    t0 = time.perf_counter()
    result = fn(*args)
    return result, time.perf_counter() - t0


def main(argv: list[str] | None = None) -> None:
    """``argv``: this bench's own options (``python -m bench`` passes none)."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--records", type=int, default=1_000_000)
    ap.add_argument("--batch", type=int, default=1000)
    ap.add_argument("--out", default=str(Path(__file__).parent / "results" / "format_records.json"))
    args = ap.parse_args(argv if argv is not None else [])
    rows = make_rows(args.records)
    # the 1M input rows are long-lived: keep the cyclic GC from rescanning them in every timing
    gc.collect()
    gc.freeze()
    n = args.records
    results = []
    for codec in (CompressionType.NONE, CompressionType.LZ4):
        for impl, build in (("tiercompact", build_ours), ("kafka-python", build_kafka_python)):
            batches, secs = timed(build, rows, args.batch, codec)
            total = sum(len(b) for b in batches)
            results.append(
                {
                    "impl": impl,
                    "codec": codec.name_lower,
                    "op": "build",
                    "records": n,
                    "bytes": total,
                    "seconds": secs,
                }
            )
            parsers = (
                [("parse", parse_ours), ("key_offsets", key_offsets_ours)]
                if impl == "tiercompact"
                else [("parse", parse_kafka_python)]
            )
            for op, parse in parsers:
                count, secs = timed(parse, batches)
                assert count == n, (impl, op, count)
                results.append(
                    {
                        "impl": impl,
                        "codec": codec.name_lower,
                        "op": op,
                        "records": n,
                        "bytes": total,
                        "seconds": secs,
                    }
                )
    for r in results:
        r["records_per_s"] = round(r["records"] / r["seconds"])
        r["mb_per_s"] = round(r["bytes"] / r["seconds"] / 1e6, 1)
        r["seconds"] = round(r["seconds"], 3)
        print(
            f"{r['impl']:>12} {r['codec']:>5} {r['op']:>11}: {r['records_per_s']:>10,} records/s"
            f" {r['mb_per_s']:>8} MB/s  ({r['seconds']} s, {r['bytes']:,} batch bytes)"
        )
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(
        json.dumps(
            {
                "bench": "format_records",
                "records": n,
                "key_size": KEY_SIZE,
                "value_size": VALUE_SIZE,
                "batch_records": args.batch,
                "python": platform.python_version(),
                "machine": platform.machine(),
                "cpus": os.cpu_count(),
                "results": results,
            },
            indent=2,
        )
        + "\n"
    )
    print(f"wrote {out}")


if __name__ == "__main__":
    main(sys.argv[1:])
