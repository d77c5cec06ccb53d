"""Every error path of the API answers {"error": "..."} with the documented 4xx status."""

from __future__ import annotations

import base64
import re
from pathlib import Path

import httpx
import pytest
from fastapi.testclient import TestClient

from service.app import create_app
from tests.service.conftest import TOKEN, make_node

P0 = "/v1/topics/t/partitions/0"


def _err(r: httpx.Response, status: int, *needles: str) -> str:
    assert r.status_code == status, r.text
    assert r.headers["content-type"].startswith("application/json")
    body = r.json()
    assert set(body) == {"error"} and isinstance(body["error"], str) and body["error"]
    assert "Traceback" not in body["error"]
    for n in needles:
        assert n in body["error"], body["error"]
    return body["error"]


@pytest.fixture
def topic(client: TestClient) -> TestClient:
    assert client.post("/v1/topics", json={"name": "t", "config": {"cleanup.policy": "compact"}}).status_code == 201
    return client


def test_bad_json_is_400(client: TestClient) -> None:
    r = client.post("/v1/topics", content=b'{"name": "t", ', headers={"content-type": "application/json"})
    _err(r, 400, "not valid JSON")


def test_wrong_shape_is_422_naming_the_field(client: TestClient) -> None:
    _err(client.post("/v1/topics", json={"name": "t", "partition": 2}), 422, "partition")
    _err(client.post("/v1/topics", json={"partitions": 2}), 422, "name")
    _err(client.post("/v1/topics", json=[1, 2]), 422)


def test_unknown_topic_and_partition_are_404(topic: TestClient) -> None:
    _err(topic.get("/v1/topics/nope"), 404, "unknown topic 'nope'")
    _err(topic.get("/v1/topics/nope/partitions/0/records"), 404, "nope")
    _err(topic.get("/v1/topics/t/partitions/7"), 404, "has 1 partitions")
    _err(topic.patch("/v1/topics/nope/config", json={"config": {}}), 404)
    _err(topic.delete("/v1/topics/nope"), 404)
    _err(topic.get("/v1/no/such/endpoint"), 404, "no such endpoint")


def test_topic_exists_is_409(topic: TestClient) -> None:
    _err(topic.post("/v1/topics", json={"name": "t"}), 409, "already exists")


def test_a_name_colliding_with_a_topics_is_409(client: TestClient) -> None:
    """Kafka refuses a topic whose name differs from an existing one's only by '.' against '_' (their metric names
    would be the same); so does the HTTP API, and nothing is created."""
    assert client.post("/v1/topics", json={"name": "orders.v1"}).status_code == 201
    _err(client.post("/v1/topics", json={"name": "orders_v1"}), 409, "collides with existing topic: orders.v1")
    assert client.get("/v1/topics/orders_v1").status_code == 404


@pytest.mark.parametrize(("config", "needle"), [
    ({"min.compaction.lag.ms": 10, "max.compaction.lag.ms": 5}, "min.compaction.lag.ms (10) > max.compaction.lag.ms (5)"),
    ({"cleanup.policy": "shred"}, "cleanup.policy='shred' is invalid"),
    ({"segment.bytes": "big"}, "segment.bytes='big' is invalid"),
    ({"no.such.key": 1}, "unknown config key 'no.such.key'"),
])
def test_invalid_config_is_400(client: TestClient, config: dict, needle: str) -> None:
    _err(client.post("/v1/topics", json={"name": "c", "config": config}), 400, needle)


def test_invalid_config_patch_is_400_and_changes_nothing(topic: TestClient) -> None:
    _err(topic.patch("/v1/topics/t/config", json={"config": {"max.compaction.lag.ms": 1, "min.compaction.lag.ms": 2}}),
         400, "max.compaction.lag.ms")
    assert topic.get("/v1/topics/t").json()["config"] == {"cleanup.policy": "compact"}


def test_bad_base64_is_400_naming_the_record(topic: TestClient) -> None:
    r = topic.post(f"{P0}/records", json={"encoding": "base64",
                                          "records": [{"key": base64.b64encode(b"k").decode(), "value": "AA=="},
                                                      {"key": "!!not base64!!", "value": None}]})
    _err(r, 400, "records[1].key is not valid base64")
    r = topic.post(f"{P0}/records", json={"encoding": "base64", "records": [
        {"key": "AA==", "value": "AA==", "headers": [{"key": "h", "value": "%%%"}]}]})
    _err(r, 400, "records[0].headers[0].value")
    assert topic.get(f"{P0}/records").json()["records"] == []  # nothing was appended


def test_non_utf8_read_asks_for_base64(topic: TestClient) -> None:
    topic.post(f"{P0}/records", json={"encoding": "base64", "records": [{"key": "/w==", "value": "AA=="}]})
    _err(topic.get(f"{P0}/records"), 400, "encoding=base64")
    assert topic.get(f"{P0}/records?encoding=base64").json()["records"][0]["key"] == "/w=="


def test_empty_produce_and_bad_query_values(topic: TestClient) -> None:
    _err(topic.post(f"{P0}/records", json={"records": []}), 400, "at least one record")
    # out-of-range values are 400 like the core's own range checks (max_records above the limit)
    _err(topic.get(f"{P0}/records?offset=-1"), 400, "offset", "0..9223372036854775807")
    _err(topic.get(f"{P0}/records?isolation=dirty"), 422, "isolation")
    _err(topic.get(f"{P0}/records?max_records=0"), 400, "max_records", "1..2147483647")
    _err(topic.get(f"{P0}/records?max_records=1000000"), 400, "max_records=1000000")
    _err(topic.get(f"{P0}/records?offset=99"), 416, "offset 99")
    _err(topic.post(f"{P0}/records", json={"records": [{"key": "a"}], "compression": "brotli"}), 422, "compression")


