"""Produce and InitProducerId on the wire, against an in-process listener over a real Node: requests
encoded by kafka-python's generated classes, batches built by kafka-python's record builder, answers
as Kafka gives them (offsets, duplicates, per-partition and per-record error codes, acks=0)."""

from __future__ import annotations

import socket
import struct
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import kafka.errors as kerr
import pytest
from kafka.protocol.producer import InitProducerIdRequest, ProduceRequest
from kafka.record.default_records import DefaultRecordBatchBuilder

from log.record import RecordBatch
from service.config import load_config
from service.kafka.durability import group_sync_for
from service.kafka.listener import KafkaListener, KafkaListenerConfig
from service.kafka.registry import response_class_for
from service.node import Node
from tests.kafka.wire import wait_until

CODECS = {"none": 0, "gzip": 1, "snappy": 2, "lz4": 3, "zstd": 4}
PD = ProduceRequest.TopicProduceData.PartitionProduceData


class Wire:
    def __init__(self, port: int) -> None:
        self.sock = socket.create_connection(("127.0.0.1", port), timeout=30)
        self.cid = 0

    def send(self, req: Any, version: int) -> int:
        self.cid += 1
        req.with_header(correlation_id=self.cid, client_id="k2-test")
        self.sock.sendall(req.encode(version=version, header=True, framed=True))
        return self.cid

    def receive(self, req_cls: Any, version: int, cid: int) -> Any:
        size = struct.unpack(">i", self._read(4))[0]
        body = self._read(size)
        assert struct.unpack_from(">i", body, 0)[0] == cid
        return response_class_for(req_cls).decode(body, version=version, header=True)

    def call(self, req: Any, version: int) -> Any:
        return self.receive(type(req), version, self.send(req, version))

    def _read(self, n: int) -> bytes:
        buf = b""
        while len(buf) < n:
            chunk = self.sock.recv(n - len(buf))
            assert chunk, "connection closed"
            buf += chunk
        return buf


@pytest.fixture
def node(tmp_path: Path) -> Iterator[Node]:
    n = Node(load_config({"data_dir": tmp_path / "data"}, env={}))
    n.start()
    yield n
    n.shutdown()


@pytest.fixture
def wire(node: Node) -> Iterator[Wire]:
    listener = KafkaListener(node, KafkaListenerConfig(host="127.0.0.1", port=0)).start()
    w = Wire(listener.port)
    yield w
    w.sock.close()
    listener.stop()


def batch(records: list[tuple[bytes | None, bytes | None]], *, codec: str = "none", pid: int = -1, epoch: int = -1,
          seq: int = -1, ts: int | None = None) -> bytes:
    b = DefaultRecordBatchBuilder(2, CODECS[codec], False, pid, epoch, seq, 1 << 20)
    for i, (k, v) in enumerate(records):
        b.append(i, ts if ts is not None else 1_700_000_000_000 + i, k, v, [])
    return bytes(b.build())


def produce(wire: Wire, parts: dict[str, dict[int, bytes]], *, acks: int = -1, version: int = 9) -> Any:
    req = ProduceRequest(transactional_id=None, acks=acks, timeout_ms=5000, topic_data=[
        ProduceRequest.TopicProduceData(name=t, partition_data=[PD(index=i, records=r) for i, r in ps.items()])
        for t, ps in parts.items()])
    if acks == 0:
        wire.send(req, version)
        return None
    return wire.call(req, version)


def answer(resp: Any, topic: str, index: int = 0) -> Any:
    for t in resp.responses:
        if t.name == topic:
            for p in t.partition_responses:
                if p.index == index:
                    return p
    raise AssertionError(f"no answer for {topic}-{index}: {resp}")


def init_pid(wire: Wire, version: int = 4) -> int:
    r = wire.call(InitProducerIdRequest(transactional_id=None, transaction_timeout_ms=60000, producer_id=-1,
                                        producer_epoch=-1), version)
    assert r.error_code == 0
    assert r.producer_epoch == 0
    return int(r.producer_id)


