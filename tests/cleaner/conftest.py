from __future__ import annotations

from pathlib import Path

import pytest

from cleaner.kernels import fastpath
from log.clock import MockClock
from log.config import LogConfig
from log.local_log import LocalLog


@pytest.fixture
def make_log(tmp_path: Path, clock: MockClock):
    """A LocalLog in tmp_path/<topic>-0 with config overrides (Kafka names)."""

    def _make(topic: str = "t", **cfg: object) -> LocalLog:
        return LocalLog(tmp_path / f"{topic}-0", LogConfig.from_dict(cfg), clock=clock)

    return _make


@pytest.fixture(autouse=True, params=["compiled", "pure"])
def record_kernels(request: pytest.FixtureRequest):
    """Every cleaner test runs with the compiled record kernels and with the pure-Python reference
    (a CompactOffsetMap built during the test takes the kernels chosen here)."""
    if request.param == "compiled":
        k = fastpath.compiled_kernels()
        if k is None:
            pytest.fail("the compiled record kernels are not built (pip install -e . with a C compiler)")
    else:
        k = fastpath.pure_kernels()
    prev = fastpath.use_kernels(k)
    yield k
    fastpath.use_kernels(prev)
