"""Spark offload without a data dir and from a serving node, on the run's one Spark session.

* A standalone job (metadata store + object store only, topic config from the store) writes the
  in-process engine's bytes; one whose newest remote snapshot shows a transaction still open
  stops below it (its ABORT marker may be in the node's untiered log).
* A Python worker killed during the rewrite is retried; same bytes.
* A node with a spark_master: the tiered pool offloads an engine=spark partition and keeps
  serving; an API job fenced by a leadership change leaves no upload and is retried under the
  node's new epoch; jobs and reports show engine "spark".
"""

from __future__ import annotations

import threading
import time
from pathlib import Path
from typing import Any

import pytest

from cleaner.spark.job import SparkCleanJob
from log.local_log import RecordSpec
from log.record import ControlRecordType
from log.types import TopicPartition
from metadata.topic_configs import StoredTopic
from service.config import load_config
from service.node import Node
from tests.spark.conftest import (
    SPARK_MASTER,
    TASK_STAGES,
    build,
    clean_in_process,
    make_world,
    mode_config,
    partitions_of,
    remote_image,
)
from tests.tiered.conftest import TIERED, World, assert_no_leak, final_state

pytestmark = pytest.mark.spark


def _standalone(spark: Any, w: World, **kw: Any) -> SparkCleanJob:
    url, opts = w.store_spec  # type: ignore[attr-defined]
    w.rlmm.put_topic_config(StoredTopic("t", len(partitions_of(w)), dict(w.lm.topic("t").config.overrides)))
    return SparkCleanJob(spark, rlmm=w.rlmm, store_url=url, store_options=opts,
                         views=SparkCleanJob.standalone_views(w.rlmm, url, opts), broker_id=w.broker_id,
                         clock=w.clock, **kw)


def _file_store(root: Path) -> tuple[str, dict[str, Any]]:
    return f"file://{root}", {}


def test_standalone_job_needs_no_data_dir_and_matches_in_process(spark: Any, tmp_path: Path, mode: str) -> None:
    a = make_world(tmp_path / "a", _file_store(tmp_path / "sa"))
    b = make_world(tmp_path / "b", _file_store(tmp_path / "sb"))
    try:
        for w in (a, b):
            build(w, 7, rounds=4)
        tp = partitions_of(a)[0]
        clean_in_process(a, tp)
        outcome = _standalone(spark, b, config=mode_config(mode)).run([tp])[tp]
        assert outcome.status == "cleaned", outcome.error
        assert outcome.segments_cleaned > 0
        assert remote_image(a, tp) == remote_image(b, tp)
        assert a.rlmm.cleaner_offsets(tp) == b.rlmm.cleaner_offsets(tp)
        b.rlm.delete_unreferenced(tp)
        assert_no_leak(b)
        assert [r.engine for r in b.rlmm.list_compaction_reports(tp)] == ["spark"]
    finally:
        a.close()
        b.close()


def test_standalone_job_stops_below_a_transaction_open_at_the_remote_end(spark: Any, tmp_path: Path,
                                                                          mode: str) -> None:
    w = make_world(tmp_path / "w", _file_store(tmp_path / "s"))
    try:
        build(w, 3, rounds=3)
        tp = partitions_of(w)[0]
        log = w.lm.get_log(tp)
        first_txn = log.log_end_offset
        log.append_records([RecordSpec(b"k001", b"aborted-value")], producer_id=900, producer_epoch=0,
                           base_sequence=0, transactional=True)
        log.roll()
        log.append_marker(900, 0, ControlRecordType.ABORT)  # stays in the local, untiered log
        w.rlm.tier(tp)
        remote = w.rlmm.list_remote_log_segments(tp)
        assert remote[-1].end_offset + 1 == first_txn + 1  # the aborted data is remote, its marker is not
        outcome = _standalone(spark, w, config=mode_config(mode)).run([tp])[tp]
        assert outcome.status == "cleaned", outcome.error
        assert outcome.end_offset <= first_txn
    finally:
        w.close()


def test_python_worker_killed_during_the_rewrite_is_retried(spark: Any, tmp_path: Path, mode: str) -> None:
    a = make_world(tmp_path / "a", _file_store(tmp_path / "sa"))
    b = make_world(tmp_path / "b", _file_store(tmp_path / "sb"))
    try:
        for w in (a, b):
            build(w, 11, rounds=3)
        tp = partitions_of(a)[0]
        clean_in_process(a, tp)
        kill = frozenset({"rewrite"}) if mode == "split" else TASK_STAGES[mode]
        job = _standalone(spark, b, config=mode_config(mode, max_task_failures=2, kill_first_attempt=kill))
        outcome = job.run([tp])[tp]
        assert outcome.status == "cleaned", outcome.error
        assert remote_image(a, tp) == remote_image(b, tp)
        b.rlm.delete_unreferenced(tp)
        assert_no_leak(b)  # whole: the killed attempt's uploads were swept at the job's end
    finally:
        a.close()
        b.close()


