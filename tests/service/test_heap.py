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
        # the gauge is the count when collected: frozen objects may be freed meanwhile (another thread of this process
        # dropping its last reference), never added but by gc.freeze(), so it lies between the counts around it
        before = gc.get_freeze_count()
        (metric,) = list(freeze.collect())
        after = gc.get_freeze_count()
        assert metric.name == FROZEN_OBJECTS and after <= metric.samples[0].value <= before <= frozen
    finally:
        freeze.stop()
    assert gc.get_freeze_count() == 0 and node.metric_collectors == []
