"""Every integer a request carries is bounded by its Kafka type: out of range is a 400 naming
the field and the range, never a 200 that breaks the partition or a 500 from an overflow.

Also here: a partition left unwritable by an out-of-range epoch stored by an older version
answers a clear error naming the repair, an unexpected error leaves a keep-alive connection
usable, a body without a JSON content type is a 415, and topic names are matched whole.
"""

from __future__ import annotations

import http.client
import json
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import uvicorn
from fastapi.testclient import TestClient

from log.errors import InvalidRequestError
from log.types import validate_topic_name
from service.app import create_app
from service.node import Node
from tests.service.conftest import make_node

P0 = "/v1/topics/t/partitions/0"
INT16_MAX = 2**15 - 1
INT32_MAX = 2**31 - 1
INT64_MAX = 2**63 - 1
PRODUCER = {"id": 7, "epoch": 0, "base_sequence": 0}


def _err(r: httpx.Response, status: int, *needles: str) -> str:
    assert r.status_code == status, r.text
    assert r.headers["content-type"].startswith("application/json")
    body = r.json()
    assert set(body) == {"error"}
    for n in needles:
        assert n in body["error"], body["error"]
    return str(body["error"])


@pytest.fixture
def topic(client: TestClient) -> TestClient:
    assert client.post("/v1/topics", json={"name": "t", "config": {"cleanup.policy": "compact"}}).status_code == 201
    return client


def _records(**record: Any) -> dict[str, Any]:
    return {"records": [{"key": "k", "value": "v", **record}]}


# (method, path, json body, field named in the error, range named in the error)
OUT_OF_RANGE = [
    ("post", f"{P0}/leadership", {"leader_epoch": INT32_MAX + 1, "broker_id": 0}, "leader_epoch",
     f"0..{INT32_MAX} (Kafka int32)"),
    ("post", f"{P0}/leadership", {"leader_epoch": 2**63, "broker_id": 0}, "leader_epoch", f"0..{INT32_MAX}"),
    ("post", f"{P0}/leadership", {"leader_epoch": -1, "broker_id": 0}, "leader_epoch", f"0..{INT32_MAX}"),
    ("post", f"{P0}/leadership", {"leader_epoch": 1, "broker_id": INT32_MAX + 1}, "broker_id",
     f"0..{INT32_MAX} (Kafka int32)"),
    ("post", f"{P0}/leadership", {"leader_epoch": 1, "broker_id": 2**63}, "broker_id", f"0..{INT32_MAX}"),
    ("post", f"{P0}/records", _records(timestamp=2**63), "records.0.timestamp", f"-1..{INT64_MAX}"),
    ("post", f"{P0}/records", _records(timestamp=-2), "records.0.timestamp", f"-1..{INT64_MAX}"),
    ("post", f"{P0}/records", {**_records(), "producer": {**PRODUCER, "id": 2**63}}, "producer.id",
     f"0..{INT64_MAX} (Kafka int64)"),
    ("post", f"{P0}/records", {**_records(), "producer": {**PRODUCER, "epoch": INT16_MAX + 1}}, "producer.epoch",
     f"0..{INT16_MAX} (Kafka int16)"),
    ("post", f"{P0}/records", {**_records(), "producer": {**PRODUCER, "base_sequence": INT32_MAX + 1}},
     "producer.base_sequence", f"0..{INT32_MAX} (Kafka int32)"),
    ("post", f"{P0}/markers", {"producer_id": 2**63, "producer_epoch": 0, "type": "commit"}, "producer_id",
     f"0..{INT64_MAX}"),
    ("post", f"{P0}/markers", {"producer_id": 1, "producer_epoch": 2**15, "type": "commit"}, "producer_epoch",
     f"0..{INT16_MAX}"),
    ("post", "/v1/topics", {"name": "x", "partitions": 0}, "partitions", "1..10000"),
    ("post", "/v1/topics", {"name": "x", "partitions": 2**63}, "partitions", "1..10000"),
    ("get", f"{P0}/records?offset={2**63}", None, "query parameter offset", f"0..{INT64_MAX}"),
    ("get", f"{P0}/records?max_records={2**63}", None, "query parameter max_records", f"1..{INT32_MAX}"),
]


