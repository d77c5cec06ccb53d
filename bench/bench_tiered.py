"""Issues 5 and 14 bench: tiered rounds over 52 remote segments of 4 MB in moto's S3 server, swept over dirty keys.

Setup (one fresh partition per sweep point): a base load of K = 200,000 distinct keys
written in key order (1-KB values: 52 segments of 4 MB; 100-byte values: the same keys in
fewer segments), copied to S3 and expired locally, then marked clean (it holds no
duplicate); then one update to each of the first N keys (N = 10 ... 50,000), copied too.
Measured at the DEFAULT configuration (bloom false-positive rate 1%): the round that cleans
those updates, next to the minimum possible download: the dirty segments once plus the clean
segments that really hold a superseded record.

Variants of the same round (the partition, with its metadata and the node's read cache, is
snapshotted and restored between them): ``key_index``: bloom filter, then the exact key
index, with the node's read cache as the copies left it (each copy writes its key index
through to the cache, so the indexes are local); ``key_index_after_restart``: the same
round on a node restarted on that disk state (the cache persists: its entries are
re-adopted); ``key_index_empty_cache``: a node whose cache disk was lost (every index the
bloom filter cannot rule out is fetched; for information, no target); ``bloom_only`` (1-KB
values): the behaviour before key indexes. Downloaded bytes include index objects.

Planning (``planning``): a round's decisions over 10,000 remote segments from metadata,
bloom filters and cached key indexes, no object-store read (:func:`plan_bench`).

Wall time is noisy: the 2-core machine is shared with other jobs (the load average is
recorded). The moto server runs in a subprocess, so peak RSS is the cleaner's own.
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

import numpy as np

from bench.common import Timer, peak_rss_mb, quick, write_result
from cleaner.config import CleanerConfig
from cleaner.key_skip import DirtyKeys, SkipPolicy
from cleaner.offset_map import SkimpyOffsetMap
from cleaner.stats import CleanerStats
from cleaner.tiered import TieredCleaner
from log.clock import SystemClock
from log.index.bloom import KeyBloomFilter
from log.index.key_index import SUFFIX as KEY_INDEX_SUFFIX
from log.index.key_index import KeyIndex, key_index_size_bytes, stable_hashes
from log.log_manager import LogManager
from log.record import RecordBatchBuilder
from log.types import TopicPartition
from metadata import load_metadata_manager
from metadata.types import RemoteLogSegmentId, RemoteLogSegmentMetadata, RemoteLogSegmentState
from remote import load_object_store
from remote.log_manager import RemoteLogManager
from remote.object_store import ObjectStore, PutData
from remote.read_cache import RemoteReadCache
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
        dirty_segs = [s for s in self.rlmm.list_remote_log_segments(TP) if s.start_offset >= end]
        base_bytes = sum(s.segment_size_in_bytes for s in segs)
        index_bytes = sum(s.key_index_bytes or 0 for s in segs)
        return {"base_segments": len(segs), "base_bytes": base_bytes,
                "dirty_keys": self.hot,
                "dirty_segments": len(dirty_segs), "dirty_bytes": sum(s.segment_size_in_bytes for s in dirty_segs),
                "segments_really_holding_a_superseded_key": len(holding),
                # the dirty segments once (kept on disk from the map pass to the rewrite)
                "min_download_bytes": sum(s.segment_size_in_bytes for s in dirty_segs)
                + sum(s.segment_size_in_bytes for s in holding),
                "min_download_segments": len(dirty_segs) + len(holding), "checkpoint": end,
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
        return {"wall_s": round(t.seconds, 2), "load_avg_1m": round(os.getloadavg()[0], 2),
                "bytes_downloaded": stats.bytes_downloaded,
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
        """The node's state on disk: data dir, metadata and its remote read cache (whose
        entries a restarted node re-adopts)."""
        self.log.flush()
        shutil.copytree(self.root / "data", to / "data")
        shutil.copytree(self.root / "cache", to / "cache")
        for f in self.root.glob("metadata.db*"):  # the database and its write-ahead log
            shutil.copy2(f, to / f.name)

    def restore(self, frm: Path, endpoint: str, bucket: str, *, cache: bool = True) -> Setup:
        """A node started on the snapshot (a restart); ``cache=False``: its cache disk was lost."""
        self.close()
        shutil.rmtree(self.root / "data")
        shutil.copytree(frm / "data", self.root / "data")
        shutil.rmtree(self.root / "cache", ignore_errors=True)
        if cache:
            shutil.copytree(frm / "cache", self.root / "cache")
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
        out["key_index_after_restart"] = setup.clean(bloom_skip=True)
        out["key_index_after_restart"]["cache_entries_adopted"] = setup.rlm.cache.stats().adopted
        setup = setup.restore(root / "snap", endpoint, bucket, cache=False)
        out["key_index_empty_cache"] = setup.clean(bloom_skip=True)
        if value == VALUE:
            setup = setup.restore(root / "snap", endpoint, bucket)
            out["bloom_only"] = setup.clean(bloom_skip=True, use_key_index=False)
        minimum = partition["min_download_bytes"]
        for name in ("key_index", "key_index_after_restart", "key_index_empty_cache", "bloom_only"):
            if name in out:
                out[name]["downloaded_over_minimum"] = round(out[name]["bytes_downloaded"] / minimum, 3)
        return out
    finally:
        setup.close()
        shutil.rmtree(root / "p", ignore_errors=True)
        shutil.rmtree(root / "snap", ignore_errors=True)


# ---- planning a round over many remote segments (metadata only, key indexes cached) ------------

PLAN_SEGMENTS = 10_000
PLAN_KEYS_PER_SEGMENT = 1_000
PLAN_DIRTY_KEYS = 10_000
PLAN_HOLDING = 20  # clean segments that really hold a dirty key


class _NoFetchStore(CountingStore):
    """A store planning must not read from (the key indexes are cached): any read fails loudly."""

    def get(self, key: str) -> bytes:
        raise AssertionError(f"planning fetched {key}")

    def get_range(self, key: str, start: int, end_exclusive: int) -> bytes:
        raise AssertionError(f"planning fetched {key}")


def _plan_once(rlmm: Any, rsm: RemoteStorageManager, dirty: np.ndarray, now: int) -> dict[str, Any]:
    """What a round plans from: the metadata listing and checkpoint, then every clean segment
    decided by bloom filter and key index against the exact dirty-key set."""
    stats = CleanerStats(SystemClock(), TP)

    def no_download(md: Any) -> Path:
        raise AssertionError(f"planning downloaded {md.id}")

    cpu0 = time.process_time()
    with Timer() as t:
        with Timer() as listing:
            segments = rlmm.list_remote_log_segments(TP)
            cp = rlmm.resolve_cleaner_checkpoint(TP) or 0
        clean = [s for s in segments if s.end_offset < cp]
        keys = DirtyKeys()
        keys.add(dirty)
        policy = SkipPolicy(rlmm, rsm, keys, now=now, max_compaction_lag_ms=2**63 - 1, min_reclaimable_ratio=0.0,
                            use_key_index=True, stats=stats, download=no_download)
        decisions = policy.decide_all(clean)
    return {"wall_s": round(t.seconds, 3), "cpu_s": round(time.process_time() - cpu0, 3),
            "listing_s": round(listing.seconds, 3), "segments": len(clean),
            "rewrite": sum(d.rewrite for d in decisions),
            "skipped_by_bloom": sum(d.action == "skipped-by-bloom" for d in decisions),
            "skipped_by_key_index": sum(d.action == "skipped-by-key-index" for d in decisions),
            "key_index_fetches": policy.index_fetches}


def plan_bench(root: Path, segments: int = PLAN_SEGMENTS, keys_per_segment: int = PLAN_KEYS_PER_SEGMENT,
               dirty_keys: int = PLAN_DIRTY_KEYS, holding: int = PLAN_HOLDING) -> dict[str, Any]:
    """Planning a round over ``segments`` remote segments (target: <= 2 s for 10,000).

    SQLite metadata on local disk, each segment with its bloom filter (fpp 1%) and its key
    index in the read cache (as the copies leave them); ``dirty_keys`` exact dirty keys of
    which ``holding`` hit one clean segment each. Measured warm (entries written by this
    process) and after a restart (entries re-adopted: each one's CRC checked at first read).
    Nothing is read from the object store.
    """
    rng = np.random.default_rng(14)
    rlmm = load_metadata_manager(f"sqlite:///{root / 'plan.db'}")
    store = _NoFetchStore(load_object_store(f"file://{root / 'plan-objects'}"))
    rsm = RemoteStorageManager(store)
    cache = RemoteReadCache(root / "plan-cache", 1 << 30)
    rsm.attach_index_cache(cache)
    rlmm.become_leader(TP, 0, 0)
    hit_segments = set(rng.choice(segments, size=holding, replace=False).tolist())
    dirty_parts = [rng.integers(0, 256, size=(dirty_keys - holding, 16), dtype=np.uint8)]
    index_bytes = 0
    with Timer() as tb:
        for i in range(segments):
            start = i * keys_per_segment
            digests = rng.integers(0, 256, size=(keys_per_segment, 16), dtype=np.uint8)
            if i in hit_segments:
                dirty_parts.append(digests[:1].copy())
            md = RemoteLogSegmentMetadata(RemoteLogSegmentId.generate(TP), start, start + keys_per_segment - 1,
                                          start, 0, 0, keys_per_segment * 1_100, {0: 0},
                                          key_index_bytes=key_index_size_bytes(keys_per_segment))
            bloom = KeyBloomFilter.build_from_digests(digests, keys_per_segment, 0.01)
            bloom.has_transactional_batches = False
            index = KeyIndex.from_hashes(stable_hashes(digests), has_transactional_batches=False)
            rlmm.add_remote_log_segment_metadata(md, leader_epoch=0)
            rlmm.update_remote_log_segment_state(md.remote_log_segment_id, RemoteLogSegmentState.COPY_SEGMENT_FINISHED,
                                                 leader_epoch=0, event_timestamp_ms=1, broker_id=0)
            rlmm.put_bloom_filter(md.remote_log_segment_id, bloom.to_bytes())
            data = index.to_bytes()
            index_bytes += len(data)
            cache.put(f"{md.id}{KEY_INDEX_SUFFIX}", data)  # written through, as a copy does
        rlmm.publish_cleaner_offsets(TP, leader_epoch=0, cleaner_offsets={0: segments * keys_per_segment})
    dirty = np.concatenate(dirty_parts)
    now = int(time.time() * 1000)
    out: dict[str, Any] = {"segments": segments, "keys_per_segment": keys_per_segment, "dirty_keys": len(dirty),
                           "segments_holding_a_dirty_key": holding, "key_index_cache_bytes": index_bytes,
                           "build_s": round(tb.seconds, 1)}
    try:
        out["warm"] = _plan_once(rlmm, rsm, dirty, now)
        out["warm_again"] = _plan_once(rlmm, rsm, dirty, now)
        cache.close()
        rlmm.close()
        rlmm = load_metadata_manager(f"sqlite:///{root / 'plan.db'}")  # a restarted node: fresh caches
        rsm = RemoteStorageManager(store)
        cache = RemoteReadCache(root / "plan-cache", 1 << 30)
        rsm.attach_index_cache(cache)
        out["after_restart"] = _plan_once(rlmm, rsm, dirty, now)
        out["after_restart_adopted_entries"] = cache.stats().adopted
    finally:
        cache.close()
        rlmm.close()
    for k in ("warm", "warm_again", "after_restart"):
        assert out[k]["rewrite"] == holding and out[k]["key_index_fetches"] == 0, out[k]
    out["load_avg_1m"] = round(os.getloadavg()[0], 2)
    return out


def main() -> None:
    keys, segment_bytes = (20_000, 400_000) if quick() else (200_000, 4_000_000)
    sweep = tuple(n for n in SWEEP if n <= keys // 4)
    results: dict[str, Any] = {}
    with tempfile.TemporaryDirectory(dir=os.environ.get("BENCH_TMP")) as d:
        planning = plan_bench(Path(d), segments=1_000 if quick() else PLAN_SEGMENTS)
    print(f"planning: {planning}", flush=True)
    proc, endpoint = _moto_server()
    import boto3

    s3 = boto3.client("s3", endpoint_url=endpoint, region_name="us-east-1", aws_access_key_id="bench",
                      aws_secret_access_key="bench")
    try:
        with tempfile.TemporaryDirectory(dir=os.environ.get("BENCH_TMP")) as d:
            for value in (VALUE, 100):
                for n in sweep:
                    results[f"{value}B_values_{n}_dirty_keys"] = _point(Path(d), s3, endpoint, keys, segment_bytes,
                                                                        value, n)
                    print(f"{value}B {n}: " + ", ".join(
                        f"{k} {v['downloaded_over_minimum']}x" for k, v in results[f"{value}B_values_{n}_dirty_keys"].items()
                        if isinstance(v, dict) and "downloaded_over_minimum" in v), flush=True)
    finally:
        proc.terminate()
        proc.wait(10)
    write_result("tiered", {
        "description": __doc__.strip().splitlines()[0],
        "workload": {"keys": keys, "dirty_keys_sweep": list(sweep), "value_bytes": [VALUE, 100],
                     "segment_bytes": segment_bytes, "fpp": 0.01, "store": "moto S3 server over HTTP (subprocess)"},
        "targets": {"downloaded_over_minimum_1kb": 1.05, "key_index_share_100b": 0.085, "key_index_share_1kb": 0.01,
                    "planning_10000_segments_s": 2.0},
        "load_avg_1m_at_end": round(os.getloadavg()[0], 2),
        "results": results,
        "planning": planning,
    })


if __name__ == "__main__":
    main()