def test_a_failed_fsync_answers_kafka_storage_error_for_acks_all_only(wire: Wire, node: Node,
                                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    node.create_topic("t", 2)
    tracker = group_sync_for(node).tracker

    def broken(log: Any) -> int:
        raise OSError(5, "Input/output error")

    monkeypatch.setattr(tracker, "sync", broken)
    monkeypatch.setattr(tracker, "sync_on_fs", broken)
    resp = produce(wire, {"t": {0: batch([(b"k", b"v")]), 1: batch([(b"k", b"w")])}})
    for i in (0, 1):
        p = answer(resp, "t", i)
        assert (p.error_code, p.base_offset) == (kerr.KafkaStorageError.errno, -1), p
        assert "fsync failed" in p.error_message
    assert answer(produce(wire, {"t": {0: batch([(b"k", b"x")])}}, acks=1), "t").base_offset == 1
    monkeypatch.undo()
    assert answer(produce(wire, {"t": {0: batch([(b"k", b"y")])}}), "t").base_offset == 2

def test_every_codec_and_acks_level_appends_the_clients_bytes(wire: Wire, node: Node) -> None:
    node.create_topic("t", 2)
    offsets = []
    for n, codec in enumerate(CODECS):
        for acks in (1, -1):
            data = batch([(b"k%d" % n, b"v" * 100), (b"j", b"w")], codec=codec)
            p = answer(produce(wire, {"t": {n % 2: data}}, acks=acks), "t", n % 2)
            assert (p.error_code, p.log_start_offset) == (0, 0), p
            offsets.append((n % 2, p.base_offset))
            stored = node.log("t", n % 2).read(p.base_offset)[0]
            assert bytes(stored.raw)[16:] == data[16:] and stored.base_offset == p.base_offset
    assert offsets == [(0, 0), (0, 2), (1, 0), (1, 2), (0, 4), (0, 6), (1, 4), (1, 6), (0, 8), (0, 10)]
    assert group_sync_for(node).syncs >= 1
    # acks=0: no answer at all; the next request's answer is the next one on the connection
    produce(wire, {"t": {0: batch([(b"z", b"0")])}}, acks=0)
    p = answer(produce(wire, {"t": {0: batch([(b"z", b"1")])}}), "t")
    assert p.base_offset == 13
    assert [r.value for b in node.log("t", 0).read(12) for r in b.records()] == [b"0", b"1"]


def test_idempotent_producer_retries_gaps_fencing_and_unknown_ids(wire: Wire, node: Node) -> None:
    node.create_topic("t", 1)
    pid = init_pid(wire)
    assert init_pid(wire, version=0) == pid + 1  # ids never repeat
    sent = [batch([(b"k", b"v%d" % s)], pid=pid, epoch=0, seq=s) for s in range(7)]
    assert [answer(produce(wire, {"t": {0: b}}), "t").base_offset for b in sent] == list(range(7))
    # a retry of any of the last five batches: their own offsets, nothing appended
    for s in range(2, 7):
        p = answer(produce(wire, {"t": {0: sent[s]}}), "t")
        assert (p.error_code, p.base_offset) == (0, s)
    assert node.log("t", 0).log_end_offset == 7
    codes = {
        "gap": batch([(b"k", b"x")], pid=pid, epoch=0, seq=9),
        "old": sent[0],  # older than the five remembered batches
        "unknown": batch([(b"k", b"x")], pid=pid + 1000, epoch=0, seq=3),
    }
    got = {name: answer(produce(wire, {"t": {0: b}}), "t").error_code for name, b in codes.items()}
    assert got == {"gap": kerr.OutOfOrderSequenceNumberError.errno, "old": kerr.OutOfOrderSequenceNumberError.errno,
                   "unknown": kerr.UnknownProducerIdError.errno}
    assert answer(produce(wire, {"t": {0: batch([(b"k", b"e1")], pid=pid, epoch=1, seq=0)}}), "t").error_code == 0
    fenced = answer(produce(wire, {"t": {0: batch([(b"k", b"x")], pid=pid, epoch=0, seq=7)}}), "t")
    assert fenced.error_code == kerr.InvalidProducerEpochError.errno
    assert node.log("t", 0).log_end_offset == 8


def test_min_insync_replicas_above_one_refuses_acks_all_as_kafka_does(wire: Wire, node: Node) -> None:
    """A partition has one copy (its ISR is the leader): with min.insync.replicas 2, acks=all is NOT_ENOUGH_REPLICAS
    and nothing is appended, as a Kafka broker answers; acks 1 and 0 are not affected."""
    node.create_topic("isr", 1, {"cleanup.policy": "delete", "min.insync.replicas": 2})
    refused = answer(produce(wire, {"isr": {0: batch([(b"a", b"1")])}}), "isr")
    assert refused.error_code == kerr.NotEnoughReplicasError.errno and "min.isr requirement of 2" in \
        refused.error_message
    assert node.log("isr", 0).log_end_offset == 0
    assert answer(produce(wire, {"isr": {0: batch([(b"a", b"1")])}}, acks=1), "isr").error_code == 0
    node.alter_config("isr", {"min.insync.replicas": None})
    assert answer(produce(wire, {"isr": {0: batch([(b"a", b"2")])}}), "isr").error_code == 0
    assert node.log("isr", 0).log_end_offset == 2


def test_bad_batches_get_kafkas_error_codes_and_nothing_is_appended(wire: Wire, node: Node) -> None:
    node.create_topic("c", 1)  # compacted (the default)
    node.create_topic("d", 1, {"cleanup.policy": "delete", "max.message.bytes": 300,
                               "message.timestamp.difference.max.ms": 60_000})
    corrupt = bytearray(batch([(b"a", b"1")]))
    corrupt[-1] ^= 0xFF
    keyless = batch([(b"a", b"1"), (None, b"2"), (b"c", b"3"), (None, b"4")])
    resp = produce(wire, {"c": {0: keyless, 5: batch([(b"a", b"1")])},
                          "d": {0: bytes(corrupt)}, "nope": {0: batch([(b"a", b"1")])}})
    p = answer(resp, "c")
    assert p.error_code == kerr.InvalidRecordError.errno and p.base_offset == -1
    assert [e.batch_index for e in p.record_errors] == [1, 3] and "without a key" in p.error_message
    assert answer(resp, "c", 5).error_code == kerr.UnknownTopicOrPartitionError.errno
    assert answer(resp, "d").error_code == kerr.CorruptRecordError.errno
    assert answer(resp, "nope").error_code == kerr.UnknownTopicOrPartitionError.errno
    big = answer(produce(wire, {"d": {0: batch([(b"a", b"v" * 400)])}}), "d")
    assert big.error_code == kerr.MessageSizeTooLargeError.errno
    old = answer(produce(wire, {"d": {0: batch([(b"a", b"1")], ts=1000)}}), "d")
    assert old.error_code == kerr.InvalidTimestampError.errno and [e.batch_index for e in old.record_errors] == [0]
    zstd = batch([(b"a", b"v" * 200)], codec="zstd")  # (the builder leaves tiny batches uncompressed)
    assert zstd[22] & 7 == CODECS["zstd"]
    zstd_v6 = answer(produce(wire, {"d": {0: zstd}}, version=6), "d")
    assert zstd_v6.error_code == kerr.UnsupportedCompressionTypeError.errno
    two = answer(produce(wire, {"d": {0: batch([(b"a", b"1")]) * 2}}), "d")
    assert two.error_code == kerr.InvalidRecordError.errno
    bad_acks = answer(produce(wire, {"d": {0: batch([(b"a", b"1")])}}, acks=2), "d")
    assert bad_acks.error_code == kerr.InvalidRequiredAcksError.errno
    assert node.log("c", 0).log_end_offset == 0 and node.log("d", 0).log_end_offset == 0
    # a delete topic takes keyless records; v7 answers without the per-record fields
    p = answer(produce(wire, {"d": {0: batch([(None, b"x")], ts=node.clock.milliseconds())}}, version=7), "d")
    assert (p.error_code, p.base_offset) == (0, 0)


def test_log_append_time_topics_answer_the_append_time(wire: Wire, node: Node) -> None:
    node.create_topic("t", 1, {"message.timestamp.type": "LogAppendTime"})
    p = answer(produce(wire, {"t": {0: batch([(b"a", b"1")], ts=5)}}), "t")
    assert p.error_code == 0 and p.log_append_time_ms > 1_000_000
    stored = node.log("t", 0).read(0)[0]
    assert stored.max_timestamp == p.log_append_time_ms and RecordBatch(bytes(stored.raw)).is_valid()


def test_flush_messages_and_flush_ms_sync_the_partition(wire: Wire, node: Node) -> None:
    from log.local_log import RecordSpec
    from service.flush_policy import flush_tracker_for, run_flush_once

    node.create_topic("t", 1, {"flush.messages": 3})
    tracker = flush_tracker_for(node)
    log = node.log("t", 0)
    answer(produce(wire, {"t": {0: batch([(b"a", b"1")])}}, acks=1), "t")
    assert tracker.synced_offset(log) in (-1, 0)
    answer(produce(wire, {"t": {0: batch([(b"a", b"2"), (b"b", b"3")])}}, acks=1), "t")
    assert tracker.synced_offset(log) == 3
    node.produce("t", 0, [RecordSpec(b"h", b"1"), RecordSpec(b"h", b"2"), RecordSpec(b"h", b"3")])  # HTTP's path
    assert tracker.synced_offset(log) == 6
    # flush.ms: the periodic task syncs what is older than it
    node.create_topic("m", 1, {"flush.ms": 200})
    node.produce("m", 0, [RecordSpec(b"k", b"v")])
    assert tracker.synced_offset(node.log("m", 0)) == 0  # not yet due
    time.sleep(0.25)
    assert run_flush_once(node) >= 1 and tracker.synced_offset(node.log("m", 0)) == 1
    assert run_flush_once(node) == 0  # nothing new


def test_kafka_batches_are_read_tiered_and_cleaned_by_the_engine(wire: Wire, node: Node) -> None:
    node.create_topic("t", 1, {"remote.storage.enable": True, "local.retention.ms": 0, "segment.bytes": 600,
                               "min.cleanable.dirty.ratio": 0.01, "delete.retention.ms": 3_600_000})
    pid = init_pid(wire)
    latest: dict[bytes, tuple[int, bytes | None]] = {}
    now = node.clock.milliseconds()
    for s in range(12):
        recs = [(b"k%d" % ((s * 3 + i) % 7), None if (s + i) % 5 == 0 else b"v%d-%d" % (s, i)) for i in range(3)]
        p = answer(produce(wire, {"t": {0: batch(recs, codec=("lz4", "zstd", "none")[s % 3], pid=pid, epoch=0,
                                                  seq=3 * s, ts=now + s)}}), "t")
        assert p.error_code == 0
        for i, (k, v) in enumerate(recs):
            latest[k] = (p.base_offset + i, v)
    node.roll("t", 0)
    assert node.tier("t", 0)["copied"]
    node.clean("t", 0)
    read = []
    offset = 0
    while True:
        page = node.read("t", 0, offset, max_records=100)
        read.extend((r.key, (r.offset, r.value)) for r in page.records)
        if not page.records:
            break
        offset = page.next_offset
    assert dict(read) == latest and len(read) == len(latest), read  # only the newest per key is left
    # the producer's state came through: its next batch continues the sequence, a retry is answered
    nxt = answer(produce(wire, {"t": {0: batch([(b"k0", b"after")], pid=pid, epoch=0, seq=36, ts=now)}}), "t")
    assert (nxt.error_code, nxt.base_offset) == (0, 36)


def test_a_partition_another_broker_leads_is_refused(wire: Wire, node: Node, monkeypatch: pytest.MonkeyPatch) -> None:
    from service.kafka import produce as produce_module

    monkeypatch.setattr(produce_module, "LEADER_CACHE_S", 0.0)
    node.create_topic("t", 1, {"cleanup.policy": "delete"})
    node.become_leader("t", 0, 1, broker_id=7)  # a broker this listener's cluster does not know: gone
    p = answer(produce(wire, {"t": {0: batch([(b"a", b"1")], ts=node.clock.milliseconds())}}), "t")
    assert p.error_code in (kerr.NotLeaderForPartitionError.errno, kerr.LeaderNotAvailableError.errno)
    node.become_leader("t", 0, 2, broker_id=node.broker_id)
    p = answer(produce(wire, {"t": {0: batch([(b"a", b"1")], ts=node.clock.milliseconds())}}), "t")
    assert (p.error_code, p.base_offset) == (0, 0)
    assert node.log("t", 0).log_end_offset == 1


def test_pipelined_produces_keep_their_order_and_a_later_request_waits_for_them(wire: Wire, node: Node) -> None:
    """Many produce requests sent without waiting share lane jobs; a ListOffsets sent right behind them on the
    same connection sees every one of them appended (Kafka processes a connection's requests in order)."""
    from kafka.protocol.consumer import ListOffsetsRequest

    node.create_topic("t", 1)
    n = 40
    cids = []
    for i in range(n):
        req = ProduceRequest(transactional_id=None, acks=1, timeout_ms=5000, topic_data=[
            ProduceRequest.TopicProduceData(name="t", partition_data=[PD(index=0, records=batch([(b"k", b"%d" % i)]))])])
        cids.append(wire.send(req, 9))
    lp = ListOffsetsRequest.ListOffsetsTopic.ListOffsetsPartition
    latest = wire.send(ListOffsetsRequest(replica_id=-1, isolation_level=0, topics=[ListOffsetsRequest.ListOffsetsTopic(
        name="t", partitions=[lp(partition_index=0, current_leader_epoch=-1, timestamp=-1)])]), 7)
    bases = [answer(wire.receive(ProduceRequest, 9, cid), "t").base_offset for cid in cids]
    assert bases == list(range(n))
    assert wire.receive(ListOffsetsRequest, 7, latest).topics[0].partitions[0].offset == n
    assert [r.value for b in node.log("t", 0).read(0) for r in b.records()] == [b"%d" % i for i in range(n)]


def test_produce_metrics_count_the_codes_answered_and_only_the_records_appended(node: Node) -> None:
    # the metrics take Produce's codes and counts from its outcomes (no second walk of the messages): a refused
    # batch counts its code and no bytes or messages in; acks=0 counts what it appended
    from service.kafka.metrics import KafkaMetrics, error_name

    node.create_topic("m", 1, {"cleanup.policy": "delete"})
    metrics = KafkaMetrics()
    listener = KafkaListener(node, KafkaListenerConfig(host="127.0.0.1", port=0), metrics=metrics).start()
    w = Wire(listener.port)
    try:
        good = batch([(b"a", b"1"), (b"b", b"2")])
        resp = produce(w, {"m": {0: good, 7: batch([(b"c", b"3")])}})
        assert answer(resp, "m").error_code == 0
        assert answer(resp, "m", 7).error_code == kerr.UnknownTopicOrPartitionError.errno
        assert produce(w, {"m": {0: batch([(b"d", b"4")])}}, acks=0) is None
        produce(w, {"m": {0: batch([(b"e", b"5")])}})  # answered: the acks=0 request before it has run
    finally:
        w.sock.close()
        listener.stop()
    assert metrics.messages_in["m"] == 4 and metrics.bytes_in["m"] == len(good) + 2 * len(batch([(b"d", b"4")]))
    assert metrics.errors[("Produce", "NONE")] == 3
    assert metrics.errors[("Produce", error_name(kerr.UnknownTopicOrPartitionError.errno))] == 1


def test_producers_waiting_on_their_sync_never_hold_up_other_requests(node: Node,
                                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    """More producer connections than num.io.threads, each with an acks=-1 request waiting on its sync (a slow
    disk), take every lane thread: a ListOffsets from another client is still answered at once, from the
    request workers, and the produces are answered when their syncs end (they once held the same workers)."""
    from kafka.protocol.consumer import ListOffsetsRequest

    node.create_topic("t", 3)
    tracker = group_sync_for(node).tracker
    gate = threading.Event()
    syncing: list[int] = []
    real_sync = tracker.sync

    def slow_sync(log: Any) -> int:
        syncing.append(1)
        assert gate.wait(30)
        return real_sync(log)

    monkeypatch.setattr(tracker, "sync", slow_sync)
    listener = KafkaListener(node, KafkaListenerConfig(host="127.0.0.1", port=0, worker_threads=2)).start()
    producers = [Wire(listener.port) for _ in range(3)]
    other = Wire(listener.port)
    try:
        cids = [w.send(ProduceRequest(transactional_id=None, acks=-1, timeout_ms=5000, topic_data=[
            ProduceRequest.TopicProduceData(name="t", partition_data=[PD(index=i, records=batch([(b"k", b"v")]))])]),
            9) for i, w in enumerate(producers)]
        wait_until(lambda: len(syncing) >= 2, what="two produce syncs waiting on the disk")
        other.sock.settimeout(5)  # the old code answered only once a sync ended (never, here)
        lp = ListOffsetsRequest.ListOffsetsTopic.ListOffsetsPartition
        r = other.call(ListOffsetsRequest(replica_id=-1, isolation_level=0, topics=[ListOffsetsRequest.ListOffsetsTopic(
            name="t", partitions=[lp(partition_index=2, current_leader_epoch=-1, timestamp=-2)])]), 7)
        assert (r.topics[0].partitions[0].error_code, r.topics[0].partitions[0].offset) == (0, 0)
        gate.set()
        for i, (w, cid) in enumerate(zip(producers, cids, strict=True)):
            p = answer(w.receive(ProduceRequest, 9, cid), "t", i)
            assert (p.error_code, p.base_offset) == (0, 0), p
    finally:
        gate.set()
        for w in (*producers, other):
            w.sock.close()
        listener.stop()