@pytest.mark.parametrize(("method", "path", "body", "field", "bounds"), OUT_OF_RANGE)
def test_out_of_range_values_are_400_naming_field_and_range(topic: TestClient, method: str, path: str,
                                                            body: dict | None, field: str, bounds: str) -> None:
    before = topic.get(P0).json()
    kwargs = {"json": body} if body is not None else {}
    _err(getattr(topic, method)(path, **kwargs), 400, field, bounds, "out of range")
    # nothing happened: the log is still empty, the epoch unchanged, no topic created
    after = topic.get(P0).json()
    assert (after["log_end_offset"], after["leader_epoch"]) == (0, before["leader_epoch"])
    assert [t["name"] for t in topic.get("/v1/topics").json()] == ["t"]


def test_leadership_at_the_int32_limit_is_accepted_and_the_partition_stays_writable(topic: TestClient) -> None:
    r = topic.post(f"{P0}/leadership", json={"leader_epoch": INT32_MAX, "broker_id": 0})
    assert r.status_code == 200, r.text
    assert r.json()["leader_epoch"] == INT32_MAX
    r = topic.post(f"{P0}/records", json=_records())
    assert r.status_code == 200, r.text
    _err(topic.post(f"{P0}/leadership", json={"leader_epoch": INT32_MAX + 1, "broker_id": 0}), 400, "leader_epoch")
    assert topic.post(f"{P0}/records", json=_records()).json()["base_offset"] == 1


def test_extreme_but_legal_values_never_overflow_into_a_500(topic: TestClient) -> None:
    ok = [
        _records(timestamp=INT64_MAX),
        _records(timestamp=-1),
        {**_records(), "producer": {"id": INT64_MAX, "epoch": INT16_MAX, "base_sequence": 0}},
    ]
    for body in ok:
        r = topic.post(f"{P0}/records", json=body)
        assert r.status_code == 200, (body, r.text)
    r = topic.post(f"{P0}/markers", json={"producer_id": INT64_MAX - 1, "producer_epoch": INT16_MAX, "type": "abort"})
    assert r.status_code < 500, r.text
    # one batch stores timestamps as deltas from the first: -1 and Long.MAX cannot share one
    body = {"records": [{"key": "a", "value": "1", "timestamp": -1}, {"key": "b", "value": "2", "timestamp": INT64_MAX}]}
    _err(topic.post(f"{P0}/records", json=body), 400, "timestamps span", str(INT64_MAX))
    r = topic.get(f"{P0}/records?offset={INT64_MAX}")
    assert r.status_code == 416, r.text


def test_topic_name_with_a_trailing_newline_is_refused(client: TestClient) -> None:
    _err(client.post("/v1/topics", json={"name": "abc\n"}), 400, "invalid topic name")
    _err(client.post("/v1/topics", json={"name": "abc\n\n"}), 400, "invalid topic name")
    assert client.get("/v1/topics").json() == []
    with pytest.raises(InvalidRequestError):
        validate_topic_name("abc\n")
    assert validate_topic_name("a.b_c-1") == "a.b_c-1"


@pytest.mark.parametrize("headers", [{}, {"content-type": "text/plain"}, {"content-type": "application/x-www-form-urlencoded"}])
def test_a_body_without_json_content_type_is_415_saying_what_to_send(topic: TestClient, headers: dict) -> None:
    body = json.dumps(_records()).encode()
    _err(topic.post(f"{P0}/records", content=body, headers=headers), 415, "Content-Type: application/json")
    _err(topic.post("/v1/topics", content=b'{"name": "u"}', headers=headers), 415, "Content-Type: application/json")
    r = topic.post(f"{P0}/records", content=body, headers={"content-type": "application/json"})
    assert r.status_code == 200, r.text
    # endpoints without a body need no content type
    assert topic.post(f"{P0}/roll").status_code == 200


