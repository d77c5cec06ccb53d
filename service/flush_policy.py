"""Kafka's flush.messages and flush.ms topic configs for every append path (HTTP and Kafka): checked after each append and by a periodic task.

One :class:`log.flush.FlushTracker` per node remembers what each partition has synced;
after an append (the node's append listeners, called in the appending thread before the
request is answered) a partition whose ``flush.messages`` is reached is fsynced, and every
:data:`FLUSH_CHECK_INTERVAL_MS` the periodic task fsyncs partitions holding records older
than their ``flush.ms`` (Kafka's log flusher, ``log.flush.scheduler.interval.ms``). The
Kafka listener's acks=-1 fsyncs go through the same tracker.
"""

from __future__ import annotations

import logging
import weakref
from typing import Any

from log.errors import TiercompactError
from log.flush import FlushTracker
from log.types import TopicPartition
from service.per_node import per_node
from service.threads import PeriodicTask

logger = logging.getLogger(__name__)

#: how often flush.ms is checked (Kafka's log.flush.scheduler.interval.ms)
FLUSH_CHECK_INTERVAL_MS = 1000

#: the node's tracker (made on first use)
flush_tracker_for = per_node(lambda _node: FlushTracker())


def _after_append(node_ref: weakref.ref[Any], tp: TopicPartition) -> None:
    node = node_ref()
    if node is None:
        return
    try:
        log = node.log_manager.get_log(tp)
        if log.config.flush_policy is not None:  # the default (both off) costs the produce path nothing more
            flush_tracker_for(node).maybe_flush(log)
    except (TiercompactError, OSError) as e:  # the append itself succeeded; the next check tries again
        logger.warning("%s: flush.messages fsync failed: %s", tp, e)


def run_flush_once(node: Any) -> int:
    """fsync the partitions whose flush.ms (or flush.messages) is due; returns how many."""
    tracker = flush_tracker_for(node)
    synced = 0
    for tp, log in node.log_manager.all_logs().items():
        try:
            synced += tracker.maybe_flush(log)
        except (TiercompactError, OSError) as e:
            logger.warning("%s: flush.ms fsync failed: %s", tp, e)
    return synced


def install(node: Any) -> PeriodicTask:
    """Hook the node's appends and return the (not yet started) flush.ms task."""
    ref = weakref.ref(node)
    node.add_append_listener(lambda tp: _after_append(ref, tp))
    return PeriodicTask("tiercompact-flush", lambda: run_flush_once(node), FLUSH_CHECK_INTERVAL_MS)
