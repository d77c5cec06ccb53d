"""Bad input never hurts the node: malformed, truncated, oversized, unknown-key and wrong-version frames, idle and
one-byte-at-a-time connections and a fuzz of random and mutated frames against the real listener of the shared
``tiercompact serve``; each gets Kafka's error or a closed connection, nothing is appended, memory stays bounded,
and a well-behaved client is served all along. The listener's Prometheus metrics are checked here too."""

from __future__ import annotations

import random
import socket
import struct
import time
import urllib.request
from typing import Any

import psutil
from kafka.protocol.metadata import ApiVersionsRequest, ApiVersionsResponse, MetadataRequest, MetadataResponse
from kafka.protocol.producer import ProduceRequest
from kafka.record.default_records import DefaultRecordBatchBuilder

from tests.kafka.conftest import KafkaServe, run_client
from tests.kafka.wire import read_frame


def _frame(req: Any, version: int, cid: int = 1) -> bytes:
    req.with_header(correlation_id=cid, client_id="fuzz")
    return bytes(req.encode(version=version, header=True, framed=True))




def _closed(sock: socket.socket, timeout: float = 5.0) -> bool:
    sock.settimeout(timeout)
    try:
        while True:
            if not sock.recv(65536):
                return True
    except (ConnectionResetError, BrokenPipeError):
        return True
    except TimeoutError:
        return False


class Healthy:
    """A well-behaved client on its own connection: Metadata must keep answering."""

    def __init__(self, port: int) -> None:
        self.sock = socket.create_connection(("127.0.0.1", port), timeout=10)
        self.cid = 0

    def check(self) -> None:
        self.cid += 1
        self.sock.sendall(_frame(MetadataRequest(topics=None, allow_auto_topic_creation=False), 9, self.cid))
        body = read_frame(self.sock)
        assert body is not None, "the healthy client's connection was closed"
        assert struct.unpack_from(">i", body, 0)[0] == self.cid
        resp = MetadataResponse.decode(body[5:], version=9)  # flexible header: correlation id + tags
        assert resp.brokers


def _produce_frame(topic: str, *, good_crc: bool, cid: int = 1) -> bytes:
    b = DefaultRecordBatchBuilder(2, 0, False, -1, -1, -1, 1 << 20)
    for i in range(3):
        b.append(i, int(time.time() * 1000), b"k%d" % i, b"v" * 20, [])
    batch = bytearray(b.build())
    if not good_crc:
        batch[17] ^= 0xFF  # the CRC-32C field
    req = ProduceRequest(transactional_id=None, acks=1, timeout_ms=5000,
                         topic_data=[ProduceRequest.TopicProduceData(
                             name=topic, partition_data=[ProduceRequest.TopicProduceData.PartitionProduceData(
                                 index=0, records=bytes(batch))])])
    return _frame(req, 7, cid)


def _end_offset(server: KafkaServe, topic: str) -> int:
    info = server.api("GET", f"/v1/topics/{topic}/partitions/0")
    return int(info.get("log_end_offset", info.get("high_watermark", -1)))


def test_malformed_frames_close_only_their_connection(kafka_server: KafkaServe, topic_name: str) -> None:
    kafka_server.create_topic(topic_name, 1)
    port = kafka_server.kafka_port
    healthy = Healthy(port)
    healthy.check()
    cases = {
        "size over socket.request.max.bytes": struct.pack(">i", 200 * 1024 * 1024),
        "negative size": struct.pack(">i", -5),
        "tiny frame": struct.pack(">i", 3) + b"abc",
        "unknown api key": struct.pack(">ihhi", 10, 999, 0, 7) + b"\x00\x00",
        "Metadata at an unknown version": struct.pack(">ihhi", 10, 3, 99, 7) + b"\x00\x00",
        "garbage body": struct.pack(">ihhi", 20, 3, 9, 7) + b"\xff" * 12,
        "produce cut short": struct.pack(">i", 40) + _produce_frame(topic_name, good_crc=False)[4:44],
    }
    for what, data in cases.items():
        with socket.create_connection(("127.0.0.1", port), timeout=10) as s:
            s.sendall(data)
            assert _closed(s), what
        healthy.check()
    # KIP-511: ApiVersions at a version we do not know answers v0 with UNSUPPORTED_VERSION and the ranges
    with socket.create_connection(("127.0.0.1", port), timeout=10) as s:
        frame = bytearray(_frame(ApiVersionsRequest(client_software_name="x", client_software_version="1"), 3))
        struct.pack_into(">h", frame, 6, 42)
        s.sendall(frame)
        body = read_frame(s)
        assert body is not None
        resp = ApiVersionsResponse.decode(body[4:], version=0)
        assert resp.error_code == 35 and {k.api_key for k in resp.api_keys} >= {0, 1, 3, 18}
    # a corrupt batch gets CORRUPT_MESSAGE on a connection that stays usable
    with socket.create_connection(("127.0.0.1", port), timeout=10) as s:
        s.sendall(_produce_frame(topic_name, good_crc=False))
        assert read_frame(s) is not None
    assert _end_offset(kafka_server, topic_name) == 0
    healthy.check()


