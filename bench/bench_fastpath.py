"""The compiled record kernels: local cleaning per CPU-second against its ceiling.

For 100-byte and 1-KiB values, uncompressed, lz4, zstd and gzip, one child process per workload
(so peak RSS is the workload's own) builds a log of 1000-record batches with 16-byte keys over
100k distinct keys, then measures over the same bytes:

* ``ceiling``: read every batch, check its CRC-32C, decompress it once and hash every key once
  with the round's keyed SipHash (``hash_keys``): the least any cleaning pass must do;
* ``compiled``: one LogCleaner round (CompactOffsetMap, compiled kernels);
* for 100-byte values also ``reference`` (today's pure-Python path: SkimpyOffsetMap, decode.py,
  the builder) and ``pure`` (the pure-Python kernels, the fallback without a compiler), each on
  a copy of the same log.

Times are CPU seconds of the process (``time.process_time``): this machine's 2 cores are shared
with other jobs, so wall time mostly measures the neighbours; wall seconds are recorded too.
MB/s = source bytes the round cleaned (its ``bytes_read``, which counts the runs of wholly
superseded batches the compiled rewriting pass deletes without reading them again) / CPU
seconds. Before the timed rounds each engine cleans a
log of the same workload once, untimed: the first round of a process pays one-time costs
(lazy imports, the allocator's first page faults on MiB-sized read buffers) that made a single
timed round up to twice as slow as the next (``warm_up_rounds`` in the JSON). The compiled
engine warms up on a copy of the whole log, so its rewritten segment goes to page-cache memory
the warm-up already used: on this VM, writing into guest memory the page cache had not used
recently cost ~2 ms of CPU per MB against ~0.23 ms/MB for recycled pages (the hypervisor backs
fresh guest pages on first touch), which doubled the 1 KiB round's CPU after building the log;
a running node recycles its page cache. The other engines warm up on a small log.

The round runs as a node runs it: the LogManager has the node's deletion scheduler
(``log.scheduler.Scheduler``), so the swap renames the replaced segment to ``.deleted`` and
schedules its removal after ``file.delete.delay.ms`` (60 s by default) on the scheduler's
thread, instead of unlinking it inside the round (which a LogManager without a scheduler does:
~12 ms of CPU for the 126 MB segment of the 100 B rows, the kernel freeing its page cache). The
file is removed after the measurement with the copy. Nothing else is left out of the timed
round (map pass, rewriting pass, output writes and fsyncs, swap, checkpoint).
``BENCH_QUICK=1`` runs a tenth of the records and writes to bench/tmp/results (never over the
committed results).

Run: .venv/bin/python -m bench fastpath
"""

from __future__ import annotations

import hashlib
import json
import os
import random
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.common import quick, write_result  # noqa: E402

BATCH = 1000
KEYS = 100_000
CODECS = ("none", "lz4", "zstd", "gzip")
WORKLOADS = [(100, 1_000_000), (1024, 200_000)]
VALUE_POOL = 4096


def _build(data_dir: Path, codec_name: str, records: int, value_size: int) -> None:
    from log.log_manager import LogManager
    from log.record import CompressionType, RecordBatchBuilder
    from log.types import TopicPartition

    codec = CompressionType.from_name(codec_name)
    lm = LogManager(data_dir)
    lm.create_topic("t", 1, {"segment.bytes": 256 * 1024 * 1024, "max.message.bytes": 16 * 1024 * 1024})
    log = lm.get_log(TopicPartition("t", 0))
    rnd = random.Random(42)
    # random values (a pool, so building is quick): codecs gain little, as on encrypted or packed data
    pool = [rnd.randbytes(value_size) for _ in range(VALUE_POOL)]
    ts = lm.clock.milliseconds()
    for base in range(0, records, BATCH):
        b = RecordBatchBuilder(0, compression=codec)
        for i in range(min(BATCH, records - base)):
            b.append(i, ts, b"key-%012d" % rnd.randrange(KEYS), pool[rnd.randrange(VALUE_POOL)])
        log.append_batches(b.build())
    log.roll()
    log.flush()
    lm.close()


