"""Produce-side batch validation (log/batch_validation.py) and Kafka's idempotent producer
checks (log/producer_state.py), on batches a real client library builds (kafka-python)."""

from __future__ import annotations

import struct

import pytest
from kafka.record.default_records import DefaultRecordBatchBuilder

from log.batch_validation import validate_produce_batch
from log.config import LogConfig
from log.errors import (
    CorruptRecordError,
    InvalidProducerEpochError,
    InvalidRecordError,
    InvalidTimestampError,
    OutOfOrderSequenceError,
    RecordTooLargeError,
    UnknownProducerIdError,
)
from log.record import RecordBatch, crc32c
from log.record import kernels as codec_kernels

NOW = 1_700_000_000_000


@pytest.fixture(autouse=True, params=["compiled", "pure"])
def which_kernels(request):
    """Every case twice: with the compiled record checker and with the reference walk alone."""
    k = codec_kernels.compiled_kernels() if request.param == "compiled" else codec_kernels.pure_kernels()
    prev = codec_kernels.use_kernels(k)
    try:
        yield request.param
    finally:
        codec_kernels.use_kernels(prev)

CODECS = {"none": 0, "gzip": 1, "snappy": 2, "lz4": 3, "zstd": 4}


def kbatch(records, *, codec="none", pid=-1, epoch=-1, seq=-1, ts=NOW, txn=False) -> bytearray:
    b = DefaultRecordBatchBuilder(2, CODECS[codec], txn, pid, epoch, seq, 1 << 20)
    for i, (k, v) in enumerate(records):
        b.append(i, ts + i, k, v, [])
    return b.build()


def compact(**extra) -> LogConfig:
    return LogConfig.from_dict({"cleanup.policy": "compact", **extra})


DELETE = LogConfig.from_dict({"cleanup.policy": "delete"})


@pytest.mark.parametrize("codec", list(CODECS))
def test_a_clients_batch_passes_and_comes_back_as_the_same_bytes(codec):
    data = kbatch([(b"k%d" % i, b"v" * 50) for i in range(20)], codec=codec)
    out = validate_produce_batch(bytes(data), compact(), NOW)
    assert bytes(out) == bytes(data)
    assert RecordBatch(out).records_count == 20


def test_keyless_records_on_a_compacted_topic_are_refused_per_record():
    data = kbatch([(b"a", b"1"), (None, b"2"), (b"c", b"3"), (None, b"4")])
    with pytest.raises(InvalidRecordError) as e:
        validate_produce_batch(data, compact(), NOW, partition="t-0")
    assert [i for i, _ in e.value.record_errors] == [1, 3]
    assert "without a key" in e.value.record_errors[0][1]
    validate_produce_batch(data, DELETE, NOW)  # a delete topic takes them


def test_timestamps_outside_the_difference_are_refused():
    cfg = compact(**{"message.timestamp.difference.max.ms": 1000})
    validate_produce_batch(kbatch([(b"a", b"1")], ts=NOW - 999), cfg, NOW)
    with pytest.raises(InvalidTimestampError) as e:
        validate_produce_batch(kbatch([(b"a", b"1"), (b"b", b"2")], ts=NOW + 1000), cfg, NOW)
    assert [i for i, _ in e.value.record_errors] == [1]
    # LogAppendTime topics ignore the producer's timestamps
    lat = compact(**{"message.timestamp.difference.max.ms": 1000, "message.timestamp.type": "LogAppendTime"})
    validate_produce_batch(kbatch([(b"a", b"1")], ts=0), lat, NOW)


def test_timestamps_before_and_after_bounds_are_checked_each_side_as_kip_937():
    """message.timestamp.before.max.ms / after.max.ms bound each side on its own and take precedence over
    message.timestamp.difference.max.ms where set (both kernels: the compiled one checks the narrower side both
    ways, the reference walk then checks each side)."""
    cfg = compact(**{"message.timestamp.before.max.ms": 10_000, "message.timestamp.after.max.ms": 1000,
                     "message.timestamp.difference.max.ms": 5})
    assert cfg.timestamp_bounds == (10_000, 1000)
    validate_produce_batch(kbatch([(b"a", b"1")], ts=NOW - 9_999), cfg, NOW)  # past the narrower side: fine
    validate_produce_batch(kbatch([(b"a", b"1")], ts=NOW + 1000), cfg, NOW)
    for ts in (NOW - 10_001, NOW + 1001):
        with pytest.raises(InvalidTimestampError) as e:
            validate_produce_batch(kbatch([(b"a", b"1")], ts=ts), cfg, NOW)
        assert "out of range" in e.value.record_errors[0][1]
    only_after = compact(**{"message.timestamp.after.max.ms": 1000})
    assert only_after.timestamp_bounds == (2**63 - 1, 1000)
    validate_produce_batch(kbatch([(b"a", b"1")], ts=0), only_after, NOW)  # any age: before is unset
    with pytest.raises(InvalidTimestampError):
        validate_produce_batch(kbatch([(b"a", b"1")], ts=NOW + 5000), only_after, NOW)