def test_idle_and_slow_connections_do_not_block_others(kafka_server: KafkaServe) -> None:
    port = kafka_server.kafka_port
    idle = [socket.create_connection(("127.0.0.1", port), timeout=10) for _ in range(300)]
    try:
        slow = socket.create_connection(("127.0.0.1", port), timeout=10)
        frame = _frame(MetadataRequest(topics=None, allow_auto_topic_creation=False), 9, 5)
        healthy = Healthy(port)
        for i, byte in enumerate(frame[:12]):  # one byte at a time, the others keep being served
            slow.sendall(bytes([byte]))
            if i % 4 == 0:
                healthy.check()
        slow.sendall(frame[12:])
        body = read_frame(slow)
        assert body is not None and struct.unpack_from(">i", body, 0)[0] == 5
        slow.close()
    finally:
        for s in idle:
            s.close()


def test_fuzz_random_and_mutated_frames(kafka_server: KafkaServe, topic_name: str) -> None:
    kafka_server.create_topic(topic_name, 1)
    port = kafka_server.kafka_port
    rss_before = psutil.Process(kafka_server.proc.pid).memory_info().rss  # type: ignore[union-attr]
    rng = random.Random(20240611)
    seeds = [_produce_frame(topic_name, good_crc=False, cid=i) for i in range(3)]
    seeds += [_frame(MetadataRequest(topics=[MetadataRequest.MetadataRequestTopic(name=topic_name)],
                                     allow_auto_topic_creation=False), v) for v in (1, 9, 12)]
    seeds += [_frame(ApiVersionsRequest(client_software_name="fz", client_software_version="1"), 3),
              _frame(ApiVersionsRequest(), 0)]
    healthy = Healthy(port)
    for i in range(400):
        if i % 4 == 0:  # random bytes, with a plausible size
            body = rng.randbytes(rng.randrange(0, 200))
            data = struct.pack(">i", len(body)) + body
        else:
            data = bytearray(rng.choice(seeds))
            for _ in range(rng.randrange(1, 6)):
                pos = rng.randrange(4, len(data))
                data[pos] = rng.randrange(256)
            if rng.random() < 0.2:
                data = data[:rng.randrange(4, len(data))]  # truncated
        with socket.create_connection(("127.0.0.1", port), timeout=10) as s:
            s.sendall(bytes(data))
            s.shutdown(socket.SHUT_WR)
            s.settimeout(5)
            try:
                while s.recv(65536):
                    pass
            except (ConnectionResetError, TimeoutError):
                pass
        if i % 50 == 0:
            healthy.check()
    healthy.check()
    assert _end_offset(kafka_server, topic_name) == 0
    rss_after = psutil.Process(kafka_server.proc.pid).memory_info().rss  # type: ignore[union-attr]
    assert rss_after - rss_before < 200 * 1024 * 1024


def _metrics(server: KafkaServe) -> str:
    with urllib.request.urlopen(server.url + "/metrics", timeout=10) as r:  # noqa: S310 - loopback
        return r.read().decode()


def test_kafka_metrics_in_prometheus_form(kafka_server: KafkaServe, topic_name: str) -> None:
    kafka_server.create_topic(topic_name, 1)
    spec = {"bootstrap": kafka_server.bootstrap, "common": {"bootstrap": kafka_server.bootstrap, "topic": topic_name},
            "steps": [{"action": "produce", "records": [{"key": "a", "value": "x" * 100}] * 3},
                      {"action": "consume"}]}
    run_client("confluent", spec)
    text = _metrics(kafka_server)
    assert 'kafka_network_requestmetrics_requests_total{request="Produce",version="' in text
    assert 'kafka_network_requestmetrics_errors_total{error="NONE",request="Fetch"}' in text
    assert 'kafka_network_requestmetrics_totaltimems_bucket{le="+Inf",request="Metadata"}' in text
    bytes_in = [ln for ln in text.splitlines()
                if ln.startswith(f'kafka_server_brokertopicmetrics_bytesin_total{{topic="{topic_name}"}}')]
    assert bytes_in and float(bytes_in[0].split()[-1]) > 300
    assert f'kafka_server_brokertopicmetrics_messagesin_total{{topic="{topic_name}"}} 3.0' in text
    assert f'kafka_server_brokertopicmetrics_bytesout_total{{topic="{topic_name}"}}' in text
    assert "kafka_server_socketservermetrics_connection_count" in text
    assert "tiercompact_kafka_syncfs_dirty_fallbacks_total " in text
    # serve froze start-up's objects out of the garbage collector's full collections (service/heap.py)
    frozen = [ln for ln in text.splitlines() if ln.startswith("tiercompact_gc_frozen_objects ")]
    assert frozen and float(frozen[0].split()[-1]) > 10_000


def test_a_client_that_never_reads_its_answers_is_not_buffered_without_bound(kafka_server: KafkaServe) -> None:
    """Pipelined requests whose answers are never read: the listener stops reading the connection's requests once a
    few MiB of answers wait, so its memory stays flat; other clients are served meanwhile."""
    port = kafka_server.kafka_port
    proc = psutil.Process(kafka_server.proc.pid)  # type: ignore[union-attr]
    rss_before = proc.memory_info().rss
    frame = _frame(MetadataRequest(topics=None, allow_auto_topic_creation=False), 9)
    hog = socket.create_connection(("127.0.0.1", port), timeout=10)
    hog.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    hog.setblocking(False)
    sent = 0
    deadline = time.monotonic() + 2
    while time.monotonic() < deadline and sent < 64 * 1024 * 1024:
        try:
            sent += hog.send(frame * 64)
        except BlockingIOError:
            time.sleep(0.01)
    Healthy(port).check()
    assert proc.memory_info().rss - rss_before < 200 * 1024 * 1024
    hog.close()