# ---- a serving node with a spark_master -------------------------------------------------------------

def _node(tmp_path: Path, **options: Any) -> Node:
    return Node(load_config({"data_dir": tmp_path / "node", "spark_master": SPARK_MASTER, "cleaner_threads": 0,
                             "tiered_cleaner_threads": 1, "log_level": "warning", **options}))


def _fill(node: Node, topic: str, rounds: int, keys: int = 20) -> dict[bytes, bytes]:
    expected: dict[bytes, bytes] = {}
    for r in range(rounds):
        specs = [RecordSpec(f"k{i:03d}".encode(), f"v{r}-{i}".encode() * 4) for i in range(keys)]
        node.produce(topic, 0, specs)
        expected.update((s.key, s.value) for s in specs)  # type: ignore[misc]
        node.roll(topic, 0)
    node.tier(topic, 0)
    return expected


def _read(node: Node, topic: str) -> list[tuple[int, bytes | None, bytes | None]]:
    out: list[tuple[int, bytes | None, bytes | None]] = []
    offset = 0
    while True:
        res = node.read(topic, 0, offset, max_records=1000)
        if not res.records:
            return out
        out += [(r.offset, r.key, r.value) for r in res.records]
        offset = res.records[-1].offset + 1


CONFIG = {**TIERED, "segment.bytes": 4096, "local.retention.ms": 0, "min.cleanable.dirty.ratio": 0.01}


def test_leadership_change_during_a_job_fences_it_and_the_node_retries(spark: Any, tmp_path: Path) -> None:
    node = _node(tmp_path)
    twin = Node(load_config({"data_dir": tmp_path / "twin", "cleaner_threads": 0, "log_level": "warning"}))
    try:
        for n in (node, twin):
            n.create_topic("t", 1, CONFIG)
            _fill(n, "t", 6)
        tp = TopicPartition("t", 0)
        epoch = node.remote.leader_epoch(tp)
        moved = threading.Event()

        def move_leadership(stage: str, tps: list[TopicPartition]) -> None:
            if stage == "rewritten" and not moved.is_set():
                moved.set()  # re-elected at a new epoch: the job's uploads are now a zombie's
                node.remote.become_leader(tp, epoch + 1, node.broker_id)

        assert node.spark is not None
        node.spark.on_stage = move_leadership
        job = node.submit_spark_clean("t", [0])
        assert job.done.wait(180)
        assert moved.is_set()
        assert job.state == "succeeded", job.error
        assert job.attempts == 2 and job.engine == "spark" and job.spark_application_id
        [outcome] = job.stats["partitions"]  # type: ignore[index]
        assert outcome["status"] == "cleaned" and outcome["leader_epoch"] == epoch + 1
        reports = node.metadata.list_compaction_reports(tp)
        assert [(r.engine, r.outcome) for r in reports][:2] == [("spark", "completed"), ("spark", "fenced")]
        assert all(r.round_id.startswith(job.spark_application_id + ":") for r in reports[:2])  # the report names it
        # nothing of the fenced attempt is left: every object belongs to a known segment
        known = {m.id for m in node.metadata.list_remote_log_segments(tp)}
        known |= {m.id for m in node.metadata.unreferenced_segments(tp, orphan_grace_ms=10**12)}
        stored = {k.rsplit("-", 1)[-1].split(".")[0] for k in node.object_store.list(prefix="")}
        assert stored <= known | {""}, stored - known
        # the same logical log as the in-process engine
        twin.clean("t", 0)
        assert _read(node, "t") == _read(twin, "t")
        assert node.cleaner_checkpoint(tp) == twin.cleaner_checkpoint(tp)
        listed = node.jobs.list(kind="spark-clean")
        assert listed and listed[0].job_id == job.job_id
    finally:
        node.shutdown(timeout=30)
        twin.shutdown()