def _ceiling(data_dir: Path) -> dict[str, Any]:
    from cleaner.kernels.fastpath import kernels
    from log.log_manager import LogManager
    from log.types import TopicPartition

    k = kernels()
    lm = LogManager(data_dir)
    log = lm.get_log(TopicPartition("t", 0))
    seed = os.urandom(16)
    c0, w0 = time.process_time(), time.perf_counter()
    nbytes = nrec = nkeys = 0
    for seg in log.all_segments():
        for _pos, batch in seg.batches():
            batch.ensure_valid()
            data = batch._records_section()
            _st, n, _acc = k.hash_keys(data, batch.records_count, batch.base_offset, seed)
            nkeys += n
            nbytes += batch.size_in_bytes
            nrec += batch.records_count
    cpu, wall = time.process_time() - c0, time.perf_counter() - w0
    lm.close()
    return {"cpu_s": round(cpu, 3), "wall_s": round(wall, 3), "source_bytes": nbytes, "records": nrec,
            "mb_per_cpu_s": round(nbytes / cpu / 1e6, 1), "records_per_cpu_s": round(nrec / cpu)}


def _clean(data_dir: Path, engine: str) -> dict[str, Any]:
    from cleaner.config import CleanerConfig
    from cleaner.kernels import fastpath
    from cleaner.log_cleaner import LogCleaner
    from cleaner.offset_map import CompactOffsetMap, SkimpyOffsetMap
    from log.log_manager import LogManager
    from log.scheduler import Scheduler
    from log.types import TopicPartition

    cfg = CleanerConfig()  # production defaults: 128 MiB dedupe buffer, load factor 0.9
    if engine == "pure":
        fastpath.use_kernels(fastpath.pure_kernels())
    # the node's deferred deletion of replaced segments (file.delete.delay.ms): see the docstring
    scheduler = Scheduler(name="bench-delete-scheduler")
    lm = LogManager(data_dir, scheduler=scheduler)
    lc = LogCleaner(cfg, lm)
    maps: list[Any] = []

    def new_map(*, tiered: bool = False) -> Any:
        m = SkimpyOffsetMap(cfg.dedupe_buffer_per_thread) if engine == "reference" else \
            CompactOffsetMap(cfg.dedupe_buffer_per_thread)
        maps.append(m)
        return m

    lc._new_map = new_map  # type: ignore[method-assign]
    c0, w0 = time.process_time(), time.perf_counter()
    stats = lc.clean_now(TopicPartition("t", 0))
    cpu, wall = time.process_time() - c0, time.perf_counter() - w0
    digest = hashlib.sha256()
    for seg in lm.get_log(TopicPartition("t", 0)).all_segments():
        with open(seg.log_path, "rb") as f:  # in chunks: a whole-file read would show in peak RSS
            while chunk := f.read(1 << 20):
                digest.update(chunk)
    lm.close()
    scheduler.shutdown()  # drops the pending deletion: the caller removes the directory
    m = maps[-1]
    d = stats.as_dict()
    return {"cpu_s": round(cpu, 3), "wall_s": round(wall, 3), "map_phase_wall_s": round(stats.elapsed_index_secs, 3),
            "mb_per_cpu_s": round(d["bytes_read"] / cpu / 1e6, 1),
            "records_per_cpu_s": round(d["records_read"] / cpu),
            "bytes_read": d["bytes_read"], "records_read": d["records_read"], "bytes_written": d["bytes_written"],
            "records_retained": d["records_retained"], "batches_copied": d["batches_copied"],
            "batches_rebuilt": d["batches_rebuilt"], "map_keys": m.size, "map_slots": m.slots,
            "map_bytes_allocated": m.memory_bytes,
            # CompactOffsetMap's bitmap of the offsets mapped (2 bits each), kept for the rewriting pass
            "map_bitmap_bytes": int(getattr(getattr(m, "table", None), "bitmap_bytes", 0)),
            "output_sha256": digest.hexdigest()}


