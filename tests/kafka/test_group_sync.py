"""GroupSync, the acks=-1 group commit: a partition fsynced at most once for every request that waited while the one
before ran, failures handed to the requests that needed that partition only, and the lane's finish step feeding it."""

from __future__ import annotations

import errno
import gc
import os
import threading
import time
from collections.abc import Sequence
from pathlib import Path

import pytest

from log.config import LogConfig
from log.flush import FlushTracker, syncfs_available
from log.local_log import LocalLog
from log.record.builder import RecordBatchBuilder
from service.config import load_config
from service.kafka.durability import GroupSync, NeedsDurable, group_sync_for
from service.node import Node

_needs_syncfs = pytest.mark.skipif(not syncfs_available(), reason="syncfs(2) is Linux's")


class _SlowTracker(FlushTracker):
    """A FlushTracker whose fsyncs are counted, slow (so others queue behind one) and, when told, fail."""

    def __init__(self) -> None:
        super().__init__()
        self.calls: list[LocalLog] = []
        self.started = threading.Event()
        self.release = threading.Event()
        self.fail: set[LocalLog] = set()
        self.fds: list[int | None] = []

    def sync(self, log: LocalLog) -> int:
        self.calls.append(log)
        self.started.set()
        assert self.release.wait(10)
        if log in self.fail:
            raise OSError(5, "Input/output error")
        return super().sync(log)

    def sync_on_fs(self, logs: Sequence[LocalLog], fd: int | None = None) -> dict[LocalLog, int]:
        self.calls.append(tuple(logs))  # type: ignore[arg-type]
        self.fds.append(fd)
        assert self.release.wait(10)
        if self.fail & set(logs):
            raise OSError(5, "Input/output error")
        return super().sync_on_fs(logs, fd)


def _log(tmp_path: Path, name: str) -> LocalLog:
    return LocalLog(tmp_path / name, LogConfig.from_dict({}))


def _append(log: LocalLog, n: int = 1) -> int:
    b = RecordBatchBuilder(0)
    for i in range(n):
        b.append(i, 1000 + i, b"k", b"v")
    return log.append_batches(b.build()).last_offset + 1


def test_a_request_that_waited_behind_an_fsync_of_its_partition_needs_no_fsync_of_its_own(tmp_path: Path) -> None:
    log = _log(tmp_path, "t-0")
    tracker = _SlowTracker()
    gs = GroupSync(tracker, use_syncfs=False)
    first_end = _append(log)
    second_end = _append(log)  # appended before the first fsync reads the log end: that fsync covers it
    failed: dict[int, dict[LocalLog, Exception]] = {}
    a = threading.Thread(target=lambda: failed.__setitem__(1, gs.make_durable({log: first_end})))
    a.start()
    assert tracker.started.wait(5)
    b = threading.Thread(target=lambda: failed.__setitem__(2, gs.make_durable({log: second_end})))
    b.start()
    time.sleep(0.1)  # b waits on the partition's fsync lock
    tracker.release.set()
    a.join(5)
    b.join(5)
    assert failed == {1: {}, 2: {}}
    assert tracker.calls == [log] and gs.syncs == 1 and gs.durable_offset(log) == second_end
    assert gs.make_durable({log: second_end}) == {} and gs.syncs == 1  # already durable: no fsync
    third_end = _append(log)
    assert gs.make_durable({log: third_end}) == {} and gs.syncs == 2
    log.close()


def test_a_failed_fsync_fails_the_requests_that_needed_that_partition_and_is_tried_again(tmp_path: Path) -> None:
    good, bad = _log(tmp_path, "t-0"), _log(tmp_path, "t-1")
    tracker = _SlowTracker()
    tracker.release.set()
    tracker.fail.add(bad)
    gs = GroupSync(tracker, use_syncfs=False)
    needs_good = NeedsDurable({good: _append(good)})
    needs_both = NeedsDurable({good: _append(good), bad: _append(bad)})
    gs.finish_job([needs_good, needs_both])
    assert needs_good.sync_failed == {}
    assert list(needs_both.sync_failed) == [bad] and isinstance(needs_both.sync_failed[bad], OSError)
    assert gs.durable_offset(bad) == -1 and gs.answered == 1
    assert tracker.calls.count(good) == 1  # one fsync of a partition for the whole job
    tracker.fail.clear()
    assert gs.make_durable({bad: bad.log_end_offset}) == {}
    assert gs.durable_offset(bad) == bad.log_end_offset
    good.close()
    bad.close()


