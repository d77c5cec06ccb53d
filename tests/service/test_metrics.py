"""/metrics: Prometheus text with every API.md metric name, values pulled from node state."""

from __future__ import annotations

from fastapi.testclient import TestClient
from prometheus_client.parser import text_string_to_metric_families

from service.metrics import COUNTERS, GAUGES, METRIC_NAMES
from service.node import Node


def _samples(client: TestClient) -> dict[str, float]:
    r = client.get("/metrics")
    assert r.status_code == 200 and r.headers["content-type"].startswith("text/plain")
    return {s.name: s.value for fam in text_string_to_metric_families(r.text) for s in fam.samples}


def test_every_metric_name_is_exposed(client: TestClient) -> None:
    assert set(METRIC_NAMES) == {
        "max_compaction_delay_secs", "max_clean_time_secs", "uncleanable_partitions_count", "uncleanable_bytes",
        "dead_thread_count", "max_buffer_utilization_percent", "cleaner_recopy_percent", "time_since_last_run_ms",
        "remote_bytes_downloaded_total", "remote_bytes_uploaded_total", "remote_segments_skipped_by_bloom_total",
        "fenced_operations_total", "offline_partitions_count", "corrupt_checkpoints_rebuilt_total",
        "remote_store_unavailable", "remote_store_outages_total", "cleaner_records_removed_total",
        "cleaner_rounds_total", "cleaner_report_write_failures_total", "erasures_pending_count",
        "erasures_at_risk_count", "erasures_overdue_count", "erasure_min_time_left_secs",
        "kafka_log_logflushstats_logflushrateandtimems"}
    samples = _samples(client)
    for name in GAUGES:
        assert name in samples
    for name in COUNTERS:
        assert name in samples  # the exposition keeps the _total suffix
    text = client.get("/metrics").text
    assert "# TYPE remote_bytes_uploaded_total counter" in text and "# TYPE dead_thread_count gauge" in text


def test_values_are_pulled_from_node_state(client: TestClient) -> None:
    assert _samples(client)["dead_thread_count"] == 0
    node = client.app.state.node
    from log.types import TopicPartition
    from metadata.errors import FencedLeaderEpochError

    node.note_error(FencedLeaderEpochError(TopicPartition("t", 0), 1, 2, 0, "publish"))
    assert _samples(client)["fenced_operations_total"] == 1
    node.object_store.put("x/y", b"12345")
    node.object_store.get("x/y")
    s = _samples(client)
    assert s["remote_bytes_uploaded_total"] == 5 and s["remote_bytes_downloaded_total"] == 5


def test_log_flush_time_counts_every_sync(client: TestClient, node: Node) -> None:
    """Kafka's LogFlushRateAndTimeMs: an fsync of one partition and one syncfs of several are a sync each."""
    from log.local_log import RecordSpec
    from service.kafka.durability import group_sync_for

    node.create_topic("flushed", 3, {"cleanup.policy": "delete"})
    logs = [node.log("flushed", p) for p in range(3)]
    for log in logs:
        log.append_records([RecordSpec(b"k", b"v")])
    gs = group_sync_for(node)
    assert gs.make_durable({logs[0]: 1}) == {}
    assert gs.make_durable({logs[1]: 1, logs[2]: 1}) == {}
    name = "kafka_log_logflushstats_logflushrateandtimems"
    samples = _samples(client)
    assert samples[f"{name}_count"] == 2 and samples[f"{name}_sum"] > 0
    assert samples[f"{name}_bucket"] == 2  # the +Inf bucket (the last sample of that name) counts them all
    assert f"# TYPE {name} histogram" in client.get("/metrics").text