def _write_epoch_checkpoint(partition_dir: Path, epochs: list[tuple[int, int]]) -> None:
    """leader-epoch-checkpoint in Kafka's format: version 0, count, then "epoch start_offset" lines."""
    lines = ["0", str(len(epochs)), *(f"{e} {o}" for e, o in epochs)]
    (partition_dir / "leader-epoch-checkpoint").write_text("\n".join(lines) + "\n")


def test_a_stored_out_of_range_epoch_gives_a_clear_error_naming_the_repair(tmp_path: Path) -> None:
    """An older version stored leader epoch 2^31; every produce then failed with a bare 500
    (struct.error), also after restarts. Now: reads work, writes answer a 409 that says how
    to repair, and the repair it names (delete and re-create the topic) works."""
    node = make_node(tmp_path)
    with TestClient(create_app(node)) as c:
        assert c.post("/v1/topics", json={"name": "t", "config": {"cleanup.policy": "compact"}}).status_code == 201
        assert c.post(f"{P0}/records", json=_records()).status_code == 200
    node.shutdown()
    _write_epoch_checkpoint(tmp_path / "data" / "t-0", [(0, 0), (INT32_MAX + 1, 1)])

    node = make_node(tmp_path)
    try:
        with TestClient(create_app(node)) as c:
            assert c.get(P0).json()["leader_epoch"] == INT32_MAX + 1
            for _ in range(2):  # the same clear answer every time, not a 500
                msg = _err(c.post(f"{P0}/records", json=_records()), 409, str(INT32_MAX + 1), "int32",
                           "leader-epoch-checkpoint", "DELETE the topic")
                assert "internal error" not in msg
            _err(c.post(f"{P0}/markers", json={"producer_id": 1, "producer_epoch": 0, "type": "commit"}), 409,
                 "leader-epoch-checkpoint")
            assert [r["value"] for r in c.get(f"{P0}/records").json()["records"]] == ["v"]
            assert c.delete("/v1/topics/t").status_code == 204
            assert c.post("/v1/topics", json={"name": "t", "config": {"cleanup.policy": "compact"}}).status_code == 201
            assert c.post(f"{P0}/records", json=_records()).status_code == 200
    finally:
        node.shutdown()


class _Server:
    """A real uvicorn server on a loopback port, in a thread, serving ``app``."""

    def __init__(self, app: Any) -> None:
        self.server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=0, log_level="critical",
                                                   access_log=False, lifespan="off"))
        self.thread = threading.Thread(target=self.server.run, daemon=True)

    def __enter__(self) -> int:
        self.thread.start()
        deadline = time.monotonic() + 30
        while not self.server.started:
            assert self.thread.is_alive() and time.monotonic() < deadline, "uvicorn did not start"
            time.sleep(0.01)
        return int(self.server.servers[0].sockets[0].getsockname()[1])

    def __exit__(self, *exc: object) -> None:
        self.server.should_exit = True
        self.thread.join(30)


@pytest.fixture
def served_node(tmp_path: Path) -> Iterator[tuple[Node, Any]]:
    node = make_node(tmp_path)
    app = create_app(node)

    def boom() -> None:
        raise RuntimeError("an unexpected bug")

    app.add_api_route("/v1/test-boom", boom, methods=["POST"])
    yield node, app
    node.shutdown()


