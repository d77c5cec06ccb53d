"""A real ``tiercompact serve`` offloading to a real Spark deployment.

One server process for the module: moto's S3 server over HTTP, PostgreSQL when
TIERCOMPACT_TEST_POSTGRES_URL is set (else a SQLite file), and ``local-cluster[2,1,1024]``, which
starts a Spark master, two workers and two executor JVMs with their own Python workers. Through
it:

* ``tiercompact spark-clean --server`` submits a job the service runs and adopts;
* ``tiercompact spark-clean`` standalone (metadata store + object store, no data dir) runs
  beside the serving node, which keeps its data dir locked;
* the tiered pool offloads an engine=spark partition while producers and readers keep running,
  a leadership change during a job fences it (its uploads removed, nothing published), and the
  node, leader again under a new epoch, offloads the partition again and succeeds.
"""

from __future__ import annotations

import json
import subprocess
import threading
import time
from collections.abc import Iterator
from contextlib import ExitStack
from typing import Any

import pytest

from log.types import TopicPartition
from tests.spark.conftest import s3_store
from tests.support.serve import TIERCOMPACT, clean_env, http, serving

pytestmark = pytest.mark.spark

TOKEN = "spark-offload-token"
MASTER = "local-cluster[2,1,1024]"
AWS = {"AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing", "AWS_DEFAULT_REGION": "us-east-1"}
CONFIG = {"cleanup.policy": "compact", "remote.storage.enable": True, "segment.bytes": 8192,
          "local.retention.ms": 0, "min.cleanable.dirty.ratio": 0.99}


