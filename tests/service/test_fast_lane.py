"""RecordsFastLane answers plain produce and read requests without FastAPI's per-request work
and hands everything else to the FastAPI routes: request by request, an app with the lane and
one without it give the same status and body (errors included), and the lane really serves
the plain requests."""

from __future__ import annotations

import base64
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient

from service.app import create_app
from service.routes.partitions import RecordsFastLane
from tests.service.conftest import TOKEN, make_node

P0 = "/v1/topics/t/partitions/0"
B64 = base64.b64encode


def _client(tmp_path: Path, lane: bool, **options: Any) -> tuple[TestClient, Any]:
    node = make_node(tmp_path, **options)
    app = create_app(node)
    if not lane:
        app.fast_lane = None
    return TestClient(app), node


def _lane(client: TestClient) -> RecordsFastLane:
    layer = client.app.fast_lane  # type: ignore[attr-defined]
    while not isinstance(layer, RecordsFastLane):
        layer = layer.app
    return layer


def _fallthroughs(client: TestClient) -> list[str]:
    """Wrap the lane's inner app to record the requests it handed on."""
    seen: list[str] = []
    layer = _lane(client)
    inner = layer.app

    async def counting(scope, receive, send):
        seen.append(f"{scope['method']} {scope['path']}?{scope.get('query_string', b'').decode()}")
        await inner(scope, receive, send)

    layer.app = counting
    return seen


def _norm(r) -> tuple[int, Any]:
    ctype = r.headers.get("content-type", "")
    return r.status_code, (r.json() if ctype.startswith("application/json") else r.text), ctype


REQUESTS: list[tuple[str, str, dict[str, Any]]] = [
    ("POST", f"{P0}/records", {"json": {"records": [{"key": "a", "value": "1", "timestamp": 5},
                                                     {"key": "b", "value": None, "timestamp": 6},
                                                     {"key": "c", "value": "x", "timestamp": 7}]}}),
    ("POST", f"{P0}/records", {"json": {"encoding": "base64", "compression": "lz4", "records": [
        {"key": B64(b"\xff").decode(), "value": B64(b"\x00v").decode(), "timestamp": 8,
         "headers": [{"key": "h", "value": "AA=="}, {"key": "n"}]}]}}),
    ("POST", f"{P0}/records", {"json": {"producer": {"id": 7, "epoch": 0, "base_sequence": 0},
                                        "records": [{"key": "p", "value": "q", "timestamp": 9}]}}),
    ("POST", f"{P0}/records", {"json": {"producer": {"id": 7, "epoch": 0, "base_sequence": 5},
                                        "records": [{"key": "p", "value": "q", "timestamp": 9}]}}),
    ("POST", f"{P0}/records", {"json": {"encoding": "base64", "records": [{"key": "!!", "value": None}]}}),
    ("POST", f"{P0}/records", {"json": {"records": []}}),
    ("POST", f"{P0}/records", {"json": {"records": [{"key": "a", "extra": 1}]}}),
    ("POST", f"{P0}/records", {"json": {"record": [{"key": "a"}]}}),
    ("POST", f"{P0}/records", {"json": {"records": [{"key": 5}]}}),
    ("POST", f"{P0}/records", {"json": {"records": [{"key": "a", "timestamp": -2}]}}),
    ("POST", f"{P0}/records", {"json": {"records": [{"key": "a", "timestamp": "7"}]}}),
    ("POST", f"{P0}/records", {"json": {"records": [{"key": "a", "timestamp": 2**70}]}}),
    ("POST", f"{P0}/records", {"json": {"records": [{"key": "a"}], "compression": "brotli"}}),
    ("POST", f"{P0}/records", {"content": b'{"records": [{"key": "\\ud800"}]}',
                               "headers": {"content-type": "application/json"}}),
    ("POST", f"{P0}/records", {"content": b'{"records": [{"key": "a", "timestamp": NaN}]}',
                               "headers": {"content-type": "application/json"}}),
    ("POST", f"{P0}/records", {"content": b'{"records": [', "headers": {"content-type": "application/json"}}),
    ("POST", f"{P0}/records", {"content": b'{"records": [{"key": "a"}]}', "headers": {"content-type": "text/plain"}}),
    ("POST", f"{P0}/records", {"content": b'{"records": [{"key": "a"}]}'}),
    ("POST", "/v1/topics/nope/partitions/0/records", {"json": {"records": [{"key": "a"}]}}),
    ("POST", "/v1/topics/t/partitions/3/records", {"json": {"records": [{"key": "a"}]}}),
    ("POST", "/v1/topics/t/partitions/99999999999/records", {"json": {"records": [{"key": "a"}]}}),
    ("POST", "/v1/topics/t/partitions/-1/records", {"json": {"records": [{"key": "a"}]}}),
    ("POST", "/v1/topics/..%2F/partitions/0/records", {"json": {"records": [{"key": "a"}]}}),
    ("GET", f"{P0}/records", {}),
    ("GET", f"{P0}/records?offset=1&max_records=2", {}),
    ("GET", f"{P0}/records?offset=1&max_records=2&encoding=base64&isolation=read_committed", {}),
    ("GET", f"{P0}/records?encoding=base64", {}),
    ("GET", f"{P0}/records?offset=99", {}),
    ("GET", f"{P0}/records?offset=-1", {}),
    ("GET", f"{P0}/records?offset=01", {}),
    ("GET", f"{P0}/records?offset=%2B1", {}),
    ("GET", f"{P0}/records?offset=9223372036854775808", {}),
    ("GET", f"{P0}/records?max_records=0", {}),
    ("GET", f"{P0}/records?max_records=1000000", {}),
    ("GET", f"{P0}/records?max_records=abc", {}),
    ("GET", f"{P0}/records?isolation=dirty", {}),
    ("GET", f"{P0}/records?encoding=latin-1", {}),
    ("GET", f"{P0}/records?offset=1&offset=2", {}),
    ("GET", f"{P0}/records?offset", {}),
    ("GET", f"{P0}/records?unknown=1", {}),
    ("GET", "/v1/topics/nope/partitions/0/records", {}),
    ("GET", "/v1/topics/t/partitions/7/records", {}),
    ("PUT", f"{P0}/records", {}),
]