def _one(value_size: int, records: int, codec: str) -> dict[str, Any]:
    """One workload, in this (child) process."""
    from cleaner.kernels import fastpath

    out: dict[str, Any] = {"value_bytes": value_size, "records": records, "codec": codec,
                           "load_average_1min_at_start": round(os.getloadavg()[0], 2)}
    with tempfile.TemporaryDirectory() as tmp:
        src = Path(tmp) / "src"
        t0 = time.perf_counter()
        _build(src, codec, records, value_size)
        out["build_wall_s"] = round(time.perf_counter() - t0, 1)
        engines = ["compiled"] + (["reference", "pure"] if value_size == 100 and codec in ("none", "lz4") else [])
        warm = Path(tmp) / "warm"
        _build(warm, codec, 5 * BATCH, value_size)
        for e in engines:  # one untimed round per engine (see the module docstring)
            # the compiled engine warms up on a copy of the whole log: see the docstring (the
            # page cache's first use of fresh guest memory)
            shutil.copytree(src if e == "compiled" else warm, Path(tmp) / f"warm-{e}")
            _clean(Path(tmp) / f"warm-{e}", e)
            fastpath.use_kernels(None)  # "pure" switched the process's kernels: decide again
            shutil.rmtree(Path(tmp) / f"warm-{e}")
        out["warm_up_rounds"] = {"records": {e: records if e == "compiled" else 5 * BATCH for e in engines},
                                 "engines": engines}
        copies = {}
        for e in engines:
            copies[e] = Path(tmp) / e
            shutil.copytree(src, copies[e])
        out["ceiling"] = _ceiling(src)
        for e in engines:
            out[e] = _clean(copies[e], e)
            shutil.rmtree(copies[e])
    c = out["compiled"]
    out["compiled_vs_ceiling"] = round(out["ceiling"]["cpu_s"] / c["cpu_s"], 3)
    if "reference" in out:
        out["speedup_vs_reference"] = round(out["reference"]["cpu_s"] / c["cpu_s"], 2)
        out["identical_output"] = len({out[e]["output_sha256"] for e in engines}) == 1
    out["peak_rss_mb"] = round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1)
    return out


def _key_hash_costs(n: int) -> dict[str, float]:
    """CPU ns per 16-byte key: SipHash-2-4-128 inside the compiled scan (``hash_keys``, no Python
    per key), and per Python call for SipHash (compiled) and MD5 (CPython's _md5, as
    SkimpyOffsetMap and the pure kernels use it)."""
    from cleaner.kernels.fastpath import compiled_kernels
    from log.record import RecordBatchBuilder
    from log.record.batch import RECORDS_OFFSET

    try:
        from _md5 import md5  # type: ignore[import-not-found]
    except ImportError:  # pragma: no cover
        md5 = hashlib.md5
    k: Any = compiled_kernels()
    keys = [b"key-%012d" % i for i in range(n)]
    seed = os.urandom(16)
    out: dict[str, float] = {}
    sections = []
    for base in range(0, n, BATCH):
        b = RecordBatchBuilder(0)
        for i, key in enumerate(keys[base:base + BATCH]):
            b.append(i, 0, key, b"")
        sections.append((b.build()[RECORDS_OFFSET:], len(keys[base:base + BATCH])))
    c0 = time.process_time()
    for data, count in sections:
        k.hash_keys(data, count, 0, seed)
    out["siphash128_in_compiled_scan"] = round((time.process_time() - c0) / n * 1e9, 1)
    c0 = time.process_time()
    for key in keys:
        k.siphash128(key, seed)
    out["siphash128_python_call"] = round((time.process_time() - c0) / n * 1e9, 1)
    c0 = time.process_time()
    for key in keys:
        md5(key).digest()
    out["md5_python_call"] = round((time.process_time() - c0) / n * 1e9, 1)
    return out


#: the compressed-workload figures before the compiled kernels (100-byte values, MB per CPU-s)
OLD_COMPRESSED_MB_S = {"gzip": 16, "zstd": 22, "lz4": 31}


