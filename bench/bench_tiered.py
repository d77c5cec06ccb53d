"""Issues 5 and 14 bench: tiered rounds over 52 remote segments of 4 MB in moto's S3 server, swept over dirty keys.

Setup (one fresh partition per sweep point): a base load of K = 200,000 distinct keys
written in key order (1-KB values: 52 segments of 4 MB; 100-byte values: the same keys in
fewer segments), copied to S3 and expired locally, then marked clean (it holds no
duplicate); then one update to each of the first N keys (N = 10 ... 50,000), copied too.
Measured at the DEFAULT configuration (bloom false-positive rate 1%): the round that cleans
those updates, next to the minimum possible download: the dirty segments once plus the clean
segments that really hold a superseded record.

Variants of the same round (the partition is snapshotted and restored between them):
``key_index``: bloom filter, then the exact key index, with the node's read cache as the
copies left it (each copy writes its key index through to the cache, so the indexes are
local); ``key_index_cold_cache``: the same after a restart (the cache is not persistent:
every index the bloom filter cannot rule out is fetched); ``bloom_only`` (1-KB values):
the behaviour before key indexes. Downloaded bytes include index objects. Wall time is
noisy: the 2-core machine is shared with other jobs. The moto server runs in a subprocess,
so peak RSS is the cleaner's own.
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from bench.common import Timer, peak_rss_mb, quick, write_result
from cleaner.config import CleanerConfig
from cleaner.offset_map import SkimpyOffsetMap
from cleaner.tiered import TieredCleaner
from log.clock import SystemClock
from log.index.key_index import SUFFIX as KEY_INDEX_SUFFIX
from log.log_manager import LogManager
from log.record import RecordBatchBuilder
from log.types import TopicPartition
from metadata import load_metadata_manager
from remote import load_object_store
from remote.log_manager import RemoteLogManager
from remote.object_store import ObjectStore, PutData
from remote.storage_manager import RemoteStorageManager

TP = TopicPartition("bench", 0)
VALUE = 1000
SWEEP = (10, 100, 1_000, 10_000, 50_000)


class CountingStore(ObjectStore):
    """Counts requests by operation (what an S3 bill counts)."""

    def __init__(self, inner: ObjectStore) -> None:
        self.inner = inner
        self.verifies_writes = inner.verifies_writes
        self.requests: Counter[str] = Counter()
        #: bytes of key index objects read
        self.index_bytes = 0

    @property
    def url(self) -> str:
        return self.inner.url

    def _n(self, op: str) -> None:
        self.requests[op] += 1

    def put(self, key: str, data: PutData) -> int:
        self._n("put")
        return self.inner.put(key, data)

    def put_file(self, key: str, path: str | os.PathLike[str]) -> int:
        self._n("put")
        return self.inner.put_file(key, path)

    def get(self, key: str) -> bytes:
        self._n("get")
        data = self.inner.get(key)
        if key.endswith(KEY_INDEX_SUFFIX):
            self.index_bytes += len(data)
        return data

    def get_range(self, key: str, start: int, end_exclusive: int) -> bytes:
        self._n("get")
        return self.inner.get_range(key, start, end_exclusive)

    def get_to_file(self, key: str, path: str | os.PathLike[str], start: int = 0, end: int | None = None) -> int:
        self._n("get")
        return self.inner.get_to_file(key, path, start, end)

    def size(self, key: str) -> int:
        self._n("head")
        return self.inner.size(key)

    def exists(self, key: str) -> bool:
        self._n("head")
        return self.inner.exists(key)

    def delete(self, key: str) -> None:
        self._n("delete")
        self.inner.delete(key)

    def list(self, prefix: str = "") -> Iterator[str]:
        self._n("list")
        return self.inner.list(prefix)

    def close(self) -> None:
        self.inner.close()


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _moto_server() -> tuple[subprocess.Popen[bytes], str]:
    port = _free_port()
    exe = Path(sys.executable).with_name("moto_server")
    proc = subprocess.Popen([str(exe), "-H", "127.0.0.1", "-p", str(port)], stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL)
    url = f"http://127.0.0.1:{port}"
    import urllib.request

    for _ in range(200):
        try:
            urllib.request.urlopen(url + "/moto-api/", timeout=1)  # noqa: S310 - loopback only
            return proc, url
        except OSError:
            time.sleep(0.05)
    proc.kill()
    raise RuntimeError("moto server did not start")


S3_OPTS = {"region": "us-east-1", "access_key_id": "bench", "secret_access_key": "bench"}


class Setup:
    def __init__(self, root: Path, endpoint: str, bucket: str, keys: int, segment_bytes: int, fpp: float,
                 value: int = VALUE) -> None:
        self.root = root
        self.keys = keys
        self.hot = keys // 10
        self.value = value
        self.clock = SystemClock()
        self.lm = LogManager(root / "data", clock=self.clock)
        self.lm.create_topic(TP.topic, 1, {"cleanup.policy": "compact,delete", "retention.ms": -1,
                                           "remote.storage.enable": True, "local.retention.ms": 0,
                                           "segment.bytes": segment_bytes, "remote.compaction.bloom.fpp": fpp})
        self.store = CountingStore(load_object_store(f"s3://{bucket}/segments", endpoint_url=endpoint, **S3_OPTS))
        self.rlmm = load_metadata_manager(f"sqlite:///{root / 'metadata.db'}")
        self.rsm = RemoteStorageManager(self.store)
        self.rlm = RemoteLogManager(self.lm, self.rlmm, self.rsm, broker_id=0, clock=self.clock,
                                    cache_dir=root / "cache")
        self.log = self.lm.get_log(TP)

    def _write(self, keys: range, tag: bytes) -> None:
        pad = os.urandom(self.value - 16)
        for s in range(keys.start, keys.stop, 100):
            b = RecordBatchBuilder(0)
            for j, k in enumerate(range(s, min(s + 100, keys.stop))):
                b.append(j, self.clock.milliseconds(), f"key-{k:010d}".encode(), tag + pad + k.to_bytes(8, "big"))
            self.log.append_batches(b.build())

    def build(self, dirty: int | None = None) -> dict[str, Any]:
        """Base load, marked clean, then updates to the first ``dirty`` keys (default: 10%)."""
        if dirty is not None:
            self.hot = dirty
        self._write(range(self.keys), b"base-v1\x00")
        self.log.roll()
        time.sleep(0.01)
        self.rlm.tier(TP)
        segs = self.rlmm.list_remote_log_segments(TP)
        end = segs[-1].end_offset + 1
        self.rlmm.publish_cleaner_offsets(TP, leader_epoch=self.rlm.leader_epoch(TP), cleaner_offsets={0: end})
        # which clean segments really hold a hot key (keys were written in order: offset k = key k)
        holding = [s for s in segs if s.start_offset < self.hot]
        self._write(range(self.hot), b"update-2")
        self.log.roll()
        time.sleep(0.01)
        self.rlm.tier(TP)
        dirty = [s for s in self.rlmm.list_remote_log_segments(TP) if s.start_offset >= end]
        base_bytes = sum(s.segment_size_in_bytes for s in segs)
        index_bytes = sum(s.key_index_bytes or 0 for s in segs)
        return {"base_segments": len(segs), "base_bytes": base_bytes,
                "dirty_keys": self.hot,
                "dirty_segments": len(dirty), "dirty_bytes": sum(s.segment_size_in_bytes for s in dirty),
                "segments_really_holding_a_superseded_key": len(holding),
                # the dirty segments once (kept on disk from the map pass to the rewrite)
                "min_download_bytes": sum(s.segment_size_in_bytes for s in dirty)
                + sum(s.segment_size_in_bytes for s in holding),
                "min_download_segments": len(dirty) + len(holding), "checkpoint": end,
                "key_index_bytes": index_bytes, "key_index_share_of_segment_bytes": round(index_bytes / base_bytes, 5),
                "bloom_bytes": sum(len(self.rlmm.get_bloom_filter(s.remote_log_segment_id) or b"") for s in segs)}

    def clean(self, bloom_skip: bool, use_key_index: bool = True) -> dict[str, Any]:
        cfg = CleanerConfig(dedupe_buffer_size=64 << 20)
        cleaner = TieredCleaner(self.rlmm, self.rsm, SkimpyOffsetMap(cfg.dedupe_buffer_size), cfg,
                                temp_dir=self.root / "tiered-tmp", clock=self.clock, bloom_skip=bloom_skip,
                                use_key_index=use_key_index)
        before = Counter(self.store.requests)
        index_before = self.store.index_bytes
        rss0 = peak_rss_mb()
        with Timer() as t:
            end, stats = cleaner.clean(self.log, leader_epoch=self.rlm.leader_epoch(TP), local_checkpoint=None)
        reqs = self.store.requests - before
        return {"wall_s": round(t.seconds, 2), "bytes_downloaded": stats.bytes_downloaded,
                "bytes_uploaded": stats.bytes_uploaded, "segments_downloaded": stats.segments_downloaded,
                "segments_skipped_by_bloom": stats.segments_skipped_by_bloom,
                "segments_skipped_by_key_index": sum(a.action == "skipped-by-key-index"
                                                     for a in stats.segment_accounts),
                "key_index_bytes_downloaded": self.store.index_bytes - index_before,
                "object_store_requests": dict(reqs), "object_store_requests_total": sum(reqs.values()),
                "peak_temp_disk_bytes": cleaner.last_space.peak if cleaner.last_space else 0,
                "local_data_dir_bytes": sum(f.stat().st_size for f in (self.root / "data").rglob("*") if f.is_file()),
                "peak_rss_mb": round(max(peak_rss_mb(), rss0), 1), "records_read": stats.records_read,
                "records_retained": stats.records_retained, "checkpoint": end}

    def snapshot(self, to: Path) -> None:
        self.log.flush()
        shutil.copytree(self.root / "data", to / "data")
        for f in self.root.glob("metadata.db*"):  # the database and its write-ahead log
            shutil.copy2(f, to / f.name)

    def restore(self, frm: Path, endpoint: str, bucket: str) -> Setup:
        self.close()
        shutil.rmtree(self.root / "data")
        shutil.copytree(frm / "data", self.root / "data")
        for f in self.root.glob("metadata.db*"):
            f.unlink()
        for f in frm.glob("metadata.db*"):
            shutil.copy2(f, self.root / f.name)
        s = Setup.__new__(Setup)
        s.root, s.keys, s.hot, s.clock, s.value = self.root, self.keys, self.hot, self.clock, self.value
        s.lm = LogManager(self.root / "data", clock=self.clock)
        s.store = CountingStore(load_object_store(f"s3://{bucket}/segments", endpoint_url=endpoint, **S3_OPTS))
        s.rlmm = load_metadata_manager(f"sqlite:///{self.root / 'metadata.db'}")
        s.rsm = RemoteStorageManager(s.store)
        s.rlm = RemoteLogManager(s.lm, s.rlmm, s.rsm, broker_id=0, clock=self.clock, cache_dir=self.root / "cache")
        s.log = s.lm.get_log(TP)
        return s

    def close(self) -> None:
        self.rlm.close()
        self.lm.close()
        self.rlmm.close()


def _point(root: Path, s3: Any, endpoint: str, keys: int, segment_bytes: int, value: int, dirty: int) -> dict[str, Any]:
    """One sweep point: a fresh partition, then the same round in each variant."""
    bucket = f"bench-{value}-{dirty}"
    s3.create_bucket(Bucket=bucket)
    setup = Setup(root / "p", endpoint, bucket, keys, segment_bytes, 0.01, value=value)
    try:
        with Timer() as tb:
            partition = setup.build(dirty)
        partition["build_s"] = round(tb.seconds, 1)
        setup.snapshot(root / "snap")
        out: dict[str, Any] = {"partition": partition, "key_index": setup.clean(bloom_skip=True)}
        setup = setup.restore(root / "snap", endpoint, bucket)
        out["key_index_cold_cache"] = setup.clean(bloom_skip=True)
        if value == VALUE:
            setup = setup.restore(root / "snap", endpoint, bucket)
            out["bloom_only"] = setup.clean(bloom_skip=True, use_key_index=False)
        minimum = partition["min_download_bytes"]
        for name in ("key_index", "key_index_cold_cache", "bloom_only"):
            if name in out:
                out[name]["downloaded_over_minimum"] = round(out[name]["bytes_downloaded"] / minimum, 3)
        return out
    finally:
        setup.close()
        shutil.rmtree(root / "p", ignore_errors=True)
        shutil.rmtree(root / "snap", ignore_errors=True)


def main() -> None:
    keys, segment_bytes = (20_000, 400_000) if quick() else (200_000, 4_000_000)
    sweep = tuple(n for n in SWEEP if n <= keys // 4)
    proc, endpoint = _moto_server()
    import boto3

    s3 = boto3.client("s3", endpoint_url=endpoint, region_name="us-east-1", aws_access_key_id="bench",
                      aws_secret_access_key="bench")
    results: dict[str, Any] = {}
    try:
        with tempfile.TemporaryDirectory() as d:
            for value in (VALUE, 100):
                for n in sweep:
                    results[f"{value}B_values_{n}_dirty_keys"] = _point(Path(d), s3, endpoint, keys, segment_bytes,
                                                                        value, n)
    finally:
        proc.terminate()
        proc.wait(10)
    write_result("tiered", {
        "description": __doc__.strip().splitlines()[0],
        "workload": {"keys": keys, "dirty_keys_sweep": list(sweep), "value_bytes": [VALUE, 100],
                     "segment_bytes": segment_bytes, "fpp": 0.01, "store": "moto S3 server over HTTP (subprocess)"},
        "targets": {"downloaded_over_minimum_1kb": 1.05, "key_index_share_100b": 0.085, "key_index_share_1kb": 0.01},
        "results": results,
    })


if __name__ == "__main__":
    main()
