"""Regression: a local read served a batch whose stored CRC did not match its bytes
(200 with the corrupt value). A read must report the corruption, naming file and position."""

from __future__ import annotations

from pathlib import Path

import pytest

from log.errors import CorruptRecordError
from log.local_log import RecordSpec
from service.node import Node


def _flip_value_byte(log_path: Path, needle: bytes) -> int:
    data = bytearray(log_path.read_bytes())
    at = data.index(needle)
    data[at] ^= 0x01  # 'secret' -> 'recret' style damage: same length, different bytes
    log_path.write_bytes(bytes(data))
    return at


def test_local_read_reports_a_crc_mismatch(make_log_for_service: Node) -> None:
    node = make_log_for_service
    log = node.log("t", 0)
    log.append_records([RecordSpec(b"a", b"first-value")])
    log.append_records([RecordSpec(b"b", b"secret-value")])
    node.roll("t", 0)
    _flip_value_byte(log.segments.first().log_path, b"secret-value")
    # the intact batch before the damage still reads
    assert [b.base_offset for b in log.read(0, max_bytes=1)] == [0]
    with pytest.raises(CorruptRecordError) as e:
        node.read("t", 0, 1)
    assert "00000000000000000000.log" in str(e.value) and "crc" in str(e.value)


def test_http_read_answers_an_error_naming_the_file_not_the_damaged_value(client, node: Node) -> None:
    assert client.post("/v1/topics", json={"name": "t", "config": {"cleanup.policy": "compact"}}).status_code == 201
    for k, v in (("a", "first-value"), ("b", "secret-value")):
        assert client.post("/v1/topics/t/partitions/0/records",
                           json={"records": [{"key": k, "value": v}]}).status_code == 200
    client.post("/v1/topics/t/partitions/0/roll")
    _flip_value_byte(node.log("t", 0).segments.first().log_path, b"secret-value")
    r = client.get("/v1/topics/t/partitions/0/records", params={"offset": 0})
    assert r.status_code >= 500
    body = r.json()
    assert "00000000000000000000.log" in body["error"] and "crc" in body["error"]
    assert "secret" not in r.text and "recret" not in r.text


@pytest.fixture
def make_log_for_service(node: Node) -> Node:
    node.create_topic("t", 1, {"cleanup.policy": "compact"})
    return node
