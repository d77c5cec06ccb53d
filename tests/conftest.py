"""Small, shared fixtures. Heavy fixtures live in per-directory conftest.py files."""

from __future__ import annotations

import os

import pytest

from log.clock import MockClock


@pytest.fixture(autouse=True)
def _clean_environ(monkeypatch: pytest.MonkeyPatch) -> None:
    """Tests never see the developer's TIERCOMPACT_* or AWS_* settings (TIERCOMPACT_TEST_* stay)."""
    for k in list(os.environ):
        if (k.startswith("TIERCOMPACT_") and not k.startswith("TIERCOMPACT_TEST_")) or k.startswith("AWS_"):
            monkeypatch.delenv(k, raising=False)


@pytest.fixture
def clock() -> MockClock:
    return MockClock()
