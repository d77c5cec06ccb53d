"""Uploads are verified by checksum before anything is published.

A body damaged on its way to the store used to pass the size-only check: the segment was
published and its local copy deleted, leaving data no one could read. Now every upload
carries the source's CRC-32C; the file store reads back what it wrote and the S3 store sends
Content-MD5 + x-amz-checksum-crc32c and checks the answer (moto verifies neither, so the
ETag is compared), and a mismatch publishes nothing and keeps the originals.
"""

from __future__ import annotations

import logging
import os
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import boto3
import pytest

from log.clock import MockClock
from log.fetch import READ_COMMITTED, READ_UNCOMMITTED
from metadata.types import RemoteLogSegmentState as S
from remote.errors import RemoteStorageChecksumError
from remote.file_store import TMP_DIR, FileObjectStore
from remote.object_store import ChecksummedData, ObjectStore, source_crc32c
from remote.s3_store import MiB, S3ObjectStore
from tests.remote.tiering import TP, TierEnv, local_records, produce, read_all
from tests.remote.transit_faults import CorruptingProxy, CorruptingStore

CREDS = {"access_key_id": "testing", "secret_access_key": "testing", "region": "us-east-1"}


@pytest.fixture
def proxy(moto_server_url: str) -> Iterator[CorruptingProxy]:
    logging.getLogger("werkzeug").setLevel(logging.ERROR)
    host, port = moto_server_url.removeprefix("http://").split(":")
    p = CorruptingProxy((host, int(port))).start()
    yield p
    p.stop()


def _s3_through(proxy: CorruptingProxy) -> S3ObjectStore:
    bucket = f"tc-{uuid.uuid4().hex[:12]}"
    boto3.client("s3", endpoint_url=proxy.url, region_name="us-east-1", aws_access_key_id="testing",
                 aws_secret_access_key="testing").create_bucket(Bucket=bucket)
    return S3ObjectStore(bucket, "p", endpoint_url=proxy.url, multipart_threshold=5 * MiB, part_size=5 * MiB,
                         backoff_s=0.001, max_attempts=2, **CREDS)


# ---- the stores ------------------------------------------------------------------------------

def test_file_store_refuses_bytes_that_do_not_match_the_source_checksum(tmp_path: Path) -> None:
    store = FileObjectStore(tmp_path / "objects")
    store.put("a/k.log", b"version one")
    good = os.urandom(4096)
    bad = bytearray(good)
    bad[100] ^= 0x01
    with pytest.raises(RemoteStorageChecksumError, match="checksum mismatch") as ei:
        store.put("a/k.log", ChecksummedData(bytes(bad), source_crc32c(good)))
    assert ei.value.retriable and ei.value.key == "a/k.log"
    assert store.get("a/k.log") == b"version one"  # the previous object is untouched
    assert list((tmp_path / "objects" / TMP_DIR).iterdir()) == []  # no temp file left
    assert store.put("a/k.log", ChecksummedData(good, source_crc32c(good))) == len(good)
    assert store.get("a/k.log") == good


def test_file_store_checks_a_local_file_source_against_its_checksum(tmp_path: Path) -> None:
    src = tmp_path / "seg.log"
    src.write_bytes(os.urandom(3 * MiB))
    store = FileObjectStore(tmp_path / "objects")
    with pytest.raises(RemoteStorageChecksumError):
        store.put("k", ChecksummedData(src, source_crc32c(src) ^ 1))
    assert not store.exists("k")
    store.put("k", ChecksummedData(src, source_crc32c(src)))
    assert store.get("k") == src.read_bytes()


@pytest.mark.parametrize("size", [3000, 11 * MiB], ids=["put", "multipart"])
def test_s3_over_http_detects_a_body_corrupted_in_transit(proxy: CorruptingProxy, size: int) -> None:
    store = _s3_through(proxy)
    data = os.urandom(size)
    proxy.corrupt_next(10)  # every attempt is damaged
    with pytest.raises(RemoteStorageChecksumError, match="different bytes than were sent"):
        store.put("seg.log", ChecksummedData(data, source_crc32c(data)))
    assert proxy.corrupted
    assert not store.exists("seg.log")
    raw = store._client()
    assert raw.list_multipart_uploads(Bucket=store.bucket).get("Uploads", []) == []
    proxy.corrupt_next(0)
    assert store.put("seg.log", ChecksummedData(data, source_crc32c(data))) == size
    assert store.get("seg.log") == data


def test_s3_refuses_a_source_that_changed_before_the_upload(proxy: CorruptingProxy) -> None:
    store = _s3_through(proxy)
    with pytest.raises(RemoteStorageChecksumError, match="corrupted before reaching the store"):
        store.put("k", ChecksummedData(b"abc", source_crc32c(b"abd")))
    assert not store.exists("k") and proxy.requests >= 1


