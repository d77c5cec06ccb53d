"""Fixtures for the model tests: AWS test credentials for moto, a fresh S3 bucket per test,
and the session's one Spark fixture (shared with tests/spark: both use getOrCreate)."""

from __future__ import annotations

import pytest

from tests.model.engines import create_bucket
from tests.spark.conftest import spark  # noqa: F401 - the one Spark session of this test process


@pytest.fixture
def aws_test_credentials(monkeypatch: pytest.MonkeyPatch) -> None:
    """Node builds its S3 client from the environment; moto accepts any credentials."""
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "testing")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "testing")
    monkeypatch.setenv("AWS_DEFAULT_REGION", "us-east-1")


@pytest.fixture
def model_bucket(moto_server_url: str) -> str:
    """A fresh bucket per test: moto's in-process ``mock_aws`` (tests/contract) resets the shared
    server's buckets when it ends, so a session-wide bucket would not survive a contract test
    that a worker happens to run in between (``make test`` hands out slow files first)."""
    return create_bucket(moto_server_url)


@pytest.fixture(autouse=True)
def _no_fsync(monkeypatch: pytest.MonkeyPatch) -> None:
    """The model tests restart nodes cleanly, never by power cut: fsync only costs time here
    (thousands of checkpoint and snapshot writes per run)."""
    import os

    monkeypatch.setattr(os, "fsync", lambda fd: None)
