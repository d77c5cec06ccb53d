"""Start-up's objects frozen out of the cyclic garbage collector, so that its full collections under load stay short.

A started node holds about 130,000 long-lived objects: modules, FastAPI's and SQLAlchemy's tables, the node's
partitions and caches. CPython's full collection walks every one of them. Under load one comes every 20 s or so,
since each request's short-lived objects are promoted to the old generation and a full collection runs once those
reach a quarter of it. Each such collection stopped every thread for 110-135 ms on a 2-core machine; a 20-second
Kafka produce run at full rate had one, and its requests waited that long.

``gc.freeze()`` once start-up is done moves those objects to a permanent generation that no collection walks. The
full collections under load then walk only what came after: under 1 ms in the same run.

The cost: a reference cycle among start-up's objects that becomes garbage later (a partition loaded at start and
deleted afterwards) is not collected. Objects freed by reference counting, most of them, still are. What leaks is
bounded by what start-up made, once. :meth:`StartupHeapFreeze.stop` gives the objects back to the collector.
"""

from __future__ import annotations

import gc
import logging
from collections.abc import Iterator
from typing import Any

from prometheus_client.core import GaugeMetricFamily, Metric

logger = logging.getLogger(__name__)

FROZEN_OBJECTS = "tiercompact_gc_frozen_objects"


class StartupHeapFreeze:
    """A ``tiercompact serve`` companion (service/app.py), started after the node and the other companions: one full
    collection, then ``gc.freeze()``; it reports the frozen count in the node's metrics."""

    def __init__(self, node: Any) -> None:
        self.node = node

    def start(self) -> None:
        gc.collect()
        gc.freeze()
        logger.info("start-up done: %d objects frozen out of the garbage collector's full collections",
                    gc.get_freeze_count())
        self.node.metric_collectors.append(self)

    def stop(self) -> None:
        if self in self.node.metric_collectors:
            self.node.metric_collectors.remove(self)
        gc.unfreeze()

    def collect(self) -> Iterator[Metric]:
        yield GaugeMetricFamily(FROZEN_OBJECTS, "Objects start-up left, frozen out of the cyclic garbage collector "
                                                "(gc.freeze) so that its full collections under load stay short.",
                                value=gc.get_freeze_count())