def test_s3_a_single_damaged_attempt_is_retried_and_lands_intact(proxy: CorruptingProxy) -> None:
    store = _s3_through(proxy)
    data = os.urandom(10_000)
    proxy.corrupt_next(1)
    from remote.storage_manager import RemoteStorageManager

    rsm = RemoteStorageManager(store, backoff_ms=1, clock=MockClock())
    rsm._retry("upload", lambda: store.put("k", ChecksummedData(data, source_crc32c(data))))
    assert len(proxy.corrupted) == 1 and store.get("k") == data


# ---- tiering: nothing published, originals kept, a later retry succeeds ------------------------

@pytest.fixture(params=["file", "s3-http"])
def transit(request: pytest.FixtureRequest, tmp_path: Path) -> tuple[ObjectStore, Any]:
    """(the store the RSM writes to, a function arming n corrupted uploads)."""
    if request.param == "file":
        store = CorruptingStore(FileObjectStore(tmp_path / "objects"))
        return store, store.corrupt_next
    proxy = request.getfixturevalue("proxy")
    return _s3_through(proxy), proxy.corrupt_next


def test_a_copy_damaged_in_transit_is_not_published_and_the_local_segments_stay(
        tmp_path: Path, clock: MockClock, transit: tuple[ObjectStore, Any]) -> None:
    store, corrupt_next = transit
    env = TierEnv(tmp_path, clock, inner=store)
    log = env.create()
    produce(log, 60, clock=clock)
    log.roll()
    expected = {iso: local_records(log, iso) for iso in (READ_COMMITTED, READ_UNCOMMITTED)}
    local_before = [s.base_offset for s in log.all_segments()]
    assert len(local_before) > 2

    corrupt_next(1000)
    with pytest.raises(RemoteStorageChecksumError):
        env.rlm.tier(TP)
    assert env.md.list_remote_log_segments(TP) == []  # nothing published
    assert [s.base_offset for s in log.all_segments()] == local_before  # no original deleted
    assert env.rlm.apply_local_retention(TP) == []
    rows = env.md.list_remote_log_segments(TP, include_superseded=True, states=list(S))
    assert {r.state for r in rows} <= {S.DELETE_SEGMENT_FINISHED}  # the failed upload was abandoned
    assert env.object_keys() == []  # and its objects removed
    assert env.rlm.stats().copy_failures == 1

    corrupt_next(0)  # the path heals: the next tiering pass copies everything intact
    res = env.rlm.tier(TP)
    assert res.copied and res.deleted_local
    for iso, want in expected.items():
        assert read_all(env.rlm, TP, iso) == want
    env.close()


@pytest.mark.parametrize("backend", ["file", "s3-http"])
def test_a_tiered_rewrite_damaged_in_transit_is_not_published_and_the_originals_stay(
        tmp_path: Path, clock: MockClock, backend: str, request: pytest.FixtureRequest) -> None:
    from tests.tiered.conftest import TP as TTP
    from tests.tiered.conftest import World

    if backend == "file":
        world = World(tmp_path, clock, (f"file://{tmp_path / 'objects'}", {}), f"sqlite:///{tmp_path / 'md.db'}")
        corrupting = CorruptingStore(world.rsm.store)
        world.rsm.store = corrupting
    else:
        proxy: CorruptingProxy = request.getfixturevalue("proxy")
        bucket = _s3_through(proxy).bucket
        world = World(tmp_path, clock, (f"s3://{bucket}/segments", {"endpoint_url": proxy.url, **CREDS}),
                      f"sqlite:///{tmp_path / 'md.db'}")
        corrupting = proxy  # type: ignore[assignment]
    for _round in range(4):
        world.produce([(f"k{i % 5}".encode(), f"v{_round}-{i}".encode() * 10) for i in range(40)])
        world.roll_and_tier()
    before = world.rlmm.list_remote_log_segments(TTP)
    objects_before = world.object_keys()
    records = world.read_all()

    corrupting.corrupt_next(10_000)
    with pytest.raises(RemoteStorageChecksumError):
        world.clean()
    assert corrupting.corrupted
    assert world.rlmm.list_remote_log_segments(TTP) == before  # nothing published
    assert objects_before <= world.object_keys()  # no original deleted
    assert world.read_all() == records

    corrupting.corrupt_next(0)
    world.clean()  # the next round succeeds
    after = world.rlmm.list_remote_log_segments(TTP)
    assert {m.id for m in after} != {m.id for m in before}
    compacted = world.read_all()
    assert {k: v for _o, k, v in compacted} == {k: v for _o, k, v in records}
    world.close()