def test_tiered_pool_offloads_and_the_node_keeps_serving(spark: Any, tmp_path: Path) -> None:
    node = _node(tmp_path, cleaner_threads=1, cleaner_backoff_ms=200)
    try:
        node.create_topic("t", 1, {**CONFIG, "remote.compaction.engine": "spark"})
        expected = _fill(node, "t", 6)
        node.start()
        stop = threading.Event()
        served: list[int] = []
        errors: list[BaseException] = []

        def serve() -> None:  # producers and readers keep running while the job does
            i = 0
            try:
                while not stop.is_set():
                    key = f"live{i % 5}".encode()
                    node.produce("t", 0, [RecordSpec(key, str(i).encode())])
                    expected[key] = str(i).encode()
                    node.read("t", 0, 0, max_records=50)
                    served.append(i)
                    i += 1
                    time.sleep(0.01)
            except BaseException as e:  # noqa: BLE001 - reported below
                errors.append(e)

        t = threading.Thread(target=serve)
        t.start()
        deadline = time.monotonic() + 180
        jobs: list[Any] = []
        while time.monotonic() < deadline:
            jobs = [j for j in node.jobs.list(kind="spark-clean") if j.state == "succeeded"]
            if jobs:
                break
            time.sleep(0.2)
        stop.set()
        t.join()
        assert not errors, errors
        assert jobs, [j.as_dict() for j in node.jobs.list()]
        job = jobs[-1]
        assert job.origin == "tiered-pool" and job.engine == "spark" and job.spark_application_id
        assert len(served) > 10  # it served meanwhile
        tp = TopicPartition("t", 0)
        assert any(r.engine == "spark" and r.outcome == "completed" for r in node.metadata.list_compaction_reports(tp))
        assert (node.cleaner_checkpoint(tp) or 0) > 0
        assert final_state(_read(node, "t")) == expected
    finally:
        node.shutdown(timeout=30)


def test_key_index_rules_out_what_the_bloom_filter_cannot(spark: Any, tmp_path: Path, mode: str) -> None:
    """The exact key index in the Spark driver: with a useless bloom filter (fpp 0.5) the exact key index still
    skips every clean segment that holds no updated key; same bytes as the in-process round."""
    cfg = {"remote.compaction.bloom.fpp": 0.5}
    a = make_world(tmp_path / "a", _file_store(tmp_path / "sa"), config=cfg)
    b = make_world(tmp_path / "b", _file_store(tmp_path / "sb"), config=cfg)
    try:
        tp = partitions_of(a)[0]
        for w in (a, b):
            for seg in range(8):  # 8 clean segments of disjoint keys
                w.produce([(f"s{seg}-k{i:02d}".encode(), f"v{i}".encode() * 20) for i in range(30)])
                w.roll_and_tier()
        clean_in_process(a, tp)
        assert _standalone(spark, b, config=mode_config(mode)).run([tp])[tp].status == "cleaned"
        for w in (a, b):  # one update to a key of segment 0, and 40 new keys: every bloom says "maybe"
            w.produce([(b"s0-k00", b"new"), *((f"new-{i:02d}".encode(), b"n") for i in range(40))])
            w.roll_and_tier()
        clean_in_process(a, tp)
        outcome = _standalone(spark, b, config=mode_config(mode)).run([tp])[tp]
        assert outcome.status == "cleaned", outcome.error
        assert outcome.segments_skipped_by_key_index > 0, outcome
        assert remote_image(a, tp) == remote_image(b, tp)
        actions = [s.action for s in b.rlmm.list_compaction_reports(tp)[0].segments]
        assert "skipped-by-key-index" in actions
    finally:
        a.close()
        b.close()


@pytest.mark.parametrize(("mode", "reuse"), [("split", True), ("split", False), ("whole", True)])
def test_a_dirty_segment_is_downloaded_once_when_scan_and_rewrite_share_a_host(spark: Any, tmp_path: Path,
                                                                               mode: str, reuse: bool) -> None:
    """split: the scan's download is handed to the rewrite on the same host; whole: the round
    keeps its downloads for the rewrite, as in process."""
    w = make_world(tmp_path / "w", _file_store(tmp_path / "s"))
    try:
        tp = partitions_of(w)[0]
        for r in range(6):
            w.produce([(f"k{i:02d}".encode(), f"v{r}-{i}".encode() * 10) for i in range(30)])
            w.roll_and_tier()
        dirty = sum(m.segment_size_in_bytes for m in w.rlmm.list_remote_log_segments(tp))
        job = _standalone(spark, w, config=mode_config(mode, reuse_scan_downloads=reuse))
        outcome = job.run([tp])[tp]
        assert outcome.status == "cleaned", outcome.error
        assert dirty <= outcome.bytes_downloaded < (1.2 if reuse else 3) * dirty
        assert reuse or outcome.bytes_downloaded >= 2 * dirty
        from cleaner.spark.tasks import _kept_dir

        assert not any(_kept_dir().glob("*.log"))  # nothing left behind
    finally:
        w.close()