def _targets(results: list[dict[str, Any]]) -> dict[str, Any]:
    """The kernels' targets against this run's figures (compiled kernels)."""
    by = {(r["value_bytes"], r["codec"]): r for r in results}
    out: dict[str, Any] = {}
    small = by.get((100, "none"))
    if small:
        c = small["compiled"]
        out["100 B uncompressed >= 150 MB/CPU-s"] = {"value": c["mb_per_cpu_s"], "met": c["mb_per_cpu_s"] >= 150}
        out["100 B uncompressed >= 1.5M records/CPU-s"] = {"value": c["records_per_cpu_s"],
                                                 "met": c["records_per_cpu_s"] >= 1_500_000}
        out["100 B uncompressed >= half the ceiling (ceiling CPU / compiled CPU)"] = {"value": small["compiled_vs_ceiling"],
                                           "met": small["compiled_vs_ceiling"] >= 0.5}
    big = by.get((1024, "none"))
    if big:
        v = big["compiled"]["mb_per_cpu_s"]
        out["1 KiB uncompressed >= 1,000 MB/CPU-s"] = {"value": v, "met": v >= 1000}
    for codec, old in OLD_COMPRESSED_MB_S.items():
        r = by.get((100, codec))
        if r:
            v = r["compiled"]["mb_per_cpu_s"]
            out[f"100 B {codec} >= 3x the old {old} MB/CPU-s"] = {"value": v, "times_old": round(v / old, 1), "met": v >= 3 * old}
    return out


def main() -> None:
    from cleaner.config import CleanerConfig
    from cleaner.kernels.fastpath import compiled_kernels
    from cleaner.offset_map import COMPACT_ENTRY_SIZE, ENTRY_SIZE

    scale = 10 if quick() else 1
    results = []
    for value_size, records in WORKLOADS:
        for codec in CODECS:
            arg = json.dumps([value_size, records // scale, codec])
            p = subprocess.run([sys.executable, "-m", "bench.bench_fastpath", "--one", arg], check=True,
                               capture_output=True, text=True, cwd=Path(__file__).resolve().parent.parent)
            r = json.loads(p.stdout.strip().splitlines()[-1])
            print(json.dumps(r), flush=True)
            results.append(r)
    lf = CleanerConfig().load_factor
    hashes = _key_hash_costs(200_000 // scale)
    payload = {
        "workload": {"keys": KEYS, "key_bytes": 16, "records_per_batch": BATCH, "value_pool": VALUE_POOL,
                     "values": "random bytes", "workloads": [{"value_bytes": v, "records": n // scale}
                                                             for v, n in WORKLOADS]},
        "compiled_kernels": compiled_kernels() is not None,
        "key_hash": "SipHash-2-4-128 keyed per round, 96 bits kept (compiled); MD5-96 (pure-Python kernels)",
        "key_hash_ns_per_16_byte_key": hashes,
        "offset_map": {
            "compact_slot_bytes": COMPACT_ENTRY_SIZE, "skimpy_slot_bytes": ENTRY_SIZE, "load_factor": lf,
            "compact_bytes_per_usable_entry": round(COMPACT_ENTRY_SIZE / lf, 2),
            "skimpy_bytes_per_usable_entry": round(ENTRY_SIZE / lf, 2),
            "compact_keys_per_mib": int((1 << 20) // COMPACT_ENTRY_SIZE * lf),
            "skimpy_keys_per_mib": int((1 << 20) // ENTRY_SIZE * lf),
        },
        "results": results,
        "deferred_deletion": True,  # the swap's old segment goes to the scheduler (see the docstring)
        "targets": _targets(results),
        "load_average_1_5_15": [round(x, 2) for x in os.getloadavg()],
        "notes": "CPU seconds (time.process_time) of one process per workload; 2 shared cores, so wall "
                 "times are noisy. MB/s = source bytes cleaned by the round (bytes_read) per CPU second. "
                 "The replaced segment is deleted by the node's scheduler after file.delete.delay.ms, outside "
                 "the round, as on a node. ceiling = read + "
                 "CRC-32C + decompress once + one keyed SipHash per key over the same bytes.",
    }
    write_result("fastpath", payload)  # a quick run goes to the scratch folder (bench.common)


if __name__ == "__main__":
    if len(sys.argv) == 3 and sys.argv[1] == "--one":
        v, n, c = json.loads(sys.argv[2])
        print(json.dumps(_one(v, n, c)))
    else:
        main()