def _run(client: TestClient, requests) -> list[tuple[int, Any]]:
    out = []
    for method, path, kw in requests:
        out.append(_norm(client.request(method, path, **kw)))
    return out


def test_same_answers_with_and_without_the_lane(tmp_path: Path) -> None:
    answers = []
    for lane in (True, False):
        client, node = _client(tmp_path / str(lane), lane)
        with client:
            assert client.post("/v1/topics", json={"name": "t", "partitions": 2,
                                                   "config": {"cleanup.policy": "compact"}}).status_code == 201
            handed_on = _fallthroughs(client) if lane else []
            answers.append(_run(client, REQUESTS))
        node.shutdown()
        if lane:
            # the plain requests never reached FastAPI
            assert f"GET {P0}/records?" not in handed_on
            assert f"GET {P0}/records?offset=1&max_records=2" not in handed_on
            assert f"GET {P0}/records?offset=99" not in handed_on  # an error the lane answers itself
            assert f"GET {P0}/records?offset=01" in handed_on  # a non-canonical number goes to FastAPI
            # of the 18 produce requests to partition 0, the 7 the model accepts were the lane's
            # (4 of them answered with the node's error), the 11 it refuses went to FastAPI
            assert handed_on.count(f"POST {P0}/records?") == 11
    for req, with_lane, without in zip(REQUESTS, *answers, strict=True):
        assert with_lane == without, req
    statuses = [a[0] for a in answers[0]]
    assert statuses[:4] == [200, 200, 200, 409] and 200 in statuses[23:] and 416 in statuses


@pytest.mark.parametrize("auth_reads", [False, True])
def test_same_auth_answers_with_and_without_the_lane(tmp_path: Path, auth_reads: bool) -> None:
    good, bad = {"authorization": f"Bearer {TOKEN}"}, {"authorization": "Bearer nope"}
    body = {"records": [{"key": "a", "value": "b", "timestamp": 1}]}
    requests = [("POST", f"{P0}/records", {"json": body}), ("POST", f"{P0}/records", {"json": body, "headers": bad}),
                ("POST", f"{P0}/records", {"json": body, "headers": {"authorization": "Basic x"}}),
                ("POST", f"{P0}/records", {"json": body, "headers": good}),
                ("GET", f"{P0}/records", {}), ("GET", f"{P0}/records", {"headers": bad}),
                ("GET", f"{P0}/records", {"headers": good})]
    answers = []
    for lane in (True, False):
        client, node = _client(tmp_path / str(lane), lane, token=TOKEN, auth_reads=auth_reads)
        with client:
            client.post("/v1/topics", json={"name": "t", "config": {"cleanup.policy": "compact"}},
                        headers=good).raise_for_status()
            answers.append(_run(client, requests))
        node.shutdown()
    assert answers[0] == answers[1]
    assert [a[0] for a in answers[0]][:4] == [401, 403, 401, 200]


