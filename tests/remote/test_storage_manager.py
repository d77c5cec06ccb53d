"""RemoteStorageManager over a FaultyObjectStore: copy/fetch/delete with injected errors,
timeouts and truncation must retry or fail clearly, never leaving partial objects."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from log.clock import MockClock
from log.errors import InvalidRequestError
from log.types import TopicPartition
from metadata.types import RemoteLogSegmentId, RemoteLogSegmentMetadata
from remote.errors import (
    ObjectNotFoundError,
    RemoteStorageIOError,
    RemoteStorageTimeoutError,
    RemoteStorageTransientError,
)
from remote.file_store import FileObjectStore
from remote.storage_manager import IndexType, LogSegmentData, RemoteStorageManager
from tests.support.faults import FaultyObjectStore

TP = TopicPartition("orders", 2)


@pytest.fixture
def files(tmp_path: Path) -> LogSegmentData:
    d = tmp_path / "local"
    d.mkdir()
    (d / "00000000000000000100.log").write_bytes(os.urandom(50_000))
    (d / "00000000000000000100.index").write_bytes(os.urandom(800))
    (d / "00000000000000000100.timeindex").write_bytes(os.urandom(1200))
    (d / "00000000000000000100.txnindex").write_bytes(os.urandom(340))
    return LogSegmentData(d / "00000000000000000100.log", d / "00000000000000000100.index",
                          d / "00000000000000000100.timeindex", d / "00000000000000000100.txnindex",
                          b"0\n1\n0 100\n", b"producer snapshot bytes")


@pytest.fixture
def store(tmp_path: Path) -> FaultyObjectStore:
    return FaultyObjectStore(FileObjectStore(tmp_path / "remote"))


@pytest.fixture
def rsm(store: FaultyObjectStore) -> RemoteStorageManager:
    return RemoteStorageManager(store, max_attempts=3, clock=MockClock())


def md_for(data: LogSegmentData) -> RemoteLogSegmentMetadata:
    return RemoteLogSegmentMetadata(RemoteLogSegmentId.generate(TP), 100, 199, 5, 1, 5,
                                    data.log_segment.stat().st_size, {0: 100})


def test_roundtrip_and_key_layout(rsm: RemoteStorageManager, store: FaultyObjectStore, files: LogSegmentData,
                                  tmp_path: Path) -> None:
    md = md_for(files)
    rsm.copy_log_segment_data(md, files)
    prefix = f"orders-2/00000000000000000100-{md.id}"
    assert sorted(store.list("orders-2/")) == sorted(
        prefix + s for s in (".log", ".index", ".timeindex", ".txnindex", ".snapshot", ".leader_epoch_checkpoint"))
    # every key a copy may write: a key index too (none was given here; one may be added later)
    assert sorted(rsm.object_keys(md)) == sorted([*store.list("orders-2/"), prefix + ".keyindex"])
    log = files.log_segment.read_bytes()
    assert rsm.fetch_log_segment(md, 0) == log
    assert rsm.fetch_log_segment(md, 1000, 2000) == log[1000:2000]
    assert rsm.fetch_log_segment(md, 49_990, 10**9) == log[49_990:]
    assert rsm.fetch_log_segment_to_file(md, tmp_path / "dl", 10, 20_010) == 20_000
    assert (tmp_path / "dl").read_bytes() == log[10:20_010]
    assert rsm.fetch_index(md, IndexType.OFFSET) == files.offset_index.read_bytes()
    assert rsm.fetch_index(md, IndexType.TIMESTAMP) == files.time_index.read_bytes()
    assert rsm.fetch_index(md, IndexType.TRANSACTION) == files.transaction_index.read_bytes()  # type: ignore[union-attr]
    assert rsm.fetch_index(md, IndexType.LEADER_EPOCH) == b"0\n1\n0 100\n"
    assert rsm.fetch_index(md, IndexType.PRODUCER_SNAPSHOT) == b"producer snapshot bytes"
    rsm.copy_log_segment_data(md, files)  # copying again overwrites
    rsm.delete_log_segment_data(md)
    rsm.delete_log_segment_data(md)  # idempotent
    assert list(store.list("orders-2/")) == []
    with pytest.raises(ObjectNotFoundError, match=md.id):
        rsm.fetch_log_segment(md, 0)


def test_missing_txn_index_reads_as_empty(rsm: RemoteStorageManager, files: LogSegmentData) -> None:
    data = LogSegmentData(files.log_segment, files.offset_index, files.time_index, None, b"0\n0\n")
    md = md_for(data)
    rsm.copy_log_segment_data(md, data)
    assert rsm.fetch_index(md, IndexType.TRANSACTION) == b""
    rsm.delete_log_segment_data(md)
    with pytest.raises(ObjectNotFoundError):
        rsm.fetch_index(md, IndexType.TRANSACTION)


def test_metadata_size_must_match_the_file(rsm: RemoteStorageManager, files: LogSegmentData,
                                           store: FaultyObjectStore) -> None:
    md = RemoteLogSegmentMetadata(RemoteLogSegmentId.generate(TP), 100, 199, 5, 1, 5, 7, {0: 100})
    with pytest.raises(InvalidRequestError, match="says 7"):
        rsm.copy_log_segment_data(md, files)
    assert store.calls["put"] == 0


@pytest.mark.parametrize("kind", ["transient", "timeout", "truncate"])
def test_copy_retries_transient_faults(rsm: RemoteStorageManager, store: FaultyObjectStore,
                                       files: LogSegmentData, kind: str) -> None:
    store.inject("put", kind, on_calls={1, 3})
    md = md_for(files)
    rsm.copy_log_segment_data(md, files)
    assert rsm.fetch_log_segment(md, 0) == files.log_segment.read_bytes()
    assert rsm.fetch_index(md, IndexType.OFFSET) == files.offset_index.read_bytes()
    assert sum(1 for _, _, k in store.log if k == kind) == 2


@pytest.mark.parametrize("kind,error", [("error", RemoteStorageIOError), ("transient", RemoteStorageTransientError),
                                        ("timeout", RemoteStorageTimeoutError), ("truncate", RemoteStorageIOError),
                                        ("crash", RuntimeError)])
def test_failed_copy_leaves_nothing(rsm: RemoteStorageManager, store: FaultyObjectStore, files: LogSegmentData,
                                    kind: str, error: type[Exception]) -> None:
    store.inject("put", kind, key_contains=".timeindex")  # fails after .log and .index were written
    md = md_for(files)
    with pytest.raises(error) as ei:
        rsm.copy_log_segment_data(md, files)
    if kind != "crash":
        assert ".timeindex" in str(ei.value)
    if kind == "truncate":
        assert "uploaded" in str(ei.value) and "of 1200 bytes" in str(ei.value)
    assert list(store.list("")) == []


@pytest.mark.parametrize("op", ["get_range", "get_to_file", "get"])
@pytest.mark.parametrize("kind", ["transient", "timeout", "truncate"])
def test_fetch_retries_transient_faults_and_short_reads(rsm: RemoteStorageManager, store: FaultyObjectStore,
                                                        files: LogSegmentData, tmp_path: Path, op: str,
                                                        kind: str) -> None:
    md = md_for(files)
    rsm.copy_log_segment_data(md, files)
    store.inject(op, kind, times=2)
    log = files.log_segment.read_bytes()
    if op == "get_range":
        assert rsm.fetch_log_segment(md, 100, 40_100) == log[100:40_100]
    elif op == "get_to_file":
        assert rsm.fetch_log_segment_to_file(md, tmp_path / "out") == len(log)
        assert (tmp_path / "out").read_bytes() == log
    else:
        if kind == "truncate":  # whole-object index reads cannot know the expected size
            return
        assert rsm.fetch_index(md, IndexType.TIMESTAMP) == files.time_index.read_bytes()


@pytest.mark.parametrize("kind,error", [("transient", RemoteStorageTransientError),
                                        ("truncate", RemoteStorageIOError), ("error", RemoteStorageIOError)])
def test_fetch_gives_up_with_a_clear_error(rsm: RemoteStorageManager, store: FaultyObjectStore,
                                           files: LogSegmentData, tmp_path: Path, kind: str,
                                           error: type[Exception]) -> None:
    md = md_for(files)
    rsm.copy_log_segment_data(md, files)
    store.inject("get_to_file", kind)
    with pytest.raises(error, match=md.id):
        rsm.fetch_log_segment_to_file(md, tmp_path / "out")
    assert not (tmp_path / "out").exists()
    assert store.calls["get_to_file"] == (1 if kind == "error" else 3)


def test_delete_retries_and_is_safe_to_repeat(rsm: RemoteStorageManager, store: FaultyObjectStore,
                                              files: LogSegmentData) -> None:
    md = md_for(files)
    rsm.copy_log_segment_data(md, files)
    store.inject("delete", "timeout", on_calls={1, 2})
    rsm.delete_log_segment_data(md)
    assert list(store.list("")) == []
    rsm.copy_log_segment_data(md, files)
    store.inject("delete", "error", key_contains=".index")
    with pytest.raises(RemoteStorageIOError, match=r"\.index"):
        rsm.delete_log_segment_data(md)
    store.clear()
    rsm.delete_log_segment_data(md)
    assert list(store.list("")) == []