def test_an_unexpected_error_is_a_json_500_and_the_keep_alive_connection_goes_on(
        served_node: tuple[Node, Any]) -> None:
    """uvicorn closes the connection when the app raises; the producer would not know what
    happened to the requests it pipelined. The 500 must be a complete JSON answer on a
    connection that stays open for the next request."""
    _, app = served_node
    with _Server(app) as port:
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
        try:
            conn.request("POST", "/v1/topics", body=json.dumps({"name": "t"}),
                         headers={"content-type": "application/json"})
            r = conn.getresponse()
            assert r.status == 201, r.read()
            r.read()
            sock = conn.sock
            conn.request("POST", "/v1/test-boom", body=b"{}", headers={"content-type": "application/json"})
            r = conn.getresponse()
            assert r.status == 500
            assert r.getheader("content-type", "").startswith("application/json")
            body = json.loads(r.read())
            assert body == {"error": "internal error (RuntimeError); the server log has the details"}
            assert r.getheader("connection", "").lower() != "close"
            # the same socket carries the next request
            conn.request("POST", f"{P0}/records", body=json.dumps(_records()),
                         headers={"content-type": "application/json"})
            r = conn.getresponse()
            assert r.status == 200, r.read()
            assert json.loads(r.read())["base_offset"] == 0
            assert conn.sock is sock
        finally:
            conn.close()


def test_the_openapi_schema_carries_the_kafka_bounds(client: TestClient) -> None:
    """Clients and fuzzers read the ranges from /openapi.json. int64 bounds are given as
    format int64: a float maximum of 2^63-1 would round up to 2^63, which the API refuses."""
    spec = client.get("/openapi.json").json()
    schemas = spec["components"]["schemas"]
    epoch = schemas["LeadershipRequest"]["properties"]["leader_epoch"]
    assert (epoch["minimum"], epoch["maximum"], epoch["format"]) == (0, INT32_MAX, "int32")
    pid = schemas["Producer"]["properties"]["id"]
    assert (pid["minimum"], pid["format"]) == (0, "int64") and "maximum" not in pid
    assert schemas["Producer"]["properties"]["epoch"]["maximum"] == INT16_MAX
    ts = next(s for s in schemas["RecordIn"]["properties"]["timestamp"]["anyOf"] if s.get("type") == "integer")
    assert (ts["minimum"], ts["format"]) == (-1, "int64")
    params = {p["name"]: p["schema"] for p in spec["paths"]["/v1/topics/{topic}/partitions/{partition}/records"]
              ["get"]["parameters"]}
    assert (params["offset"]["minimum"], params["offset"]["format"]) == (0, "int64")
    assert (params["max_records"]["minimum"], params["max_records"]["maximum"]) == (1, INT32_MAX)


@pytest.mark.parametrize(("record", "field"), [
    ('{"key": "\\ud800", "value": "v"}', "records.0.key"),
    ('{"key": "k", "value": "a\\udfffb"}', "records.0.value"),
    ('{"key": "k", "headers": [{"key": "\\ud83d", "value": "x"}]}', "records.0.headers.0.key"),
    ('{"key": "k", "headers": [{"key": "h", "value": "\\udc00"}]}', "records.0.headers.0.value"),
])
def test_lone_surrogates_in_record_strings_are_400_not_500(topic: TestClient, record: str, field: str) -> None:
    """JSON may carry a lone surrogate; encoding it to UTF-8 raised UnicodeEncodeError, a 500."""
    r = topic.post(f"{P0}/records", content='{"records": [' + record + "]}",
                   headers={"content-type": "application/json"})
    _err(r, 400, field, "is not valid Unicode text", "encoding")
    assert topic.get(P0).json()["log_end_offset"] == 0
    r = topic.post(f"{P0}/records", json={"records": [{"key": "\U0001f600", "value": "é", "headers": [{"key": "ü"}]}]})
    assert r.status_code == 200, r.text  # real non-ASCII text is fine


@pytest.mark.parametrize("body", ["[" * 100_000 + "]" * 100_000, '{"name": "x", "partitions": ' + "9" * 5000 + "}"])
def test_bodies_json_cannot_parse_get_a_message_saying_why(client: TestClient, body: str) -> None:
    """Deep nesting and over-long numbers got FastAPI's bare "There was an error parsing the body"."""
    r = client.post("/v1/topics", content=body, headers={"content-type": "application/json"})
    _err(r, 400, "could not be parsed as JSON", "nested too deeply", "Content-Type: application/json")