def _asgi(app: Any, method: str, path: str, headers: list[tuple[bytes, bytes]], body: bytes) -> tuple[int, bytes]:
    """One request straight to the ASGI app, with headers a client library would not send."""
    import asyncio

    scope = {"type": "http", "asgi": {"version": "3.0"}, "http_version": "1.1", "method": method,
             "scheme": "http", "path": path, "raw_path": path.encode(), "query_string": b"", "root_path": "",
             "headers": headers, "client": ("127.0.0.1", 1), "server": ("127.0.0.1", 80)}
    messages = [{"type": "http.request", "body": body, "more_body": False}]
    sent: list[dict[str, Any]] = []

    async def receive() -> dict[str, Any]:
        return messages.pop(0) if messages else {"type": "http.disconnect"}

    async def send(message: dict[str, Any]) -> None:
        sent.append(message)

    asyncio.run(app(scope, receive, send))
    return sent[0]["status"], b"".join(m.get("body", b"") for m in sent[1:])


def test_same_body_limit_and_framing_answers_with_and_without_the_lane(tmp_path: Path) -> None:
    """The lane sits in front of BodyLimitMiddleware: a body over max_request_bytes, a length
    that is not a plain number, two lengths or a chunked body go to the app, which answers as
    it always did."""
    small = b'{"records": [{"key": "a", "value": "b"}]}'
    big = b'{"records": [{"key": "a", "value": "' + b"x" * 3000 + b'"}]}'
    json_type = (b"content-type", b"application/json")
    cases = [[json_type, (b"content-length", str(len(small)).encode())],
             [json_type, (b"content-length", str(len(big)).encode())],
             [json_type, (b"content-length", b"+" + str(len(small)).encode())],
             [json_type, (b"content-length", b"abc")],
             [json_type, (b"content-length", str(len(small)).encode()), (b"content-length", b"99999")],
             [json_type, (b"transfer-encoding", b"chunked")],
             [json_type]]
    answers = []
    for lane in (True, False):
        client, node = _client(tmp_path / str(lane), lane, max_request_bytes=2048)
        with client:
            client.post("/v1/topics", json={"name": "t", "config": {"cleanup.policy": "compact"}}).raise_for_status()
            handed_on = _fallthroughs(client) if lane else []
            answers.append([_asgi(client.app, "POST", f"{P0}/records", h, big if i == 1 else small)
                            for i, h in enumerate(cases)])
        node.shutdown()
        if lane:
            assert len(handed_on) == len(cases) - 1  # only the first is the lane's
    assert answers[0] == answers[1]
    assert [a[0] for a in answers[0]][:4] == [200, 413, 200, 400]


def test_an_unexpected_error_in_the_lane_is_a_json_500_as_without_it(tmp_path: Path,
                                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    answers = []
    for lane in (True, False):
        client, node = _client(tmp_path / str(lane), lane)
        with client:
            client.post("/v1/topics", json={"name": "t", "config": {"cleanup.policy": "compact"}}).raise_for_status()

            def broken(*_a: Any, **_k: Any) -> Any:
                raise RuntimeError("disk on fire")

            monkeypatch.setattr(node, "produce_columns", broken)
            monkeypatch.setattr(node, "read", broken)
            answers.append(_run(client, [("POST", f"{P0}/records", {"json": {"records": [{"key": "a"}]}}),
                                         ("GET", f"{P0}/records", {}),
                                         ("GET", "/healthz", {})]))
        node.shutdown()
    assert answers[0] == answers[1]
    assert [a[0] for a in answers[0]] == [500, 500, 200]
    assert "RuntimeError" in answers[0][0][1]["error"]
