"""Real partitions for the model tests: one Node (service/node.py, the composition root the
HTTP API drives) per partition, on one of three engines:

* ``local``: a local compacted topic (the in-process Cleaner);
* ``file``: a tiered topic (remote.storage.enable) on the ``file://`` object store, cleaned by
  the TieredCleaner (download-clean-upload, bloom skip, fenced publish);
* ``s3``: the same on moto's S3 HTTP server;
* ``spark``: the ``file`` engine on a node with a Spark master (the test session's
  ``local[2,2]``): a clean is the node's Spark offload job (``POST .../spark-clean``), its
  partition run whole on an executor; background rounds stay in process, so both kinds of
  round take turns on the same partition.

Every operation goes through the Node's own methods (produce, append_marker, roll, tier,
run_retention_once, clean, become_leader, read), with the injectable MockClock, so the state
machine exercises what a user of the service exercises; keyed plain and idempotent batches also
come in as a Kafka producer sends them (``produce_kafka``: a ProduceRequest over a socket to the
node's Kafka listener, acks=-1), every other round of codecs.
"""

from __future__ import annotations

import shutil
import tempfile
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from log.clock import MockClock
from log.local_log import AppendResult, RecordSpec
from log.types import TopicPartition
from service.config import load_config
from service.node import Node

TOPIC = "m"
START_MS = 1_700_000_000_000
ENGINES = ("local", "file", "s3")
#: the Spark engine's master: the test session's (tests/spark/conftest.py), which the node reuses
SPARK_MASTER = "local[2,2]"
#: kafka-python's record batch codec ids (the attributes' low bits)
KAFKA_CODECS = {"none": 0, "gzip": 1, "snappy": 2, "lz4": 3, "zstd": 4}


@dataclass(frozen=True, slots=True)
class EngineSpec:
    """How to build one engine's node: ``kind`` and, for s3, moto's endpoint and a bucket."""

    kind: str
    s3_endpoint: str | None = None
    bucket: str | None = None

    @property
    def tiered(self) -> bool:
        return self.kind != "local"


def topic_config(tiered: bool, *, delete_retention_ms: int, min_lag_ms: int, max_lag_ms: int | None,
                 segment_bytes: int, policy: str = "compact") -> dict[str, Any]:
    cfg: dict[str, Any] = {"cleanup.policy": policy, "segment.bytes": segment_bytes,
                           "delete.retention.ms": delete_retention_ms, "min.compaction.lag.ms": min_lag_ms,
                           "min.cleanable.dirty.ratio": 0.01, "retention.ms": -1,
                           "file.delete.delay.ms": 0}
    if max_lag_ms is not None:
        cfg["max.compaction.lag.ms"] = max_lag_ms
    if tiered:
        cfg.update({"remote.storage.enable": True, "local.retention.ms": 0})
    return cfg


def node_config(spec: EngineSpec, root: Path) -> Any:
    """A node's ServiceConfig: no background cleaner threads (the test drives every round)."""
    opts: dict[str, Any] = {"data_dir": root / "data", "cleaner_threads": 0,
                            "metadata": f"sqlite:///{root / 'metadata.db'}"}
    if spec.kind in ("file", "spark"):
        opts["remote"] = (root / "objects").as_uri()
    if spec.kind == "spark":
        opts["spark_master"] = SPARK_MASTER
    elif spec.kind == "s3":
        assert spec.s3_endpoint and spec.bucket
        opts.update(remote=f"s3://{spec.bucket}/{uuid.uuid4().hex[:12]}", s3_endpoint=spec.s3_endpoint,
                    s3_region="us-east-1")
    return load_config(opts, env={})


