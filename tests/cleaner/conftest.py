from __future__ import annotations

from pathlib import Path

import pytest

from log.clock import MockClock
from log.config import LogConfig
from log.local_log import LocalLog


@pytest.fixture
def make_log(tmp_path: Path, clock: MockClock):
    """A LocalLog in tmp_path/<topic>-0 with config overrides (Kafka names)."""

    def _make(topic: str = "t", **cfg: object) -> LocalLog:
        return LocalLog(tmp_path / f"{topic}-0", LogConfig.from_dict(cfg), clock=clock)

    return _make
