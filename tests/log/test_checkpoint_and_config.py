from __future__ import annotations

import pytest

from log.checkpoint import LeaderEpochCheckpointFile, OffsetCheckpointFile
from log.config import CONFIG_DEF, DEFAULT_CONFIG, LogConfig, config_reference_markdown
from log.errors import CorruptRecordError, InvalidConfigError
from log.types import EpochEntry, TopicPartition


def test_cleaner_offset_checkpoint_format(tmp_path):
    f = OffsetCheckpointFile(tmp_path / "cleaner-offset-checkpoint")
    assert f.read() == {}
    f.write({TopicPartition("__consumer_offsets", 17): 58})
    assert (tmp_path / "cleaner-offset-checkpoint").read_text() == "0\n1\n__consumer_offsets 17 58\n"
    (tmp_path / "cleaner-offset-checkpoint").write_text(
        "0\n3\n__consumer_offsets 28 2\n__consumer_offsets 17 1\n__consumer_offsets 39 18\n")
    assert f.read()[TopicPartition("__consumer_offsets", 39)] == 18


def test_checkpoint_errors_name_the_file(tmp_path):
    p = tmp_path / "leader-epoch-checkpoint"
    p.write_text("0\n2\n0 5\n")
    with pytest.raises(CorruptRecordError, match="2 entries") as err:
        LeaderEpochCheckpointFile(p).read()
    assert str(p) in str(err.value)
    p.write_text("1\n0\n")
    with pytest.raises(CorruptRecordError, match="version"):
        LeaderEpochCheckpointFile(p).read()
    p.write_bytes(b"\xff\xfe garbage")
    with pytest.raises(CorruptRecordError, match="not UTF-8"):
        LeaderEpochCheckpointFile(p).read()


def test_leader_epoch_checkpoint_format(tmp_path):
    f = LeaderEpochCheckpointFile(tmp_path / "leader-epoch-checkpoint")
    f.write([EpochEntry(0, 0), EpochEntry(2, 3), EpochEntry(10, 4)])
    assert (tmp_path / "leader-epoch-checkpoint").read_text() == "0\n3\n0 0\n2 3\n10 4\n"
    assert f.read()[-1] == EpochEntry(10, 4)


def test_config_defaults_are_kafkas():
    assert DEFAULT_CONFIG.get("segment.bytes") == 1073741824
    assert DEFAULT_CONFIG.get("min.cleanable.dirty.ratio") == 0.5
    assert DEFAULT_CONFIG.get("delete.retention.ms") == 86400000
    assert DEFAULT_CONFIG.get("max.compaction.lag.ms") == 2**63 - 1
    assert DEFAULT_CONFIG.compact and not DEFAULT_CONFIG.delete


def test_config_errors_name_key_value_and_range():
    with pytest.raises(InvalidConfigError, match=r"min\.compaction\.lag\.ms \(5000\) > max\.compaction\.lag\.ms \(10\)"):
        LogConfig.from_dict({"min.compaction.lag.ms": 5000, "max.compaction.lag.ms": 10})
    with pytest.raises(InvalidConfigError, match=r"min\.cleanable\.dirty\.ratio=1\.5.*between 0\.0 and 1\.0"):
        LogConfig.from_dict({"min.cleanable.dirty.ratio": 1.5})
    with pytest.raises(InvalidConfigError, match="unknown config key"):
        LogConfig.from_dict({"segment.byte": 1})
    # a Kafka config refused on purpose says why, not "unknown"
    with pytest.raises(InvalidConfigError, match="remote.log.copy.disable is a Kafka topic config tiercompact does "
                                                 "not support: copying to the object store cannot be paused"):
        LogConfig.from_dict({"remote.log.copy.disable": "true"})
    with pytest.raises(InvalidConfigError, match="cleanup.policy"):
        LogConfig.from_dict({"cleanup.policy": "compact,compact"})
    with pytest.raises(InvalidConfigError, match="expected int"):
        LogConfig.from_dict({"segment.bytes": "lots"})


def test_patch_semantics_and_max_segment_ms():
    cfg = LogConfig.from_dict({"cleanup.policy": "compact", "segment.ms": 5000})
    cfg2 = cfg.with_overrides({"max.compaction.lag.ms": "1000"})
    assert cfg2.max_segment_ms == 1000 and cfg.max_segment_ms == 5000
    assert cfg2.with_overrides({"max.compaction.lag.ms": None}).overrides == {"cleanup.policy": "compact",
                                                                              "segment.ms": 5000}
    with pytest.raises(InvalidConfigError):
        cfg2.with_overrides({"min.compaction.lag.ms": 2000})


def test_reference_table_lists_every_key():
    md = config_reference_markdown()
    assert all(f"`{k}`" in md for k in CONFIG_DEF)
