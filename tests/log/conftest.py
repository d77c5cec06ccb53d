from __future__ import annotations

from pathlib import Path

import pytest

from log.clock import MockClock
from log.config import LogConfig
from log.local_log import LocalLog


@pytest.fixture
def make_log(tmp_path: Path, clock: MockClock):
    """Open (or reopen) a LocalLog in a fresh partition dir with config overrides."""
    d = tmp_path / "topic-0"

    def _make(**overrides: object) -> LocalLog:
        cfg = LogConfig.from_dict({k.replace("_", "."): v for k, v in overrides.items()})
        return LocalLog(d, cfg, clock=clock)

    return _make
