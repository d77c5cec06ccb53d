"""Backend fixtures for the contract suites: object stores (file://, moto in-process, moto
over HTTP) and metadata managers (SQLite memory/file, PostgreSQL when configured)."""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from metadata.sql import SqlRemoteLogMetadataManager
from remote.file_store import FileObjectStore
from remote.object_store import ObjectStore
from remote.s3_store import MiB, S3ObjectStore

S3_CREDS = {"access_key_id": "testing", "secret_access_key": "testing", "region": "us-east-1"}
#: small multipart settings so contract tests exercise multipart with ~11 MiB objects
S3_TEST_OPTIONS = {**S3_CREDS, "multipart_threshold": 5 * MiB, "part_size": 5 * MiB, "backoff_s": 0.01}


def _make_bucket(endpoint_url: str | None) -> str:
    import boto3

    bucket = f"tc-{uuid.uuid4().hex[:12]}"
    boto3.client("s3", endpoint_url=endpoint_url, region_name="us-east-1", aws_access_key_id="testing",
                 aws_secret_access_key="testing").create_bucket(Bucket=bucket)
    return bucket


@pytest.fixture
def s3_moto_store() -> Iterator[S3ObjectStore]:
    from moto import mock_aws

    with mock_aws():
        store = S3ObjectStore(_make_bucket(None), "pre/fix", **S3_TEST_OPTIONS)
        yield store
        store.close()


@pytest.fixture
def s3_server_store(moto_server_url: str) -> Iterator[S3ObjectStore]:
    store = S3ObjectStore(_make_bucket(moto_server_url), "pre/fix", endpoint_url=moto_server_url,
                          **S3_TEST_OPTIONS)
    yield store
    store.close()


@pytest.fixture(params=["file", "s3-moto", "s3-moto-server"])
def object_store(request: pytest.FixtureRequest, tmp_path: Path) -> ObjectStore:
    if request.param == "file":
        return FileObjectStore(tmp_path / "objects")
    if request.param == "s3-moto":
        return request.getfixturevalue("s3_moto_store")  # type: ignore[no-any-return]
    return request.getfixturevalue("s3_server_store")  # type: ignore[no-any-return]


def postgres_url() -> str:
    """TIERCOMPACT_TEST_POSTGRES_URL; in CI its absence is a failure, not a skip."""
    url = os.environ.get("TIERCOMPACT_TEST_POSTGRES_URL")
    if not url:
        if os.environ.get("CI", "").lower() in ("1", "true", "yes"):
            pytest.fail("CI=true but TIERCOMPACT_TEST_POSTGRES_URL is not set: run "
                        "`eval \"$(scripts/ci-postgres.sh)\"` first")
        pytest.skip("PostgreSQL contract tests need TIERCOMPACT_TEST_POSTGRES_URL (see scripts/ci-postgres.sh)")
    return url


def with_search_path(url: str, schema: str) -> str:
    """``url`` whose connections use ``schema`` (libpq's ``options=-csearch_path=...``), replacing any it had."""
    from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

    parts = urlsplit(url)
    query = [(k, v) for k, v in parse_qsl(parts.query) if k != "options"]
    query.append(("options", f"-csearch_path={schema}"))
    return urlunsplit(parts._replace(query=urlencode(query)))


@contextmanager
def private_postgres_schema(prefix: str = "tc") -> Iterator[str]:
    """TIERCOMPACT_TEST_POSTGRES_URL with a fresh private schema (search_path), dropped afterwards:
    for tests that start several stores or processes on one empty PostgreSQL store."""
    import psycopg

    from metadata.sql import normalize_url

    base = postgres_url()
    schema = f"{prefix}_{uuid.uuid4().hex[:12]}"
    conninfo = normalize_url(base).replace("postgresql+psycopg://", "postgresql://")
    with psycopg.connect(conninfo, autocommit=True) as conn:
        conn.execute(f'CREATE SCHEMA "{schema}"')
    try:
        yield with_search_path(base, schema)
    finally:
        with psycopg.connect(conninfo, autocommit=True) as conn:
            conn.execute(f'DROP SCHEMA "{schema}" CASCADE')


METADATA_BACKENDS = [
    "sqlite-memory",
    "sqlite-memory-rowcount",
    "sqlite-file",
    "sqlite-file-reread",
    pytest.param("postgres", marks=pytest.mark.postgres),
]


def open_manager(kind: str, tmp_path: Path, **kw: object) -> SqlRemoteLogMetadataManager:
    if kind == "sqlite-memory":
        return SqlRemoteLogMetadataManager("sqlite:///:memory:", **kw)  # type: ignore[arg-type]
    if kind == "sqlite-memory-rowcount":
        return SqlRemoteLogMetadataManager("sqlite:///:memory:", fence_strategy="rowcount", **kw)  # type: ignore[arg-type]
    if kind == "sqlite-file":
        return SqlRemoteLogMetadataManager(f"sqlite:///{tmp_path}/md/metadata.db", **kw)  # type: ignore[arg-type]
    if kind == "sqlite-file-reread":
        return SqlRemoteLogMetadataManager(f"sqlite:///{tmp_path}/md/metadata.db", fence_strategy="reread",
                                           **kw)  # type: ignore[arg-type]
    url = postgres_url()
    from sqlalchemy import create_engine

    from metadata.sql import normalize_url
    from metadata.sql.schema import _meta

    engine = create_engine(normalize_url(url))
    _meta.drop_all(engine)  # each test starts from an empty schema
    engine.dispose()
    return SqlRemoteLogMetadataManager(url, **kw)  # type: ignore[arg-type]


@pytest.fixture(params=METADATA_BACKENDS)
def metadata_backend(request: pytest.FixtureRequest) -> str:
    return str(request.param)
