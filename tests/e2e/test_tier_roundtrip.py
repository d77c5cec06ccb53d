"""End to end: produce (every codec, keyless records, tombstones, headers, committed and
aborted transactions), roll, tier, expire every local copy, and read every record back
from offset 0 identically in both isolation levels, on file:// and on S3 (moto over HTTP),
also after a restart (cold read cache)."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from log.clock import MockClock
from log.fetch import READ_COMMITTED, READ_UNCOMMITTED
from metadata.types import RemoteLogSegmentState
from remote.file_store import FileObjectStore
from remote.object_store import ObjectStore
from remote.s3_store import S3ObjectStore
from tests.remote.tiering import TP, TierEnv, local_records, produce, read_all

CREDS = {"access_key_id": "testing", "secret_access_key": "testing", "region": "us-east-1"}


@pytest.fixture(params=["file", "s3-moto-http"])
def inner_store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[ObjectStore]:
    if request.param == "file":
        yield FileObjectStore(tmp_path / "objects")
        return
    import boto3

    url = request.getfixturevalue("moto_server_url")
    bucket = f"tier-{uuid.uuid4().hex[:12]}"
    boto3.client("s3", endpoint_url=url, region_name="us-east-1", aws_access_key_id="testing",
                 aws_secret_access_key="testing").create_bucket(Bucket=bucket)
    store = S3ObjectStore(bucket, "cluster-a", endpoint_url=url, backoff_s=0.01, **CREDS)
    yield store
    store.close()


def test_tiered_partition_reads_back_every_record_identically(tmp_path: Path, inner_store: ObjectStore) -> None:
    clock = MockClock()
    env = TierEnv(tmp_path, clock, inner=inner_store, cache_bytes=64 * 1024, chunk_bytes=2048)
    log = env.create(segment_bytes=2048)
    work = produce(log, batches=150, clock=clock)
    log.roll()
    expected = {iso: local_records(log, iso) for iso in (READ_UNCOMMITTED, READ_COMMITTED)}
    assert work.aborted_offsets and len(log.all_segments()) > 8
    assert {r[0] for r in expected[READ_UNCOMMITTED]} - {r[0] for r in expected[READ_COMMITTED]} \
        == work.aborted_offsets

    clock.advance(10)
    result = env.rlm.tier(TP)
    remote = env.rlm.remote_segments(TP)
    assert result.copied == [m.start_offset for m in remote]
    assert result.deleted_local == result.copied  # local.retention.ms=0: every copied segment expired
    assert all(m.state is RemoteLogSegmentState.COPY_SEGMENT_FINISHED for m in remote)
    assert log.log_start_offset == log.log_end_offset == remote[-1].end_offset + 1
    assert env.rlm.log_start_offset(TP) == 0
    assert env.rlm.remote_log_size(TP) == sum(m.segment_size_in_bytes for m in remote)
    assert [v.tier for v in env.rlm.segments_view(TP)] == ["remote"] * len(remote) + ["local"]

    for iso in (READ_UNCOMMITTED, READ_COMMITTED):
        assert read_all(env.rlm, TP, iso) == expected[iso]
        # one big fetch per call as well as many small ones
        assert read_all(env.rlm, TP, iso, max_bytes=1 << 20, max_records=10_000) == expected[iso]
    assert env.rlm.cache.used_bytes <= 64 * 1024

    env.restart()
    for iso in (READ_UNCOMMITTED, READ_COMMITTED):
        assert read_all(env.rlm, TP, iso, max_bytes=3000, max_records=50) == expected[iso]
    # a fresh tier pass after the restart copies nothing again
    assert env.rlm.tier(TP).copied == []
    env.close()