class Server:
    def __init__(self, url: str, store: tuple[str, dict[str, Any]], metadata: str, moto: str) -> None:
        self.url, self.store, self.metadata, self.moto = url, store, metadata, moto

    @staticmethod
    def executor_pids(app_id: str) -> list[int]:
        """The executor JVMs of the Spark application ``app_id`` (the server's local-cluster)."""
        out = subprocess.run(["ps", "-ww", "-eo", "pid=,args="], capture_output=True, text=True, check=True).stdout
        return [int(line.split(None, 1)[0]) for line in out.splitlines()
                if "CoarseGrainedExecutorBackend" in line and f"--app-id {app_id}" in line]

    def call(self, path: str, method: str = "GET", body: Any = None, timeout: float = 60) -> Any:
        return http(self.url + path, method, body, token=TOKEN, timeout=timeout)

    def produce(self, topic: str, records: list[tuple[str, str]]) -> None:
        self.call(f"/v1/topics/{topic}/partitions/0/records", "POST",
                  {"records": [{"key": k, "value": v} for k, v in records]})

    def fill(self, topic: str, rounds: int, keys: int = 30) -> dict[str, str]:
        expected: dict[str, str] = {}
        for r in range(rounds):
            batch = [(f"k{i:03d}", f"v{r}-{i}-" + "x" * 100) for i in range(keys)]
            self.produce(topic, batch)
            expected.update(batch)
            self.call(f"/v1/topics/{topic}/partitions/0/roll", "POST")
        self.call(f"/v1/topics/{topic}/partitions/0/tier", "POST")
        return expected

    def dirty_but_below_the_ratio(self, topic: str) -> dict[str, str]:
        """Data the background pool cleans once (a fresh log is 100% dirty), then more updates that
        leave the dirty ratio below the topic's 0.99: only an explicit job cleans them."""
        expected = self.fill(topic, 2)
        end = self.call(f"/v1/topics/{topic}/partitions/0")["log_end_offset"]
        _wait(lambda: (self.call(f"/v1/topics/{topic}/partitions/0")["cleaner_checkpoint"] or 0) >= end,
              "the background pool's first round")
        expected.update(self.fill(topic, 4))
        return expected

    def final_state(self, topic: str) -> dict[str, str]:
        state: dict[str, str] = {}
        offset = 0
        while True:
            page = self.call(f"/v1/topics/{topic}/partitions/0/records?offset={offset}&max_records=1000")
            for r in page["records"]:
                if r["key"] is not None:
                    if r["value"] is None:
                        state.pop(r["key"], None)
                    else:
                        state[r["key"]] = r["value"]
            if page["next_offset"] >= page["high_watermark"] or not page["records"]:
                return state
            offset = page["next_offset"]

    def jobs(self) -> list[dict[str, Any]]:
        return self.call("/v1/jobs?kind=spark-clean")  # type: ignore[no-any-return]

    def leaked(self, topic: str) -> set[str]:
        """Segment ids of objects in the bucket that neither a live lease nor a metadata row names.

        Read in the orphan sweep's order (objects, then leases, then metadata), so an upload in
        flight (a running Spark job's, under its lease; a copier's, registered first) is never
        mistaken for a leak: an object listed first is named by what is read after it.
        """
        import boto3

        from metadata import load_metadata_manager
        from metadata.types import RemoteLogSegmentState as S
        from remote.orphans import LEASE_DIR, Lease, segment_id_of_key

        tp = TopicPartition(topic, 0)
        bucket = self.store[0].split("/")[2]
        s3 = boto3.client("s3", endpoint_url=self.moto, region_name="us-east-1", aws_access_key_id="testing",
                          aws_secret_access_key="testing")

        def keys(prefix: str) -> list[str]:
            return [o["Key"] for page in s3.get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix=prefix)
                    for o in page.get("Contents", [])]

        root = self.store[0].split("/", 3)[3].strip("/") + "/"  # s3://bucket/<root>
        ids = {i for k in keys(f"{root}{tp.dir_name}/") if (i := segment_id_of_key(tp, k[len(root):]))}
        leases = []
        for k in keys(f"{root}{tp.dir_name}/{LEASE_DIR}/"):
            try:
                leases.append(Lease.from_bytes(s3.get_object(Bucket=bucket, Key=k)["Body"].read()))
            except s3.exceptions.NoSuchKey:
                pass  # released since the listing: its ids are registered (or their objects gone) by now
        with load_metadata_manager(self.metadata) as rlmm:
            known = {m.id for m in rlmm.list_remote_log_segments(
                tp, include_superseded=True,
                states=[S.COPY_SEGMENT_STARTED, S.COPY_SEGMENT_FINISHED, S.DELETE_SEGMENT_STARTED])}
        return {i for i in ids - known if not any(lease.claims(i) for lease in leases)}

    def quiet(self, topic: str) -> None:
        """Wait until no job of ``topic`` is pending or running (the tiered pool may start more)."""
        _wait(lambda: not [j for j in self.jobs() if j["topic"] == topic and j["state"] in ("pending", "running")],
              f"{topic}'s jobs to end")


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory, moto_server_url: str) -> Iterator[Server]:
    import os

    root = tmp_path_factory.mktemp("spark-serve")
    store = s3_store(moto_server_url)
    with ExitStack() as stack:
        if os.environ.get("TIERCOMPACT_TEST_POSTGRES_URL"):
            from tests.contract.conftest import private_postgres_schema

            metadata = stack.enter_context(private_postgres_schema("spark"))
        else:
            metadata = f"sqlite:///{root / 'metadata.db'}"
        served = stack.enter_context(serving(root / "data", [
            "--token", TOKEN, "--remote", store[0], "--s3-endpoint", moto_server_url, "--s3-region", "us-east-1",
            "--metadata", metadata, "--spark-master", MASTER, "--spark-conf", "spark.executor.memory=512m",
            "--cleaner-threads", "1", "--tiered-cleaner-threads", "1", "--cleaner-backoff-ms", "300",
            # the node must not learn of the leadership move before the job publishes: the fenced publish is
            # what the leadership-change test pins (the metadata follower would see the move first)
            "--metadata-sync-interval-ms", "3600000",
            "--log-level", "warning"], env=clean_env(AWS), output=root / "serve.log"))
        yield Server(served.url, store, metadata, moto_server_url)


def _cli(*args: str, timeout: float = 300) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(TIERCOMPACT), *args], capture_output=True, text=True, env=clean_env(AWS),
                          timeout=timeout)


def _wait(pred: Any, what: str, timeout: float = 240) -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        got = pred()
        if got:
            return got
        time.sleep(0.25)
    raise AssertionError(f"timed out waiting for {what}")


