"""One bad file must not take down the node.

A damaged partition directory takes only that partition offline, with a reason that names
the file and what to do; a corrupt cleaner-offset-checkpoint reads as empty and is
rebuilt; a garbage topics.json is restored from its backup or refused with a clear
message; temp files of interrupted atomic writes are removed when the data dir opens.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from log.checkpoint import OffsetCheckpointFile, corrupt_checkpoints_rebuilt
from log.clock import MockClock
from log.errors import InvalidConfigError, PartitionOfflineError
from log.fetch import records_from_batches
from log.local_log import RecordSpec
from log.log_manager import LogManager
from log.record import ControlRecordType
from log.types import TopicPartition

T0, T1 = TopicPartition("t", 0), TopicPartition("t", 1)


def _fill(d: Path, clock: MockClock, n: int = 30) -> list[Path]:
    """Topic t, 2 partitions of n records in 5-record segments; returns t-0's segment files."""
    lm = LogManager(d, clock=clock)
    lm.create_topic("t", 2, {"segment.bytes": 400, "cleanup.policy": "compact"})
    for tp in (T0, T1):
        log = lm.get_log(tp)
        log.assign_epoch(1)
        for i in range(n):
            clock.advance(10)
            log.append_records([RecordSpec(f"k{i}".encode(), f"v{i}".encode())])
    segs = [s.log_path for s in lm.get_log(T0).all_segments()]
    lm.close()
    assert len(segs) >= 4
    return segs


def _offsets(lm: LogManager, tp: TopicPartition) -> list[int]:
    log = lm.get_log(tp)
    batches = log.read(log.log_start_offset, max_bytes=1 << 30)
    return [r.offset for r in records_from_batches(batches, log.log_start_offset, max_records=10**9).records]


def _snapshot(d: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted((d / "t-0").iterdir()) if p.is_file()}


@pytest.fixture
def data(tmp_path: Path) -> Path:
    return tmp_path / "data"


def _expect_offline(lm: LogManager, *words: str) -> str:
    reason = lm.offline_partitions()[T0]
    for w in words:
        assert w in reason, reason
    assert T0 not in lm.all_logs()
    with pytest.raises(PartitionOfflineError, match="offline") as err:
        lm.get_log(T0)
    assert reason in str(err.value)
    # the rest of the node serves
    assert _offsets(lm, T1) == list(range(30))
    return reason


def test_zero_length_rolled_segment_is_a_gap_not_silently_accepted(data: Path, clock: MockClock) -> None:
    segs = _fill(data, clock)
    segs[1].write_bytes(b"")
    before = _snapshot(data)
    lm = LogManager(data, clock=clock)
    reason = _expect_offline(lm, str(segs[1]), "empty", "missing", "dump-log", "restore")
    assert "offsets 5.." in reason
    lm.close()
    assert _snapshot(data) == before  # an offline partition's files are left exactly as found


def test_truncated_rolled_segment_mid_batch_goes_offline(data: Path, clock: MockClock) -> None:
    segs = _fill(data, clock)
    raw = segs[1].read_bytes()
    segs[1].write_bytes(raw[:-20])
    lm = LogManager(data, clock=clock)
    _expect_offline(lm, str(segs[1]), "truncated")
    lm.close()
    assert segs[1].stat().st_size == len(raw) - 20  # nothing cut


def test_rolled_segment_truncated_at_a_batch_boundary_goes_offline(data: Path, clock: MockClock) -> None:
    segs = _fill(data, clock)
    raw = segs[2].read_bytes()
    first = int.from_bytes(raw[8:12], "big") + 12  # one whole batch kept, the others gone
    segs[2].write_bytes(raw[:first])
    lm = LogManager(data, clock=clock)
    _expect_offline(lm, str(segs[2]), "truncated", "missing")
    lm.close()
    # and it stays offline on the next start: loading destroyed no evidence
    lm = LogManager(data, clock=clock)
    _expect_offline(lm, str(segs[2]))
    lm.close()


def test_empty_cleaned_segment_without_index_entries_is_accepted(data: Path, clock: MockClock) -> None:
    """Compaction may remove every record of a group: an empty rolled segment with empty
    indexes is legitimate (Kafka swaps it in), so it must not take the partition offline."""
    segs = _fill(data, clock)
    base = segs[1].name[:20]
    segs[1].write_bytes(b"")
    for suffix in (".index", ".timeindex"):
        (segs[1].parent / f"{base}{suffix}").write_bytes(b"")
    lm = LogManager(data, clock=clock)
    assert lm.offline_partitions() == {}
    assert _offsets(lm, T0) == [o for o in range(30) if not 5 <= o < 10]
    lm.close()


def test_garbage_leader_epoch_checkpoint_takes_its_partition_offline(data: Path, clock: MockClock) -> None:
    _fill(data, clock)
    path = data / "t-0" / "leader-epoch-checkpoint"
    path.write_bytes(b"\x00\xffgarbage\n")
    lm = LogManager(data, clock=clock)
    _expect_offline(lm, str(path), "Restore", "leadership")
    assert lm.get_log(T1).leader_epoch == 1
    lm.close()
    assert path.read_bytes() == b"\x00\xffgarbage\n"


def test_offline_partition_does_not_block_topic_changes(data: Path, clock: MockClock) -> None:
    segs = _fill(data, clock)
    segs[1].write_bytes(b"")
    lm = LogManager(data, clock=clock)
    assert T0 in lm.offline_partitions()
    lm.alter_config("t", {"min.cleanable.dirty.ratio": 0.1})
    assert lm.get_log(T1).config.get("min.cleanable.dirty.ratio") == 0.1
    assert lm.delete_topic("t") == [T0, T1]
    assert lm.offline_partitions() == {}
    assert not (data / "t-0").exists()
    lm.close()


