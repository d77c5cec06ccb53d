"""Authentication: with auth_reads every read needs the token, /metrics, /docs and
/openapi.json included; /healthz stays open for probes. Without auth_reads they are open."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from service.app import create_app
from tests.service.conftest import TOKEN, make_node

AUTH = {"Authorization": f"Bearer {TOKEN}"}
GUARDED_WITH_AUTH_READS = ["/metrics", "/docs", "/redoc", "/openapi.json", "/v1/topics", "/v1/cleaner"]


@pytest.fixture
def reads_secured(tmp_path: Path) -> Iterator[TestClient]:
    n = make_node(tmp_path, token=TOKEN, auth_reads=True)
    with TestClient(create_app(n)) as c:
        yield c
    n.shutdown()


@pytest.mark.parametrize("path", GUARDED_WITH_AUTH_READS)
def test_auth_reads_guards_metrics_docs_and_schema(reads_secured: TestClient, path: str) -> None:
    r = reads_secured.get(path)
    assert r.status_code == 401, (path, r.status_code, r.text[:200])
    assert "Bearer" in r.json()["error"]
    assert r.headers["www-authenticate"] == "Bearer"
    r = reads_secured.get(path, headers={"Authorization": "Bearer wrong-token-456"})
    assert r.status_code == 403, (path, r.text[:200])
    r = reads_secured.get(path, headers=AUTH)
    assert r.status_code == 200, (path, r.text[:200])


def test_auth_reads_serves_the_real_schema_and_docs_with_the_token(reads_secured: TestClient) -> None:
    schema = reads_secured.get("/openapi.json", headers=AUTH).json()
    assert schema["info"]["title"] == "tiercompact"
    assert "/v1/topics/{topic}/partitions/{partition}/leadership" in schema["paths"]
    assert "/openapi.json" in reads_secured.get("/docs", headers=AUTH).text
    assert "max_clean_time_secs" in reads_secured.get("/metrics", headers=AUTH).text


def test_healthz_stays_open_with_auth_reads(reads_secured: TestClient) -> None:
    assert reads_secured.get("/healthz").json() == {"status": "ok"}


def test_without_auth_reads_reads_metrics_and_docs_are_open(secured: TestClient) -> None:
    for path in GUARDED_WITH_AUTH_READS:
        assert secured.get(path).status_code == 200, path
    assert secured.post("/v1/topics", json={"name": "t"}).status_code == 401
    assert secured.post("/v1/topics", json={"name": "t"}, headers=AUTH).status_code == 201
