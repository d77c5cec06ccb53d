"""The coordinator tests' shared fixture."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.coordinator.txn_harness import Harness


@pytest.fixture
def h(tmp_path: Path) -> Iterator[Harness]:
    """A transaction coordinator on its own SQLite store (closed after the test)."""
    harness = Harness(tmp_path)
    yield harness
    harness.tc.close()
    harness.store.close()