def test_corrupt_cleaner_offset_checkpoint_reads_empty_and_is_rebuilt(tmp_path: Path) -> None:
    path = tmp_path / "cleaner-offset-checkpoint"
    path.write_text("0\n2\nt 0 5\n")
    f = OffsetCheckpointFile(path)
    before = corrupt_checkpoints_rebuilt(path)
    assert f.read() == {}  # Kafka: a corrupt cleaner checkpoint reads as none (re-cleaning, no loss)
    assert corrupt_checkpoints_rebuilt(path) == before + 1
    assert (tmp_path / "cleaner-offset-checkpoint.corrupt").read_text() == "0\n2\nt 0 5\n"
    assert f.read() == {}
    assert corrupt_checkpoints_rebuilt(path) == before + 1  # reported once, not on every read
    f.write({T0: 7})
    assert f.read() == {T0: 7}
    path.write_bytes(b"\xff\xfe\x00")
    assert f.read() == {}
    assert corrupt_checkpoints_rebuilt(path) == before + 2


def test_garbage_topics_json_is_restored_from_its_backup(data: Path, clock: MockClock) -> None:
    _fill(data, clock)
    good = (data / "topics.json").read_text()
    assert (data / "topics.json.bak").read_text() == good
    (data / "topics.json").write_text('{"topics": [{"name": "t"')
    lm = LogManager(data, clock=clock)
    assert [t.name for t in lm.topics()] == ["t"]
    assert _offsets(lm, T0) == list(range(30))
    lm.close()
    assert (data / "topics.json").read_text() == good


def test_garbage_topics_json_without_backup_refuses_to_start_naming_the_file(data: Path, clock: MockClock) -> None:
    _fill(data, clock)
    (data / "topics.json").write_text("not json")
    (data / "topics.json.bak").unlink()
    with pytest.raises(InvalidConfigError) as err:
        LogManager(data, clock=clock)
    msg = str(err.value)
    assert str(data / "topics.json") in msg and "restore" in msg
    (data / "topics.json").write_text('{"topics": [{"name": "t", "partitions": "x", "config": {}}]}')
    with pytest.raises(InvalidConfigError, match="topics.json"):
        LogManager(data, clock=clock)


def test_temp_files_of_interrupted_writes_are_removed_at_open(data: Path, clock: MockClock) -> None:
    _fill(data, clock)
    part = data / "t-0"
    planted = [part / "00000000000000000010.snapshot.tmp", part / "leader-epoch-checkpoint.tmp",
               data / "topics.json.tmp", data / "cleaner-offset-checkpoint.tmp", data / "topics.json.bak.tmp"]
    for p in planted:
        p.write_bytes(b"half-written")
    real = {p.name: p.read_bytes() for p in part.iterdir() if not p.name.endswith(".tmp")}
    lm = LogManager(data, clock=clock)
    assert [p for p in planted if p.exists()] == []
    assert lm.offline_partitions() == {}
    assert _offsets(lm, T0) == list(range(30))
    lm.close()
    after = {p.name: p.read_bytes() for p in part.iterdir()}
    for name, content in real.items():
        if name.endswith(".log") or name == "leader-epoch-checkpoint":
            assert after[name] == content


def test_corrupt_active_segment_goes_offline_without_truncating(data: Path, clock: MockClock) -> None:
    """Mid-file corruption of the active segment after a crash is reported, never cut away
    (valid batches follow it), and now takes only its partition offline."""
    segs = _fill(data, clock)
    active = segs[-1]
    (data / "t-0" / ".clean-shutdown").unlink()  # as after kill -9
    raw = bytearray(active.read_bytes())
    raw[70] ^= 0xFF  # inside the second batch; valid batches follow
    active.write_bytes(bytes(raw))
    lm = LogManager(data, clock=clock)
    _expect_offline(lm, str(active), "valid batches follow", "dump-log")
    lm.close()
    assert active.read_bytes() == bytes(raw)


def test_structurally_broken_active_segment_after_clean_shutdown_goes_offline(data: Path, clock: MockClock) -> None:
    segs = _fill(data, clock)
    active = segs[-1]
    raw = bytearray(active.read_bytes())
    raw[8:12] = (10**6).to_bytes(4, "big")  # the first batch claims a length the file does not have
    active.write_bytes(bytes(raw))
    for suffix in (".index", ".timeindex"):  # indexes to rebuild: the load walks the whole file
        active.with_suffix(suffix).unlink(missing_ok=True)
    lm = LogManager(data, clock=clock)
    _expect_offline(lm, str(active), "corrupt", "restore")
    lm.close()
    assert active.read_bytes() == bytes(raw)


def test_corrupt_transaction_index_goes_offline_with_advice(data: Path, clock: MockClock) -> None:
    """A .txnindex cannot be rebuilt from its segment alone (its aborted ranges need the producer
    state before the segment): the partition goes offline saying so, and the rebuildable
    indexes are left as they were."""
    _fill(data, clock)
    lm = LogManager(data, clock=clock)
    log = lm.get_log(T0)
    log.append_records([RecordSpec(b"tx", b"1")], producer_id=5, producer_epoch=0, base_sequence=0,
                       transactional=True)
    log.append_marker(5, 0, ControlRecordType.ABORT)
    txn = log.active_segment.txn_index.path
    lm.close()
    assert txn.stat().st_size == 34
    txn.write_bytes(b"\x01" * 33)
    index_files = {p.name: p.read_bytes() for p in (data / "t-0").glob("*index")}
    lm = LogManager(data, clock=clock)
    _expect_offline(lm, str(txn), "cannot be rebuilt", "restore")
    lm.close()
    assert {p.name: p.read_bytes() for p in (data / "t-0").glob("*index")} == index_files