def test_crc_magic_size_and_count_checks():
    data = kbatch([(b"a", b"1"), (b"b", b"2")])
    bad = bytearray(data)
    bad[-1] ^= 1
    with pytest.raises(CorruptRecordError):
        validate_produce_batch(bad, compact(), NOW)
    bad = bytearray(data)
    bad[16] = 1
    with pytest.raises(InvalidRecordError):
        validate_produce_batch(bad, compact(), NOW)
    with pytest.raises(InvalidRecordError, match="exactly one"):
        validate_produce_batch(bytes(data) + bytes(data), compact(), NOW)
    with pytest.raises(CorruptRecordError):
        validate_produce_batch(bytes(data)[:-3], compact(), NOW)
    with pytest.raises(RecordTooLargeError):
        validate_produce_batch(data, compact(**{"max.message.bytes": 40}), NOW)
    # lastOffsetDelta that does not match the count (CRC fixed up so only that is wrong)
    bad = bytearray(data)
    struct.pack_into(">i", bad, 23, 5)
    struct.pack_into(">I", bad, 17, crc32c(bytes(bad[21:])))
    with pytest.raises(InvalidRecordError, match="lastOffsetDelta"):
        validate_produce_batch(bad, compact(), NOW)


def test_a_sequence_without_a_producer_id_is_accepted_as_kafka_does():
    # aiokafka's plain producer writes base sequence 0 with no producer id
    validate_produce_batch(kbatch([(b"a", b"1")], seq=0), compact(), NOW)
    with pytest.raises(InvalidRecordError, match="sequence"):
        validate_produce_batch(kbatch([(b"a", b"1")], pid=4, epoch=0, seq=-1), compact(), NOW)


def test_wrong_max_timestamp_is_fixed_with_a_new_crc():
    data = kbatch([(b"a", b"1"), (b"b", b"2")])
    struct.pack_into(">q", data, 35, 5)
    struct.pack_into(">I", data, 17, crc32c(bytes(data[21:])))
    out = validate_produce_batch(data, compact(), NOW)
    b = RecordBatch(out)
    assert b.max_timestamp == NOW + 1 and b.is_valid()


# ---- idempotence ------------------------------------------------------------------------

def _append(log, batch, **kw):
    return log.append_batches(validate_produce_batch(batch, log.config, NOW), strict_producers=True, **kw)


def test_retries_of_any_of_the_last_five_batches_get_their_offsets(make_log):
    log = make_log()
    sent = [kbatch([(b"k%d" % s, b"v")] * 2, pid=7, epoch=0, seq=2 * s) for s in range(6)]
    offsets = [(_append(log, bytes(b)).base_offset) for b in sent]
    assert offsets == [0, 2, 4, 6, 8, 10]
    for s in range(1, 6):
        res = _append(log, bytes(sent[s]))
        assert res.duplicate and (res.base_offset, res.last_offset) == (2 * s, 2 * s + 1)
    # the sixth-newest batch is forgotten: its retry is out of order
    with pytest.raises(OutOfOrderSequenceError):
        _append(log, bytes(sent[0]))
    assert log.log_end_offset == 12


def test_sequence_gaps_epochs_and_unknown_producers(make_log):
    log = make_log()
    with pytest.raises(UnknownProducerIdError):
        _append(log, kbatch([(b"a", b"1")], pid=3, epoch=0, seq=4))
    _append(log, kbatch([(b"a", b"1")], pid=3, epoch=0, seq=0))
    with pytest.raises(OutOfOrderSequenceError):
        _append(log, kbatch([(b"a", b"1")], pid=3, epoch=0, seq=2))
    with pytest.raises(OutOfOrderSequenceError):  # a new epoch starts at 0
        _append(log, kbatch([(b"a", b"1")], pid=3, epoch=1, seq=1))
    _append(log, kbatch([(b"a", b"1")], pid=3, epoch=1, seq=0))
    with pytest.raises(InvalidProducerEpochError):
        _append(log, kbatch([(b"a", b"1")], pid=3, epoch=0, seq=1))
    assert log.log_end_offset == 2


def test_the_producer_state_survives_an_unclean_restart(make_log):
    log = make_log()
    sent = [kbatch([(b"k", b"v%d" % s)], pid=11, epoch=2, seq=s) for s in range(4)]
    for b in sent:
        _append(log, bytes(b))
    log.flush()  # no close: the next open recovers as after a crash
    for seg in log.all_segments():
        seg.close()
    log2 = make_log()
    res = _append(log2, bytes(sent[1]))
    assert res.duplicate and res.base_offset == 1
    assert _append(log2, kbatch([(b"k", b"x")], pid=11, epoch=2, seq=4)).base_offset == 4


def test_the_appended_bytes_are_the_clients_with_offset_and_epoch_stamped(make_log):
    log = make_log()
    log.assign_epoch(3)
    _append(log, kbatch([(b"a", b"1")]))
    data = kbatch([(b"b", b"2"), (b"c", b"3")], codec="lz4")
    _append(log, bytes(data))
    stored = log.read(1)[0]
    raw = bytes(stored.raw)
    assert raw[12:] != bytes(data)[12:] and raw[17:] == bytes(data)[17:]  # only offset + epoch differ
    assert (stored.base_offset, stored.partition_leader_epoch) == (1, 3) and stored.is_valid()