def test_spark_clean_through_the_service(server: Server) -> None:
    server.call("/v1/topics", "POST", {"name": "api", "partitions": 1, "config": CONFIG})
    expected = server.dirty_but_below_the_ratio("api")
    r = _cli("spark-clean", "api", "--server", server.url, "--token", TOKEN)
    assert r.returncode == 0, r.stdout + r.stderr
    job = json.loads(r.stdout)
    assert job["state"] == "succeeded" and job["engine"] == "spark" and job["origin"] == "api"
    assert job["spark_application_id"].startswith("app-")  # a cluster application, not local mode
    [outcome] = job["stats"]["partitions"]
    assert outcome["status"] == "cleaned" and outcome["new_segments"] > 0
    assert job["job_id"] in {j["job_id"] for j in server.jobs()}
    rounds = server.call("/v1/topics/api/partitions/0/compactions")
    assert rounds[0]["engine"] == "spark" and rounds[0]["checkpoint_after"] == outcome["end_offset"]
    assert server.call("/v1/topics/api/partitions/0")["cleaner_checkpoint"] == outcome["end_offset"]
    assert server.final_state("api") == expected


def test_an_executor_killed_during_a_job(server: Server) -> None:
    """kill -9 of an executor JVM while the job runs: Spark relaunches it and retries its tasks;
    the job succeeds, nothing leaks, the data reads back."""
    import os
    import signal

    server.call("/v1/topics", "POST", {"name": "kill", "partitions": 1, "config": CONFIG})
    expected = server.dirty_but_below_the_ratio("kill")
    job_id = server.call("/v1/topics/kill/spark-clean?wait=false", "POST")["job_id"]
    job = _wait(lambda: (j := server.call(f"/v1/jobs/{job_id}"))["spark_application_id"] and j,
                "the job's Spark application", timeout=90)
    app = job["spark_application_id"]
    victims = server.executor_pids(app)
    assert victims, (job, app)
    os.kill(victims[0], signal.SIGKILL)  # an executor of this test's server's application
    job = _wait(lambda: (j := server.call(f"/v1/jobs/{job_id}"))["state"] in ("succeeded", "failed") and j,
                "the job to end")
    assert job["state"] == "succeeded", job
    assert job["stats"]["partitions"][0]["status"] == "cleaned"
    assert victims[0] not in server.executor_pids(app)
    assert server.leaked("kill") == set()
    assert server.final_state("kill") == expected


def test_standalone_spark_clean_beside_the_running_service(server: Server) -> None:
    server.call("/v1/topics", "POST", {"name": "solo", "partitions": 1, "config": CONFIG})
    expected = server.dirty_but_below_the_ratio("solo")
    r = _cli("spark-clean", "solo", "--metadata", server.metadata, "--remote", server.store[0],
             "--s3-endpoint", server.moto, "--s3-region", "us-east-1", "--master", "local[1]")
    assert r.returncode == 0, r.stdout + r.stderr
    [outcome] = json.loads(r.stdout)
    assert outcome["status"] == "cleaned" and outcome["new_segments"] > 0, outcome
    assert server.call("/v1/topics/solo/partitions/0/compactions")[0]["engine"] == "spark"
    assert server.final_state("solo") == expected


