"""Fixtures for the model tests: AWS test credentials for moto, one S3 bucket per session,
and the session's one Spark fixture (shared with tests/spark: both use getOrCreate)."""

from __future__ import annotations

import pytest

from tests.model.engines import create_bucket
from tests.spark.conftest import spark  # noqa: F401 - the one Spark session of the test run


@pytest.fixture
def aws_test_credentials(monkeypatch: pytest.MonkeyPatch) -> None:
    """Node builds its S3 client from the environment; moto accepts any credentials."""
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "testing")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "testing")
    monkeypatch.setenv("AWS_DEFAULT_REGION", "us-east-1")


@pytest.fixture(scope="session")
def model_bucket(moto_server_url: str) -> str:
    return create_bucket(moto_server_url)


@pytest.fixture(autouse=True)
def _no_fsync(monkeypatch: pytest.MonkeyPatch) -> None:
    """The model tests restart nodes cleanly, never by power cut: fsync only costs time here
    (thousands of checkpoint and snapshot writes per run)."""
    import os

    monkeypatch.setattr(os, "fsync", lambda fd: None)
