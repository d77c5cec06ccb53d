"""A tiered partition on real parts: LogManager + object store + SQLite metadata + RLM."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from cleaner.config import CleanerConfig
from cleaner.offset_map import SkimpyOffsetMap
from cleaner.stats import CleanerStats
from cleaner.tiered import TieredCleaner
from log.clock import MockClock
from log.fetch import READ_UNCOMMITTED
from log.local_log import RecordSpec
from log.log_manager import LogManager
from log.types import TopicPartition
from metadata import load_metadata_manager
from remote import load_object_store
from remote.log_manager import RemoteLogManager
from remote.storage_manager import RemoteStorageManager
from tests.support.faults import FaultyObjectStore

TP = TopicPartition("t", 0)
TIERED = {"cleanup.policy": "compact,delete", "retention.ms": -1, "remote.storage.enable": True, "segment.bytes": 2048,
          "local.retention.ms": 0, "min.cleanable.dirty.ratio": 0.01, "delete.retention.ms": 1000}


class World:
    """One broker's view of a tiered partition (a second World on the same stores is a second broker)."""

    def __init__(self, root: Path, clock: MockClock, store: tuple[str, dict[str, Any]], metadata_url: str,
                 broker_id: int = 0,
                 config: dict[str, Any] | None = None, create: bool = True, faulty: bool = False) -> None:
        self.root = root
        self.clock = clock
        self.broker_id = broker_id
        self.lm = LogManager(root / f"data-{broker_id}", clock=clock)
        if create:
            self.lm.create_topic(TP.topic, 1, {**TIERED, **(config or {})})
        self.store = load_object_store(store[0], **store[1])
        if faulty:
            self.store = FaultyObjectStore(self.store)
        self.rlmm = load_metadata_manager(metadata_url)
        self.rsm = RemoteStorageManager(self.store)
        self.checkpoints: dict[TopicPartition, int] = {}
        self.rlm = RemoteLogManager(self.lm, self.rlmm, self.rsm, broker_id=broker_id, clock=clock,
                                    cache_dir=root / f"cache-{broker_id}", cleaner_checkpoint=self.checkpoints.get)

    @property
    def log(self):
        return self.lm.get_log(TP)

    def produce(self, items: list[tuple[bytes | None, bytes | None]], **kw: Any) -> None:
        for k, v in items:
            self.log.append_records([RecordSpec(k, v, timestamp=self.clock.milliseconds())], **kw)

    def roll_and_tier(self) -> None:
        self.log.roll()
        self.clock.advance(1)  # local.retention.ms=0 expires what is strictly older than now
        self.rlm.tier(TP)

    def cleaner(self, dedupe: int = 1 << 20, **kw: Any) -> TieredCleaner:
        cfg = CleanerConfig(dedupe_buffer_size=dedupe, io_buffer_size=64 * 1024)
        return TieredCleaner(self.rlmm, self.rsm, SkimpyOffsetMap(dedupe), cfg,
                             temp_dir=self.root / f"tiered-tmp-{self.broker_id}", broker_id=self.broker_id,
                             clock=self.clock, **kw)

    def clean(self, cleaner: TieredCleaner | None = None, **kw: Any) -> CleanerStats:
        cleaner = cleaner or self.cleaner()
        end, stats = cleaner.clean(self.log, leader_epoch=self.rlm.leader_epoch(TP),
                                   local_checkpoint=self.checkpoints.get(TP), **kw)
        self.checkpoints[TP] = end
        return stats

    def read_all(self, isolation: str = READ_UNCOMMITTED) -> list[tuple[int, bytes | None, bytes | None]]:
        out = []
        offset = self.rlm.log_start_offset(TP)
        while True:
            res = self.rlm.read(TP, offset, isolation=isolation, max_records=10_000)
            out.extend((r.offset, r.key, r.value) for r in res.records)
            if res.next_offset >= res.high_watermark or res.next_offset == offset:
                return out
            offset = res.next_offset

    def object_keys(self) -> set[str]:
        return set(self.store.list(""))

    def close(self) -> None:
        self.rlm.close()
        self.lm.close()
        self.rlmm.close()


def assert_no_leak(world: World) -> None:
    """Every object belongs to a referenced segment, and every referenced segment's log exists."""
    referenced = world.rlmm.list_remote_log_segments(TP)
    live = {k for md in referenced for k in world.rsm.object_keys(md)}
    actual = world.object_keys()
    assert actual <= live, f"leaked objects: {sorted(actual - live)}"
    assert all(world.rsm.object_key(md) in actual for md in referenced)


def final_state(records: list[tuple[int, bytes | None, bytes | None]]) -> dict[bytes, bytes]:
    state: dict[bytes, bytes] = {}
    for _o, k, v in records:
        if k is None:
            continue
        if v is None:
            state.pop(k, None)
        else:
            state[k] = v
    return state


BOTH_STORES = pytest.mark.parametrize("store_url", ["file", "s3"], indirect=True)


@pytest.fixture
def store_url(request: pytest.FixtureRequest, tmp_path: Path) -> tuple[str, dict[str, Any]]:
    """(url, options) of a file:// store (default) or a fresh bucket in moto's S3 HTTP server
    (tests opt into both with ``@BOTH_STORES``)."""
    if getattr(request, "param", "file") == "file":
        return f"file://{tmp_path / 'objects'}", {}
    moto_url = request.getfixturevalue("moto_server_url")
    import uuid

    import boto3

    bucket = f"b-{uuid.uuid4().hex[:12]}"
    boto3.client("s3", endpoint_url=moto_url, region_name="us-east-1", aws_access_key_id="testing",
                 aws_secret_access_key="testing").create_bucket(Bucket=bucket)
    return f"s3://{bucket}/segments", {"endpoint_url": moto_url, "region": "us-east-1",
                                        "access_key_id": "testing", "secret_access_key": "testing"}


@pytest.fixture
def make_world(tmp_path: Path, clock: MockClock, store_url: tuple[str, dict[str, Any]]) -> Callable[..., World]:
    worlds: list[World] = []
    md_url = f"sqlite:///{tmp_path / 'metadata.db'}"

    def _make(broker_id: int = 0, **kw: Any) -> World:
        w = World(tmp_path, clock, store_url, md_url, broker_id=broker_id, **kw)
        worlds.append(w)
        return w

    yield _make
    for w in worlds:
        try:
            w.close()
        except Exception:
            pass