def test_offload_while_serving_and_a_leadership_change_during_a_job(server: Server) -> None:
    topic = "live"
    server.call("/v1/topics", "POST", {"name": topic, "partitions": 1,
                                       "config": {**CONFIG, "min.cleanable.dirty.ratio": 0.01,
                                                  "remote.compaction.engine": "spark"}})
    expected = server.fill(topic, 5)
    lock = threading.Lock()
    stop = threading.Event()
    errors: list[BaseException] = []
    served = {"produced": 0, "read": 0}

    def produce() -> None:
        i = 0
        try:
            while not stop.is_set():
                k, v = f"live{i % 7}", f"p{i}"
                server.produce(topic, [(k, v)])
                with lock:
                    expected[k] = v
                    served["produced"] += 1
                i += 1
                time.sleep(0.02)
        except BaseException as e:  # noqa: BLE001 - reported by the test
            errors.append(e)

    def read() -> None:
        try:
            while not stop.is_set():
                server.call(f"/v1/topics/{topic}/partitions/0/records?offset=0&max_records=200")
                with lock:
                    served["read"] += 1
                time.sleep(0.02)
        except BaseException as e:  # noqa: BLE001
            errors.append(e)

    threads = [threading.Thread(target=produce), threading.Thread(target=read)]
    for t in threads:
        t.start()
    try:
        # 1. the tiered pool offloads the partition; the node keeps serving meanwhile
        first = _wait(lambda: [j for j in server.jobs() if j["topic"] == topic and j["state"] == "succeeded"],
                      "the tiered pool's first Spark job")[0]
        assert first["origin"] == "tiered-pool" and first["spark_application_id"].startswith("app-")

        def served_some() -> bool:  # the node answers its clients beside the tiered pool's jobs
            with lock:
                return served["produced"] > 5 and served["read"] > 5 and not errors

        # (a first job may end before the clients' first answers on a busy machine: wait for them, bounded)
        _wait(served_some, f"produce and read answers beside the offload (served {served}, errors {errors})", 60)
        epoch = server.call(f"/v1/topics/{topic}/partitions/0")["leader_epoch"]

        # 2. more dirty data; once the next job runs, leadership moves to broker 1. On a fast machine that job may
        #    publish before the move lands (it then succeeds, rightly): leadership comes back and the next job is
        #    tried, a few times at most
        seen = {first["job_id"]}
        fenced: dict[str, Any] | None = None
        for _attempt in range(4):
            with lock:
                more = server.fill(topic, 3)
                expected.update(more)
            running = _wait(lambda: [j for j in server.jobs() if j["topic"] == topic and j["state"] == "running"
                                     and j["job_id"] not in seen and j["spark_application_id"]],
                            "another Spark job running")[0]
            seen.add(running["job_id"])
            stop.set()  # broker 1 leads now: produce would be refused here
            for t in threads:
                t.join()
            epoch += 1
            server.call(f"/v1/topics/{topic}/partitions/0/leadership", "POST",
                        {"leader_epoch": epoch, "broker_id": 1})
            job_id = running["job_id"]
            ended = _wait(lambda job_id=job_id: [j for j in server.jobs() if j["job_id"] == job_id
                                                 and j["state"] in ("succeeded", "failed")], "the fenced job to end")[0]
            if ended["state"] == "failed":
                fenced = ended
                break
            epoch += 1  # it published first: leadership back here, and the next job is moved under
            server.call(f"/v1/topics/{topic}/partitions/0/leadership", "POST",
                        {"leader_epoch": epoch, "broker_id": 0})
        assert fenced is not None, "every job published before leadership moved"
        assert "fenced" in fenced["error"] or "not the leader" in fenced["error"], fenced
        assert server.leaked(topic) == set()  # the fenced job's uploads were removed

        # 3. leadership back to this node under a new epoch: it offloads again and succeeds
        epoch += 1
        server.call(f"/v1/topics/{topic}/partitions/0/leadership", "POST",
                    {"leader_epoch": epoch, "broker_id": 0})
        server.call(f"/v1/topics/{topic}/partitions/0/roll", "POST")
        server.call(f"/v1/topics/{topic}/partitions/0/tier", "POST")
        again = _wait(lambda: [j for j in server.jobs() if j["topic"] == topic and j["state"] == "succeeded"
                               and j["created_ms"] > fenced["created_ms"]], "a job under the new epoch")[0]
        assert any(o["leader_epoch"] == epoch for o in again["stats"]["partitions"])
        outcomes = {r["outcome"] for r in server.call(f"/v1/topics/{topic}/partitions/0/compactions?limit=50")
                    if r["engine"] == "spark"}
        assert "completed" in outcomes
    finally:
        stop.set()
        for t in threads:
            t.join()
    assert not errors, errors
    assert server.final_state(topic) == expected
    server.quiet(topic)
    # a killed task attempt's upload may land after its job ended: the node's orphan sweep removes it
    _wait(lambda: server.leaked(topic) == set(), f"no leaked objects of {topic} (now {server.leaked(topic)})", 60)


def test_unknown_topic_standalone_says_where_it_looked(server: Server) -> None:
    r = _cli("spark-clean", "nope", "--metadata", server.metadata, "--remote", server.store[0],
             "--s3-endpoint", server.moto, timeout=60)
    assert r.returncode != 0 and "holds no config" in r.stderr and "Traceback" not in r.stderr
