"""``tiercompact demo``: a self-contained tour on the embedded defaults.

In a temporary (or given) data dir, with a ``file://`` object store and SQLite metadata:
create a compacted, tiered topic; produce a keyed workload of updates and tombstones;
roll; copy the rolled segments to the object store; let the local copies expire (when
the tiered cleaner is available, so compaction runs on the remote tier) ; clean; and
print what changed on each tier, what the cleaner downloaded, uploaded and skipped, and
whether every key's latest value reads back. Plain text, no extra dependency.
"""

from __future__ import annotations

import random
import shutil
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, TextIO

from log.local_log import RecordSpec
from service.config import load_config
from service.node import Node

TOPIC = "demo-orders"
BATCH = 500


class Progress:
    """A one-line text progress bar (``\\r`` redraws; a plain line per step when not a TTY)."""

    def __init__(self, out: TextIO, label: str, total: int, width: int = 30) -> None:
        self.out, self.label, self.total, self.width = out, label, max(total, 1), width
        self.tty = out.isatty()
        self._last = -1

    def update(self, done: int) -> None:
        pct = min(100, done * 100 // self.total)
        if pct == self._last or (not self.tty and pct not in (100,) and pct % 25):
            return
        self._last = pct
        filled = self.width * pct // 100
        bar = "#" * filled + "." * (self.width - filled)
        line = f"  {self.label:<10} [{bar}] {pct:3d}%"
        self.out.write(("\r" + line) if self.tty else line + "\n")
        if self.tty and pct == 100:
            self.out.write("\n")
        self.out.flush()


def _tier_counts(node: Node, records: list[Any]) -> dict[str, Any]:
    """Records and bytes on each tier (a record counts as local when a local segment holds it)."""
    info = node.partition_info(TOPIC, 0)
    local_segs = [s for s in info["segments"] if s["tier"] in ("local", "both")]
    local_start = min((s["base_offset"] for s in local_segs if s["size_bytes"]), default=info["log_end_offset"])
    local = sum(1 for r in records if r.offset >= local_start)
    return {"local_records": local, "remote_records": len(records) - local,
            "local_bytes": info["local_size_bytes"], "remote_bytes": info["remote_size_bytes"],
            "segments": len(info["segments"])}


def _read_all(node: Node) -> list[Any]:
    out: list[Any] = []
    offset = 0
    while True:
        res = node.read(TOPIC, 0, offset, max_records=5000)
        if not res.fields:  # records are built from the fields on each access
            return out
        out += res.records
        offset = res.next_offset


def run_demo(records: int = 20_000, keys: int = 1_000, data_dir: Path | None = None, *, out: TextIO = sys.stdout,
             seed: int = 42, tombstone_ratio: float = 0.05) -> dict[str, Any]:
    """Run the tour and return its report (also printed to ``out``)."""
    if records < 1 or keys < 1:
        raise ValueError("--records and --keys must be at least 1")
    temp = data_dir is None
    root = Path(tempfile.mkdtemp(prefix="tiercompact-demo-")) if data_dir is None else Path(data_dir)
    say: Callable[[str], None] = lambda s: print(s, file=out, flush=True)  # noqa: E731
    rng = random.Random(seed)
    node = Node(load_config({"data_dir": root, "cleaner_threads": 0, "tiering_interval_ms": 3_600_000,
                             "log_level": "warning"}, env={}))
    try:
        tiered = node.tiered_cleaning
        say(f"tiercompact demo in {root}  (object store {node.config.remote_url})")
        say(f"  cleaner: {'tiered (download-clean-upload on the object store)' if tiered else 'local'}")
        seg_bytes = max(16 * 1024, records * 60 // 40)  # about 40 segments whatever the size
        # compact,delete with unlimited total retention lets local copies expire as soon as they
        # are tiered, so the tiered cleaner works on remote-only segments
        config = {"cleanup.policy": "compact,delete" if tiered else "compact", "retention.ms": -1,
                  "remote.storage.enable": True, "segment.bytes": seg_bytes,
                  # without the tiered cleaner the remote copies stay uncompacted: keep the
                  # compacted local copies as the read path
                  "local.retention.ms": 0 if tiered else -1,
                  "min.cleanable.dirty.ratio": 0.01}
        if node.topics() and any(t.name == TOPIC for t in node.topics()):
            node.delete_topic(TOPIC)
        node.create_topic(TOPIC, 1, config)

        t0 = time.monotonic()
        latest: dict[bytes, bytes | None] = {}
        bar = Progress(out, "produce", records)
        done = 0
        while done < records:
            n = min(BATCH, records - done)
            batch = []
            for _ in range(n):
                k = f"customer-{rng.randrange(keys):06d}".encode()
                v = None if rng.random() < tombstone_ratio else f"order-{done}-{rng.randrange(10**9)}".encode()
                batch.append(RecordSpec(k, v))
                latest[k] = v
                done += 1
            node.produce(TOPIC, 0, batch, compression="lz4")
            bar.update(done)
        node.roll(TOPIC, 0)
        tier1 = node.tier(TOPIC, 0)
        if not tiered:
            say("  (the tiered cleaner is not available: cleaning the local copies, then tiering again)")
        before = _tier_counts(node, _read_all(node))
        up0, down0 = node.object_store.bytes_uploaded, node.object_store.bytes_downloaded

        bar = Progress(out, "clean", 1)
        c0 = time.monotonic()
        stats = node.clean(TOPIC, 0)
        clean_secs = time.monotonic() - c0
        bar.update(1)
        tier2 = node.tier(TOPIC, 0)
        after = _tier_counts(node, _read_all(node))

        # a second round that only a few keys dirty: the clean segments whose bloom filter rules
        # those keys out are carried forward without being downloaded
        hot = sorted(latest)[:3]
        node.produce(TOPIC, 0, [RecordSpec(k, b"updated-" + k) for k in hot])
        latest.update({k: b"updated-" + k for k in hot})
        node.roll(TOPIC, 0)
        node.tier(TOPIC, 0)
        down1 = node.object_store.bytes_downloaded
        stats2 = node.clean(TOPIC, 0)
        round2 = {"keys_updated": len(hot), "segments_skipped_by_bloom": stats2.get("segments_skipped_by_bloom", 0),
                  "segments_downloaded": stats2.get("segments_downloaded", 0),
                  "bytes_downloaded": node.object_store.bytes_downloaded - down1}
        after_records = _read_all(node)

        got = {r.key: r.value for r in after_records}
        wrong = [k for k, v in latest.items() if got.get(k, None) != v]
        compacted = len(after_records) == len(got)  # every key at most once
        live = sum(1 for v in latest.values() if v is not None)
        report = {
            "data_dir": str(root), "tiered_cleaner": tiered, "records_produced": records, "keys": keys,
            "live_keys": live, "before": before, "after": after,
            "segments_tiered": len(tier1["copied"]) + len(tier2["copied"]),
            "local_segments_expired": len(tier1["deleted_local"]) + len(tier2["deleted_local"]),
            "segments_skipped_by_bloom": stats.get("segments_skipped_by_bloom", 0),
            "segments_downloaded": stats.get("segments_downloaded", 0),
            "bytes_downloaded": node.object_store.bytes_downloaded - down0,
            "bytes_uploaded": node.object_store.bytes_uploaded - up0,
            "clean_seconds": round(clean_secs, 3), "total_seconds": round(time.monotonic() - t0, 3),
            "records_after": len(after_records), "keys_wrong": len(wrong), "compacted": compacted,
            "second_round": round2,
            "ok": not wrong and compacted,
        }
        _print_report(say, report)
        return report
    finally:
        node.shutdown()
        if temp:
            shutil.rmtree(root, ignore_errors=True)


def _print_report(say: Callable[[str], None], r: dict[str, Any]) -> None:
    b, a = r["before"], r["after"]
    say("")
    say(f"  {'':18}{'before':>14}{'after':>14}")
    for label, key in (("local records", "local_records"), ("local bytes", "local_bytes"),
                       ("remote records", "remote_records"), ("remote bytes", "remote_bytes")):
        say(f"  {label:<18}{b[key]:>14,}{a[key]:>14,}")
    say("")
    say(f"  segments tiered {r['segments_tiered']}, local copies expired {r['local_segments_expired']}")
    say(f"  cleaner: {r['segments_downloaded']} segments downloaded, {r['segments_skipped_by_bloom']} skipped by "
        f"bloom filter, {r['bytes_downloaded']:,} B downloaded, {r['bytes_uploaded']:,} B uploaded")
    r2 = r["second_round"]
    say(f"  second round after updating {r2['keys_updated']} keys: {r2['segments_skipped_by_bloom']} clean segments "
        f"skipped by bloom filter, {r2['segments_downloaded']} downloaded ({r2['bytes_downloaded']:,} B)")
    say(f"  clean took {r['clean_seconds']:.2f} s; the whole tour {r['total_seconds']:.2f} s")
    verdict = "OK" if r["ok"] else f"FAILED ({r['keys_wrong']} keys wrong, compacted={r['compacted']})"
    say(f"  every key's latest value reads back ({r['keys']:,} keys, {r['live_keys']:,} live): {verdict}")
