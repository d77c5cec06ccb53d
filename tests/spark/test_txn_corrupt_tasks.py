"""The Spark executor functions never map or re-sign a corrupt batch either (no Spark session
needed): a scan or a rewrite of a remote segment whose stored CRC does not match its bytes
raises CorruptRecordError naming the object and the batch's byte position, and the rewrite
uploads nothing."""

from __future__ import annotations

import uuid
from pathlib import Path

import pytest

from cleaner.spark.tasks import RewriteTask, ScanTask, SegmentRef, StoreSpec, TxnState, run_rewrite, run_scan
from log.errors import CorruptRecordError
from log.local_log import RecordSpec
from log.record import iter_batches
from tests.spark.conftest import make_world, partitions_of


def test_scan_and_rewrite_refuse_a_corrupt_remote_batch(tmp_path: Path) -> None:
    w = make_world(tmp_path / "w", (f"file://{tmp_path / 'obj'}", {}), config={"local.retention.ms": -1})
    try:
        tp = partitions_of(w)[0]
        for i in range(6):
            w.lm.get_log(tp).append_records([RecordSpec(f"k{i % 3}".encode(), f"value-{i}".encode())])
        w.lm.get_log(tp).roll()
        w.clock.advance(1)
        w.rlm.tier(tp)
        (md,) = w.rlmm.list_remote_log_segments(tp)
        key = w.rsm.object_key(md)
        path = Path(w.store.root) / key  # type: ignore[attr-defined]
        data = bytearray(path.read_bytes())
        at = data.index(b"value-4")
        data[at] ^= 0x01
        path.write_bytes(bytes(data))
        pos = next(p for p, b in iter_batches(bytes(data)) if p <= at < p + b.size_in_bytes)
        objects = set(w.store.list(""))

        store = StoreSpec.of(w.store.url)
        ref = SegmentRef.of(md)
        with pytest.raises(CorruptRecordError) as scan_err:
            run_scan(ScanTask(0, store, ref, 0), temp_dir=tmp_path)
        assert scan_err.value.position == pos and f"{key} at byte {pos}" in str(scan_err.value)

        task = RewriteTask(0, store, uuid.uuid4().hex, (ref,), ((),), now_ms=w.clock.milliseconds(),
                           delete_retention_ms=1000, upper_bound_of_round=md.end_offset + 1,
                           latest_offset=md.end_offset, active_producers=(), txn_state=TxnState(), fpp=0.01,
                           index_interval_bytes=4096, io_buffer_size=65536)
        with pytest.raises(CorruptRecordError) as rewrite_err:
            run_rewrite(task, [], temp_dir=tmp_path)
        assert rewrite_err.value.position == pos and f"{key} at byte {pos}" in str(rewrite_err.value)
        assert set(w.store.list("")) == objects  # nothing uploaded under the new id
    finally:
        w.close()


@pytest.mark.spark
def test_a_spark_job_over_a_corrupt_remote_batch_fails_naming_it_and_publishes_nothing(spark, tmp_path: Path) -> None:
    from cleaner.spark.errors import SparkJobError
    from tests.spark.conftest import spark_job

    w = make_world(tmp_path / "w", (f"file://{tmp_path / 'obj'}", {}), config={"local.retention.ms": -1})
    try:
        tp = partitions_of(w)[0]
        for r in range(2):
            for i in range(6):
                w.lm.get_log(tp).append_records([RecordSpec(f"k{i % 3}".encode(), f"value-{r}-{i}".encode())])
            w.lm.get_log(tp).roll()
        w.clock.advance(1)
        w.rlm.tier(tp)
        segments = [(m.id, m.start_offset) for m in w.rlmm.list_remote_log_segments(tp)]
        md = w.rlmm.list_remote_log_segments(tp)[1]
        key = w.rsm.object_key(md)
        path = Path(w.store.root) / key  # type: ignore[attr-defined]
        data = bytearray(path.read_bytes())
        at = data.index(b"value-1-4")
        data[at] ^= 0x01
        path.write_bytes(bytes(data))
        pos = next(p for p, b in iter_batches(bytes(data)) if p <= at < p + b.size_in_bytes)
        objects = set(w.store.list(""))
        with pytest.raises(SparkJobError) as info:
            spark_job(spark, w).run([tp])
        assert "CorruptRecordError" in str(info.value) and f"{key} at byte {pos}" in str(info.value)
        assert [(m.id, m.start_offset) for m in w.rlmm.list_remote_log_segments(tp)] == segments
        assert tp not in w.checkpoints
        assert {k for k in w.store.list("") if not k.startswith("_")} == {k for k in objects if not k.startswith("_")}
    finally:
        w.close()
