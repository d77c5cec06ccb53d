"""Start-up's objects frozen out of the cyclic collector (service/heap.py): frozen on start, reported in the
metrics, given back on stop."""

from __future__ import annotations

import gc
from typing import Any

from service.heap import FROZEN_OBJECTS, StartupHeapFreeze


class _Node:
    def __init__(self) -> None:
        self.metric_collectors: list[Any] = []


def test_start_freezes_what_is_alive_and_reports_it_and_stop_gives_it_back() -> None:
    assert gc.get_freeze_count() == 0
    node = _Node()
    freeze = StartupHeapFreeze(node)
    freeze.start()
    try:
        frozen = gc.get_freeze_count()
        assert frozen > 10_000  # a test process's modules alone
        assert node.metric_collectors == [freeze]
        (metric,) = list(freeze.collect())
        assert metric.name == FROZEN_OBJECTS and metric.samples[0].value == frozen
    finally:
        freeze.stop()
    assert gc.get_freeze_count() == 0 and node.metric_collectors == []