@pytest.mark.parametrize("use_syncfs", [False, pytest.param(True, marks=_needs_syncfs)])
def test_concurrent_jobs_on_shared_partitions_each_end_durable(tmp_path: Path, use_syncfs: bool,
                                                              monkeypatch: pytest.MonkeyPatch) -> None:
    _as_ext4(monkeypatch, tmp_path)
    threads = 4
    logs = [_log(tmp_path, f"t-{i}") for i in range(3)]
    gs = GroupSync(FlushTracker(), use_syncfs=use_syncfs)
    errors: list[BaseException] = []

    def job(seed: int) -> None:
        try:
            for i in range(20):
                ends = {log: _append(log) for log in logs[(seed + i) % 3:]}
                assert gs.make_durable(ends) == {}
                for log, end in ends.items():
                    assert gs.durable_offset(log) >= end
        except BaseException as e:  # noqa: BLE001 - reported below
            errors.append(e)

    ts = [threading.Thread(target=job, args=(s,)) for s in range(threads)]
    for t in ts:
        t.start()
    for t in ts:
        t.join(30)
    assert not errors
    for log in logs:
        log.close()


def _as_ext4(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """Whatever tmp_path is on here (overlay, tmpfs, ext4), let it count as a file system syncfs may sync."""
    from service.kafka import durability

    monkeypatch.setattr(durability, "mounted_file_systems", lambda: {os.stat(tmp_path).st_dev: "ext4"})
    monkeypatch.setattr(durability, "dirty_bytes", lambda: 0)  # not whatever else this machine is writing now


@_needs_syncfs
def test_partitions_of_one_file_system_share_one_syncfs(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    _as_ext4(monkeypatch, tmp_path)
    a, b, c = (_log(tmp_path, f"t-{i}") for i in range(3))
    tracker = _SlowTracker()
    tracker.release.set()
    gs = GroupSync(tracker)
    assert gs.use_syncfs
    ends = {a: _append(a, 3), b: _append(b)}
    assert gs.make_durable(ends) == {}
    assert tracker.calls == [(a, b)] and gs.syncs == 1
    assert gs.durable_offset(a) == 3 and gs.durable_offset(b) == 1
    # through one descriptor on the partitions' parent directory, kept open: no directory opened per sync
    assert tracker.fds[0] is not None and os.path.samestat(os.fstat(tracker.fds[0]), os.stat(tmp_path))
    assert gs.make_durable({a: 3, c: -1}) == {} and gs.syncs == 1  # nothing left to sync
    assert gs.make_durable({c: _append(c)}) == {} and tracker.calls[-1] is c  # one log: its own fsync
    tracker.fail.add(b)
    ends = {a: _append(a), b: _append(b)}
    failed = gs.make_durable(ends)
    assert set(failed) == {a, b} and all(isinstance(e, OSError) for e in failed.values())  # none is known durable
    assert gs.durable_offset(a) == 3
    assert set(tracker.fds) == {tracker.fds[0]}
    fd = tracker.fds[0]
    assert fd is not None
    del gs, failed  # (the failures' tracebacks hold the GroupSync too)
    gc.collect()
    with pytest.raises(OSError):  # closed with its GroupSync
        os.fstat(fd)
    for log in (a, b, c):
        log.close()


def test_the_nodes_ack_sync_method_chooses_syncfs_or_fsync(tmp_path: Path) -> None:
    for method, expected in (("fsync", False), ("syncfs", syncfs_available())):
        node = Node(load_config({"data_dir": tmp_path / method, "ack_sync_method": method}, env={}))
        try:
            assert group_sync_for(node).use_syncfs is expected
            assert group_sync_for(node) is group_sync_for(node)
        finally:
            node.shutdown()


@_needs_syncfs
def test_a_refused_syncfs_falls_back_to_fsync_for_good(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A sandbox that refuses syncfs(2) (ENOSYS, EPERM) must not fail acks=-1 requests: each log is fsynced instead,
    from then on; a real writeback error (EIO) stays a failure (the test above)."""
    _as_ext4(monkeypatch, tmp_path)
    a, b = _log(tmp_path, "t-0"), _log(tmp_path, "t-1")
    tracker = FlushTracker()

    def refused(_logs: Sequence[LocalLog], _fd: int | None = None) -> dict[LocalLog, int]:
        raise OSError(errno.ENOSYS, "Function not implemented")

    monkeypatch.setattr(tracker, "sync_on_fs", refused)
    gs = GroupSync(tracker, use_syncfs=True)
    assert gs.make_durable({a: _append(a), b: _append(b)}) == {}
    assert not gs.use_syncfs and gs.durable_offset(a) == 1 and gs.durable_offset(b) == 1 and gs.syncs == 2
    a.close()
    b.close()


def test_syncfs_only_where_the_file_system_is_known_to_commit_on_it(tmp_path: Path) -> None:
    from log.flush import SYNCFS_FILE_SYSTEMS, mounted_file_systems, syncfs_device_of

    info = tmp_path / "mountinfo"
    info.write_text("22 1 8:1 / / rw,relatime shared:1 - ext4 /dev/sda1 rw\n"
                    "40 22 0:45 / /mnt/bucket rw,nosuid - fuse.s3fs s3fs rw,user_id=0\n"
                    "41 22 0:46 / /data rw - xfs /dev/sdb rw\n"
                    "garbage line\n")
    types = mounted_file_systems(str(info))
    assert types == {os.makedev(8, 1): "ext4", os.makedev(0, 45): "fuse.s3fs", os.makedev(0, 46): "xfs"}
    assert {"ext4", "xfs"} <= SYNCFS_FILE_SYSTEMS and "fuse.s3fs" not in SYNCFS_FILE_SYSTEMS
    assert mounted_file_systems(str(tmp_path / "missing")) == {}
    log = _log(tmp_path, "t-0")
    dev = os.stat(log.dir).st_dev
    if syncfs_available():
        assert syncfs_device_of(log, {dev: "ext4"}) == dev
    assert syncfs_device_of(log, {dev: "fuse.sshfs"}) is None
    assert syncfs_device_of(log, {}) is None
    log.close()


@_needs_syncfs
def test_with_much_else_dirty_each_partition_is_fsynced_instead_of_one_syncfs(tmp_path: Path,
                                                                              monkeypatch: pytest.MonkeyPatch) -> None:
    """A syncfs writes everything dirty on the file system first: on the Kafka bench a gigabyte of read-cache files
    made one take 498 ms. While more than SYNCFS_MAX_DIRTY_BYTES is dirty, each partition gets its own fsync (the old
    code used the syncfs whatever was dirty); once little is, they share a syncfs again."""
    from service.kafka import durability

    _as_ext4(monkeypatch, tmp_path)
    dirty = [durability.SYNCFS_MAX_DIRTY_BYTES + 1]
    monkeypatch.setattr(durability, "dirty_bytes", lambda: dirty[0])
    monkeypatch.setattr(durability, "DIRTY_CHECK_INTERVAL_S", 0.0)
    a, b = _log(tmp_path, "t-0"), _log(tmp_path, "t-1")
    tracker = _SlowTracker()
    tracker.release.set()
    gs = GroupSync(tracker, use_syncfs=True)
    assert gs.make_durable({a: _append(a), b: _append(b)}) == {}
    assert sorted(map(id, tracker.calls)) == sorted((id(a), id(b))) and gs.dirty_fallbacks == 1
    assert gs.durable_offset(a) == 1 and gs.durable_offset(b) == 1 and gs.use_syncfs
    dirty[0] = durability.SYNCFS_MAX_DIRTY_BYTES
    tracker.calls.clear()
    assert gs.make_durable({a: _append(a), b: _append(b)}) == {}
    assert tracker.calls == [(a, b)] and gs.dirty_fallbacks == 1
    for log in (a, b):
        log.close()


def test_dirty_bytes_reads_dirty_and_writeback_from_meminfo(tmp_path: Path) -> None:
    from log.flush import MEMINFO, dirty_bytes

    meminfo = tmp_path / "meminfo"
    meminfo.write_text("MemTotal:       32000000 kB\nDirty:              1200 kB\nWriteback:            34 kB\n"
                       "WritebackTmp:          0 kB\n")
    assert dirty_bytes(str(meminfo)) == (1200 + 34) * 1024
    meminfo.write_text("Dirty:              1200 kB\n")  # no Writeback line: unknown
    assert dirty_bytes(str(meminfo)) is None
    assert dirty_bytes(str(tmp_path / "missing")) is None
    if os.path.exists(MEMINFO):
        got = dirty_bytes()
        assert got is not None and got >= 0
