"""Issue 5 bench: one tiered cleaning round over >= 200 MB in >= 50 remote segments (moto S3 over HTTP).

Setup: a base load of K distinct keys (1 KB values) written in key order, copied to S3 and
expired locally, then marked clean (it holds no duplicate); then one update to each of the
first 10% of keys (the hot keys, which therefore sit in the first ~10% of the segments).
Measured: the round that cleans those updates, with the bloom skip on, with it off (same
data), and with the default false-positive rate (1%), next to the minimum possible
download (the dirty segments plus the clean segments that really hold a hot key).

A bloom filter's rate is per probed key: a clean segment is skipped only if none of the
map's n keys false-hits, probability (1 - fpp)^n. With n = K/10 keys the 1% default skips
almost nothing; fpp ~ 0.02 / n keeps the per-segment false-positive share near 2%.
The moto server runs in a subprocess, so peak RSS is the cleaner's own.
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


class CountingStore(ObjectStore):
    """Counts requests by operation (what an S3 bill counts)."""

    def __init__(self, inner: ObjectStore) -> None:
        self.inner = inner
        self.verifies_writes = inner.verifies_writes
        self.requests: Counter[str] = Counter()

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
        return self.inner.get(key)

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
    def __init__(self, root: Path, endpoint: str, bucket: str, keys: int, segment_bytes: int, fpp: float) -> None:
        self.root = root
        self.keys = keys
        self.hot = keys // 10
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
        pad = os.urandom(VALUE - 16)
        for s in range(keys.start, keys.stop, 100):
            b = RecordBatchBuilder(0)
            for j, k in enumerate(range(s, min(s + 100, keys.stop))):
                b.append(j, self.clock.milliseconds(), f"key-{k:010d}".encode(), tag + pad + k.to_bytes(8, "big"))
            self.log.append_batches(b.build())

    def build(self) -> dict[str, Any]:
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
        return {"base_segments": len(segs), "base_bytes": sum(s.segment_size_in_bytes for s in segs),
                "dirty_segments": len(dirty), "dirty_bytes": sum(s.segment_size_in_bytes for s in dirty),
                "segments_really_holding_a_superseded_key": len(holding),
                "min_download_bytes": 2 * sum(s.segment_size_in_bytes for s in dirty)
                + sum(s.segment_size_in_bytes for s in holding),
                "min_download_segments": 2 * len(dirty) + len(holding), "checkpoint": end}

    def clean(self, bloom_skip: bool) -> dict[str, Any]:
        cfg = CleanerConfig(dedupe_buffer_size=64 << 20)
        cleaner = TieredCleaner(self.rlmm, self.rsm, SkimpyOffsetMap(cfg.dedupe_buffer_size), cfg,
                                temp_dir=self.root / "tiered-tmp", clock=self.clock, bloom_skip=bloom_skip)
        before = Counter(self.store.requests)
        rss0 = peak_rss_mb()
        with Timer() as t:
            end, stats = cleaner.clean(self.log, leader_epoch=self.rlm.leader_epoch(TP), local_checkpoint=None)
        reqs = self.store.requests - before
        return {"wall_s": round(t.seconds, 2), "bytes_downloaded": stats.bytes_downloaded,
                "bytes_uploaded": stats.bytes_uploaded, "segments_downloaded": stats.segments_downloaded,
                "segments_skipped_by_bloom": stats.segments_skipped_by_bloom,
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

    def restore(self, frm: Path, endpoint: str, bucket: str, segment_bytes: int, fpp: float) -> Setup:
        self.close()
        shutil.rmtree(self.root / "data")
        shutil.copytree(frm / "data", self.root / "data")
        for f in self.root.glob("metadata.db*"):
            f.unlink()
        for f in frm.glob("metadata.db*"):
            shutil.copy2(f, self.root / f.name)
        s = Setup.__new__(Setup)
        s.root, s.keys, s.hot, s.clock = self.root, self.keys, self.hot, self.clock
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


def main() -> None:
    keys, segment_bytes = (20_000, 400_000) if quick() else (200_000, 4_000_000)
    hot = keys // 10
    tuned_fpp = 0.02 / hot
    proc, endpoint = _moto_server()
    import boto3

    s3 = boto3.client("s3", endpoint_url=endpoint, region_name="us-east-1", aws_access_key_id="bench",
                      aws_secret_access_key="bench")
    results: dict[str, Any] = {}
    try:
        with tempfile.TemporaryDirectory() as d:
            root = Path(d)
            s3.create_bucket(Bucket="bench-tuned")
            setup = Setup(root / "tuned", endpoint, "bench-tuned", keys, segment_bytes, tuned_fpp)
            with Timer() as tb:
                results["partition"] = setup.build()
            results["partition"]["build_s"] = round(tb.seconds, 1)
            setup.snapshot(root / "snap")
            results[f"bloom_skip_fpp_{tuned_fpp:.0e}"] = setup.clean(bloom_skip=True)
            setup = setup.restore(root / "snap", endpoint, "bench-tuned", segment_bytes, tuned_fpp)
            results["bloom_skip_disabled"] = setup.clean(bloom_skip=False)
            setup.close()
            s3.create_bucket(Bucket="bench-default")
            default = Setup(root / "default", endpoint, "bench-default", keys, segment_bytes, 0.01)
            default.build()
            results["bloom_skip_default_fpp_0.01"] = default.clean(bloom_skip=True)
            default.close()
    finally:
        proc.terminate()
        proc.wait(10)
    write_result("tiered", {
        "description": __doc__.strip().splitlines()[0],
        "workload": {"keys": keys, "hot_keys": hot, "value_bytes": VALUE, "segment_bytes": segment_bytes,
                     "tuned_fpp": tuned_fpp, "store": "moto S3 server over HTTP (subprocess)"},
        "results": results,
    })


if __name__ == "__main__":
    main()