def test_producer_and_marker_errors_are_409(topic: TestClient) -> None:
    prod = {"id": 7, "epoch": 1, "base_sequence": 0, "transactional": True}
    assert topic.post(f"{P0}/records", json={"records": [{"key": "a", "value": "1"}], "producer": prod}).status_code == 200
    _err(topic.post(f"{P0}/markers", json={"producer_id": 7, "producer_epoch": 0, "type": "commit"}), 409)
    _err(topic.post(f"{P0}/records", json={"records": [{"key": "a", "value": "1"}],
                                            "producer": {**prod, "base_sequence": 5}}), 409)
    _err(topic.post(f"{P0}/markers", json={"producer_id": 7, "producer_epoch": 1, "type": "maybe"}), 422, "type")


def test_oversized_body_is_413_before_parsing(tmp_path: Path) -> None:
    node = make_node(tmp_path, max_request_bytes=2048)
    with TestClient(create_app(node)) as c:
        c.post("/v1/topics", json={"name": "t"})
        big = {"records": [{"key": "k", "value": "x" * 4096}]}
        _err(c.post(f"{P0}/records", json=big), 413, "max_request_bytes=2048")

        def chunks():  # no Content-Length: the limit still applies while streaming
            for _ in range(8):
                yield b"x" * 512

        _err(c.post(f"{P0}/records", content=chunks(), headers={"content-type": "application/json"}), 413)
        assert c.get(f"{P0}/records").json()["records"] == []
    node.shutdown()


def test_too_many_records_is_413(tmp_path: Path) -> None:
    node = make_node(tmp_path, max_records_per_request=3)
    with TestClient(create_app(node)) as c:
        c.post("/v1/topics", json={"name": "t"})
        _err(c.post(f"{P0}/records", json={"records": [{"key": str(i), "value": "v"} for i in range(4)]}),
             413, "max_records_per_request=3")
    node.shutdown()


@pytest.mark.parametrize("name", ["..", ".", "a/b", "../etc", "x" * 250, "", "a b", "ünï"])
def test_path_like_topic_names_are_rejected_on_create(client: TestClient, name: str, tmp_path: Path) -> None:
    _err(client.post("/v1/topics", json={"name": name}), 400, "invalid topic name")
    assert [p.name for p in (tmp_path / "data").iterdir() if re.search(r"-\d+$", p.name)] == []
    assert sorted(p.name for p in tmp_path.iterdir()) == ["data"]


@pytest.mark.parametrize("path", ["/v1/topics/%2e%2e", "/v1/topics/%2E%2E/partitions/0",
                                  "/v1/topics/a%2Fb", "/v1/topics/..%2F..%2Fetc/partitions/0/records",
                                  "/v1/topics/a%00b"])
def test_path_like_topic_names_in_urls_are_4xx(client: TestClient, path: str) -> None:
    r = client.get(path)
    assert 400 <= r.status_code < 500
    _err(r, r.status_code)


def test_missing_and_wrong_token(secured: TestClient) -> None:
    body = {"name": "t"}
    r = secured.post("/v1/topics", json=body)
    _err(r, 401, "Authorization: Bearer")
    assert r.headers["www-authenticate"] == "Bearer"
    _err(secured.post("/v1/topics", json=body, headers={"Authorization": "Bearer wrong-token"}), 403, "not valid")
    _err(secured.post("/v1/topics", json=body, headers={"Authorization": f"Basic {TOKEN}"}), 401, "Bearer <token>")
    ok = secured.post("/v1/topics", json=body, headers={"Authorization": f"Bearer {TOKEN}"})
    assert ok.status_code == 201
    # reads stay open unless auth_reads; every mutation needs the token
    assert secured.get("/v1/topics").status_code == 200
    for method, url, js in [("PATCH", "/v1/topics/t/config", {"config": {}}),
                            ("POST", f"{P0}/records", {"records": [{"key": "a"}]}),
                            ("POST", f"{P0}/markers", {"producer_id": 1, "producer_epoch": 0, "type": "abort"}),
                            ("POST", f"{P0}/roll", None), ("DELETE", "/v1/topics/t", None)]:
        _err(secured.request(method, url, json=js), 401)


def test_auth_reads(tmp_path: Path) -> None:
    node = make_node(tmp_path, token=TOKEN, auth_reads=True)
    with TestClient(create_app(node)) as c:
        _err(c.get("/v1/topics"), 401)
        assert c.get("/v1/topics", headers={"Authorization": f"Bearer {TOKEN}"}).status_code == 200
        assert c.get("/healthz").json() == {"status": "ok"}
    node.shutdown()


def test_unexpected_exception_is_500_without_a_stack_trace(client: TestClient, monkeypatch: pytest.MonkeyPatch) -> None:
    def boom() -> None:
        raise RuntimeError("secret internals")

    monkeypatch.setattr(client.app.state.node, "topics", boom)
    with TestClient(client.app, raise_server_exceptions=False) as c:
        msg = _err(c.get("/v1/topics"), 500, "RuntimeError")
    assert "secret internals" not in msg