class Engine:
    """One partition on a real Node; restartable (close and reopen on the same dirs/stores)."""

    def __init__(self, spec: EngineSpec, topic_cfg: dict[str, Any], *, root: Path | None = None,
                 clock: MockClock | None = None, topic: str = TOPIC, node: Node | None = None) -> None:
        """A new node in ``root`` (a fresh temp dir by default), or a topic on an existing ``node``
        (then ``clock`` must be that node's; the engine does not close the node)."""
        self.spec = spec
        self.clock = clock or MockClock(START_MS)
        self._own_root = root is None and node is None
        self._own_node = node is None
        self.topic = topic
        self.tp = TopicPartition(topic, 0)
        self.leader_epoch = 0
        self._listener: Any = None  # the Kafka listener produce_kafka talks to, and its connection
        self._wire: Any = None
        if node is not None:
            self.root = node.data_dir
            self.config = node.config
            self.node = node
        else:
            self.root = Path(tempfile.mkdtemp(prefix=f"model-{spec.kind}-")) if root is None else root
            self.config = node_config(spec, self.root)
            self.node = Node(self.config, clock=self.clock)
            self.node.recover()
        self.node.create_topic(topic, 1, topic_cfg)

    # ---- operations ---------------------------------------------------------------------------
    def produce(self, records: list[tuple[bytes | None, bytes | None]], *, producer_id: int = -1,
                producer_epoch: int = -1, base_sequence: int = -1, transactional: bool = False,
                compression: str = "none") -> AppendResult:
        specs = [RecordSpec(k, v) for k, v in records]
        return self.node.produce(self.topic, 0, specs, compression=compression, producer_id=producer_id,
                                 producer_epoch=producer_epoch, base_sequence=base_sequence,
                                 transactional=transactional)

    def produce_kafka(self, records: list[tuple[bytes | None, bytes | None]], *, producer_id: int = -1,
                      producer_epoch: int = -1, base_sequence: int = -1, transactional: bool = False,
                      compression: str = "none") -> AppendResult:
        """The same records as a Kafka producer sends them: kafka-python's record builder (stamped now), one
        ProduceRequest v9 with acks=-1 over a socket to the node's Kafka listener (its batch validation, the
        connection's lane, the group sync); the answer's offsets, and whether the log grew (else a duplicate)."""
        from kafka.protocol.producer import ProduceRequest
        from kafka.record.default_records import DefaultRecordBatchBuilder

        if self._wire is None:
            from service.kafka.listener import KafkaListener, KafkaListenerConfig
            from tests.kafka.wire import Wire

            self._listener = KafkaListener(self.node, KafkaListenerConfig(host="127.0.0.1", port=0)).start()
            self._wire = Wire(self._listener.port)
        now = self.clock.milliseconds()
        builder = DefaultRecordBatchBuilder(2, KAFKA_CODECS[compression], transactional, producer_id, producer_epoch,
                                            base_sequence, 1 << 24)
        for i, (key, value) in enumerate(records):
            builder.append(i, now, key, value, [])
        partition = ProduceRequest.TopicProduceData.PartitionProduceData(index=0, records=bytes(builder.build()))
        before = self.log.log_end_offset
        resp = self._wire.call(ProduceRequest(transactional_id=None, acks=-1, timeout_ms=30_000, topic_data=[
            ProduceRequest.TopicProduceData(name=self.topic, partition_data=[partition])]), 9)
        answer = resp.responses[0].partition_responses[0]
        if answer.error_code:
            raise AssertionError(f"Kafka produce to {self.tp} answered {answer.error_code}: {answer.error_message}")
        return AppendResult(answer.base_offset, answer.base_offset + len(records) - 1,
                            duplicate=self.log.log_end_offset == before)

    def _close_kafka(self) -> None:
        if self._wire is not None:
            self._wire.close()
            self._wire = None
        if self._listener is not None:
            self._listener.stop()
            self._listener = None

    def marker(self, producer_id: int, producer_epoch: int, commit: bool) -> int:
        return self.node.append_marker(self.topic, 0, producer_id, producer_epoch, "commit" if commit else "abort")

    def roll(self) -> None:
        self.node.roll(self.topic, 0)

    def force_roll(self) -> bool:
        return self.tp in self.node.run_force_roll_once()

    def tier(self) -> None:
        if self.spec.tiered:
            self.node.tier(self.topic, 0)

    def retention(self) -> None:
        self.node.run_retention_once()

    def clean(self) -> dict[str, Any]:
        if self.spec.kind == "spark":
            return self._spark_clean()
        return self.node.clean(self.topic, 0)

    def _spark_clean(self) -> dict[str, Any]:
        """The node's Spark offload job over this partition, to its end."""
        job = self.node.submit_spark_clean(self.topic, [0])
        if not job.done.wait(300):
            raise AssertionError(f"Spark job {job.job_id} did not end in 300 s")
        answer = job.as_dict()
        if answer["state"] != "succeeded":
            raise AssertionError(f"Spark job failed: {answer}")
        return dict(answer)

    def external_publish(self) -> dict[str, Any]:
        """A second writer: a standalone Spark job (the metadata and object stores alone, as
        ``tiercompact spark-clean`` without ``--server``) publishes a compaction of the remote tier
        under the leader's epoch; then one pass of the node's metadata follower (its sync interval)."""
        from cleaner.spark.job import SparkCleanJob
        from service.config import store_options
        from service.spark_offload import clean_config

        assert self.node.spark is not None, "a standalone job needs the Spark engine's session"
        opts = store_options(self.config)
        job = SparkCleanJob(self.node.spark.session(), rlmm=self.node.metadata, store_url=self.config.remote_url,
                            store_options=opts, broker_id=self.config.broker_id, clock=self.clock,
                            config=clean_config(self.config),
                            views=SparkCleanJob.standalone_views(self.node.metadata, self.config.remote_url, opts))
        outcome = job.run([self.tp])[self.tp]
        if outcome.status not in ("cleaned", "nothing-to-clean"):
            raise AssertionError(f"standalone Spark job: {outcome.as_dict()}")
        self.node.follower.run_once()
        return dict(outcome.as_dict())

    def background_round(self) -> bool:
        """One iteration of a background cleaner thread of this partition's pool (selection by
        dirty ratio / must-clean, then the round); returns whether it cleaned a log. A failed
        round marks the partition uncleanable, which this raises as an error."""
        from cleaner.log_cleaner import CleanerThread

        owner = self.node.cleaner
        thread = CleanerThread(owner, 99, owner._new_map(), tiered=self.spec.tiered)
        cleaned = thread.do_work()
        if self.tp in owner.manager.uncleanable_partitions():
            raise AssertionError(f"a background round marked {self.tp} uncleanable: {owner.last_runs[-1:]}")
        return cleaned

    def delete_records(self, offset: int) -> int:
        return self.node.delete_records(self.topic, 0, offset)

    def leader_change(self) -> None:
        self.leader_epoch = max(self.leader_epoch, self.node.log(self.topic, 0).leader_epoch) + 1
        self.node.become_leader(self.topic, 0, self.leader_epoch, self.config.broker_id)

    def restart(self) -> None:
        """Close the node (a clean shutdown) and open a new one on the same dirs and stores."""
        self._close_kafka()
        self.node.shutdown()
        self.node = Node(self.config, clock=self.clock)
        self.node.recover()

    # ---- observations -------------------------------------------------------------------------
    @property
    def log(self) -> Any:
        return self.node.log(self.topic, 0)

    def log_start_offset(self) -> int:
        if self.spec.tiered:
            return self.node.remote.log_start_offset(self.tp)
        return self.log.log_start_offset

    def active_segment(self) -> tuple[int, int | None]:
        """(base offset, first offset present or None when empty) of the active segment."""
        seg = self.log.active_segment
        first = next((b.base_offset for _p, b in seg.batches()), None) if seg.size else None
        return seg.base_offset, first

    def offsets(self) -> tuple[int, int, int]:
        log = self.log
        return log.log_end_offset, log.last_stable_offset, log.high_watermark

    def checkpoint(self) -> int | None:
        return self.node.cleaner_checkpoint(self.tp)

    def read_all(self, isolation: str, page: int = 10_000, start: int | None = None) -> list[tuple[int, Any, Any, int]]:
        """Every record a consumer starting at the log start reads, page by page, until the
        high watermark (read_uncommitted) or the last stable offset (read_committed)."""
        log = self.log
        upper = log.last_stable_offset if isolation == "read_committed" else log.high_watermark
        out: list[tuple[int, Any, Any, int]] = []
        offset = self.log_start_offset() if start is None else start
        for _ in range(100_000):
            if offset >= upper:
                return out
            res = self.node.read(self.topic, 0, offset, max_records=page, isolation=isolation)
            if not res.records:
                return out
            out.extend((r.offset, r.key, r.value, r.timestamp) for r in res.records)
            if res.next_offset <= offset:
                raise AssertionError(f"read made no progress at offset {offset}")
            offset = res.next_offset
        raise AssertionError("read did not finish")

    def close(self) -> None:
        self._close_kafka()
        try:
            if self._own_node:
                self.node.shutdown()
        finally:
            if self._own_root:
                shutil.rmtree(self.root, ignore_errors=True)


def create_bucket(endpoint: str) -> str:
    import boto3

    bucket = f"model-{uuid.uuid4().hex[:12]}"
    boto3.client("s3", endpoint_url=endpoint, region_name="us-east-1", aws_access_key_id="testing",
                 aws_secret_access_key="testing").create_bucket(Bucket=bucket)
    return bucket
