"""Format bench: LocalLog append and read throughput, 1M records (16 B keys, 100 B values).

Appends pre-built producer batches of 1000 records (what a produce request carries)
through LocalLog.append_batches (validation, CRC check, offset assignment, rolls),
then reads everything back decoding every record. Runs uncompressed and lz4, next to
kafka-python's own batch build/parse in the same run.
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

from bench.common import Timer, peak_rss_mb, quick, write_result
from log.clock import SystemClock
from log.config import LogConfig
from log.fetch import records_from_batches
from log.local_log import LocalLog
from log.record import CompressionType, RecordBatchBuilder

BATCH = 1000


def _payload(n: int) -> list[tuple[bytes, bytes]]:
    rnd = os.urandom(100)
    return [(f"key-{i % 100_000:012d}".encode()[:16], rnd[:92] + i.to_bytes(8, "big")) for i in range(n)]


def _batches(records: list[tuple[bytes, bytes]], codec: CompressionType) -> list[bytes]:
    out = []
    for s in range(0, len(records), BATCH):
        b = RecordBatchBuilder(0, compression=codec)
        for j, (k, v) in enumerate(records[s:s + BATCH]):
            b.append(j, 1_700_000_000_000 + s + j, k, v)
        out.append(b.build())
    return out


def _kafka_python(records: list[tuple[bytes, bytes]], codec: CompressionType) -> dict[str, float]:
    from kafka.record.default_records import DefaultRecordBatch, DefaultRecordBatchBuilder

    kp_codec = {CompressionType.NONE: 0, CompressionType.LZ4: DefaultRecordBatch.CODEC_LZ4}[codec]
    built = []
    with Timer() as tb:
        for s in range(0, len(records), BATCH):
            b = DefaultRecordBatchBuilder(magic=2, compression_type=kp_codec, is_transactional=False,
                                          producer_id=-1, producer_epoch=-1, base_sequence=-1,
                                          batch_size=1 << 30)
            for j, (k, v) in enumerate(records[s:s + BATCH]):
                b.append(j, timestamp=1_700_000_000_000 + s + j, key=k, value=v, headers=[])
            built.append(bytes(b.build()))
    n = 0
    with Timer() as tp:
        for data in built:
            for _r in DefaultRecordBatch(data):
                n += 1
    assert n == len(records)
    return {"kafka_python_build_records_per_s": len(records) / tb.seconds,
            "kafka_python_parse_records_per_s": len(records) / tp.seconds}


def run(n: int, codec: CompressionType) -> dict[str, float]:
    records = _payload(n)
    batches = _batches(records, codec)
    raw_mb = sum(len(k) + len(v) for k, v in records) / 1e6
    with tempfile.TemporaryDirectory() as d:
        log = LocalLog(Path(d) / "bench-0", LogConfig.from_dict({"segment.bytes": 64 << 20}), clock=SystemClock())
        with Timer() as ta:
            for b in batches:
                log.append_batches(b)
        log.flush()
        disk_mb = log.size_in_bytes() / 1e6
        count = 0
        with Timer() as tr:
            offset = 0
            while offset < log.log_end_offset:
                fetched = records_from_batches(log.read(offset, max_bytes=8 << 20), offset, max_records=10**9)
                count += len(fetched.records)
                offset = fetched.next_offset
        assert count == n
        log.close()
    out = {
        "records": n, "payload_mb": round(raw_mb, 2), "on_disk_mb": round(disk_mb, 2),
        "append_records_per_s": n / ta.seconds, "append_mb_per_s": raw_mb / ta.seconds,
        "read_records_per_s": n / tr.seconds, "read_mb_per_s": raw_mb / tr.seconds,
    }
    out.update(_kafka_python(records, codec))
    return {k: (round(v, 1) if isinstance(v, float) else v) for k, v in out.items()}


def main() -> None:
    n = 100_000 if quick() else 1_000_000
    results = {c.name.lower(): run(n, c) for c in (CompressionType.NONE, CompressionType.LZ4)}
    write_result("format", {"description": __doc__.strip().splitlines()[0], "results": results,
                            "peak_rss_mb": round(peak_rss_mb(), 1)})


if __name__ == "__main__":
    main()
