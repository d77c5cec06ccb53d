"""Real Kafka clients read and administer a real ``tiercompact serve``, each library in its own process.

- A compacted tiered topic (created with the admin client) is written with keyed updates and
  tombstones (over HTTP with set timestamps, then by an idempotent confluent-kafka producer with
  each codec), rolled, tiered, cleaned and tiered again until no local copy is left: confluent-kafka,
  kafka-python and aiokafka consumers assigned from offset 0 read exactly the newest value per
  key at the original offsets, served from the remote tier, and ``offsets_for_times`` finds the
  first record at or after a timestamp there.
- read_committed over the remote tier skips an aborted transaction (the aborted list comes from
  the remote transaction index); read_uncommitted shows it.
- The admin clients (confluent-kafka AdminClient, kafka-python KafkaAdminClient) create, describe
  and alter topic configs, and get Kafka's INVALID_CONFIG / TOPIC_ALREADY_EXISTS /
  INVALID_PARTITIONS / UNKNOWN_TOPIC_OR_PARTITION answers.
- DescribeLogDirs and DescribeProducers from kafka-python's admin client: the data dir and a partition's local
  size, the partition's producers; CreateAcls and ElectLeaders from confluent-kafka's: SECURITY_DISABLED (no authorizer),
  ELECTION_NOT_NEEDED (the only replica leads).
- DeleteRecords from all three admin clients: the low watermark moves (on a tiered partition too),
  never backwards; a compacted topic answers POLICY_VIOLATION and an offset past the high watermark
  OFFSET_OUT_OF_RANGE, as Kafka; consumers then start at the new log start.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from typing import Any

from tests.kafka.conftest import CLIENTS_DIR, CODECS, ROOT, KafkaServe, run_client
from tests.support.serve import clean_env

READER = CLIENTS_DIR / "reader_client.py"
LIBRARIES = ("confluent", "kafka-python", "aiokafka")
TS0 = 1_700_000_000_000
LATER = 2**62  # the model's timestamp for records a Kafka producer stamped (all after TS0's)


def _run(spec: dict[str, Any], timeout: float = 120) -> dict[str, Any]:
    proc = subprocess.run([sys.executable, str(READER), json.dumps(spec)], capture_output=True, text=True,
                          timeout=timeout, cwd=ROOT, env=clean_env())
    lines = [ln for ln in proc.stdout.splitlines() if ln.startswith("{")]
    assert lines, f"{spec.get('library')} printed no answer:\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}"
    answer: dict[str, Any] = json.loads(lines[-1])
    assert "error" not in answer, f"{spec.get('library')}: {answer['error']}\n{answer.get('trace')}"
    return answer


def _run_all(specs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Each library's process at once (start-up dominates); answers in order."""
    procs = [subprocess.Popen([sys.executable, str(READER), json.dumps(s)], stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True, cwd=ROOT, env=clean_env()) for s in specs]
    out = []
    for spec, p in zip(specs, procs, strict=True):
        stdout, stderr = p.communicate(timeout=120)
        lines = [ln for ln in stdout.splitlines() if ln.startswith("{")]
        assert lines, f"{spec['library']} printed no answer:\n{stdout[-3000:]}\n{stderr[-3000:]}"
        answer = json.loads(lines[-1])
        assert "error" not in answer, f"{spec['library']}: {answer['error']}\n{answer.get('trace')}"
        out.append(answer)
    return out


def _produce(server: KafkaServe, topic: str, records: list[dict[str, Any]], **extra: Any) -> tuple[int, int]:
    r = server.api("POST", f"/v1/topics/{topic}/partitions/0/records", {"records": records, **extra})
    return r["base_offset"], r["last_offset"]


def _local_segments(server: KafkaServe, topic: str) -> list[dict[str, Any]]:
    info = server.api("GET", f"/v1/topics/{topic}/partitions/0")
    return [s for s in info["segments"] if s["tier"] == "local" and s["size_bytes"] > 0]


def test_consumers_read_the_compacted_remote_tier(kafka_server: KafkaServe, topic_name: str) -> None:
    topic = topic_name
    created = _run({"library": "confluent", "action": "admin", "bootstrap": kafka_server.bootstrap, "ops": [
        {"op": "create", "topic": topic, "config": {
            "cleanup.policy": "compact", "remote.storage.enable": "true", "local.retention.ms": "0",
            "retention.ms": "-1", "min.cleanable.dirty.ratio": "0.01", "segment.bytes": "2048"}}]})
    assert created["answers"] == [{topic: None}]
    model: list[tuple[int, str, str | None, int]] = []
    for round_ in range(6):
        recs = []
        for j in range(8):
            i = round_ * 8 + j
            value = None if i % 11 == 5 else f"v{i}-" + "x" * 40
            recs.append({"key": f"k{i % 7}", "value": value, "timestamp": TS0 + i * 1000})
        base, last = _produce(kafka_server, topic, recs)
        model += [(base + n, r["key"], r["value"], r["timestamp"]) for n, r in enumerate(recs)]
    # then an idempotent Kafka producer, each codec: updates and tombstones stamped now (after TS0's)
    steps = [{"action": "produce", "topic": topic, "codec": codec, "idempotent": True, "acks": "all",
              "records": [{"key": f"k{(c * 5 + i) % 9}", "value": None if i == 2 else f"{codec}-{i}"}
                          for i in range(5)]} for c, codec in enumerate(CODECS)]
    produced = run_client("confluent", {"bootstrap": kafka_server.bootstrap,
                                        "common": {"bootstrap": kafka_server.bootstrap}, "steps": steps})
    for step, answer in zip(steps, produced["steps"], strict=True):
        assert all(isinstance(o, list) for o in answer["offsets"]), answer
        model += [(off, r["key"], r["value"], LATER) for (_p, off), r in zip(answer["offsets"], step["records"],
                                                                             strict=True)]
    model.sort()
    p = f"/v1/topics/{topic}/partitions/0"
    kafka_server.api("POST", f"{p}/roll")
    kafka_server.api("POST", f"{p}/tier")
    kafka_server.api("POST", f"{p}/clean")
    kafka_server.api("POST", f"{p}/tier")
    assert _local_segments(kafka_server, topic) == []  # every record is served from the remote tier

    newest: dict[str, tuple[int, str, str | None, int]] = {}
    for rec in model:
        newest[rec[1]] = rec
    expected = sorted([0, off, key, value] for off, key, value, _ts in newest.values())
    present = sorted((off, ts) for off, _k, _v, ts in newest.values())
    probes = {TS0: present[0][0], TS0 + 20_500: next(o for o, t in present if t >= TS0 + 20_500),
              int(time.time() * 1000) + 10 * 86_400_000: None}
    isolation = dict(zip(LIBRARIES, ("read_committed", "read_uncommitted", "read_committed"), strict=True))
    answers = _run_all([{"library": lib, "common": {"library": lib, "bootstrap": kafka_server.bootstrap,
                                                    "topic": topic, "isolation": isolation[lib]}, "steps": [
                             {"action": "read_all"},
                             {"action": "offsets_for_times", "times": [[0, ts] for ts in probes]}]}
                        for lib in LIBRARIES])
    for lib, answer in zip(LIBRARIES, answers, strict=True):
        read, found = answer["steps"]
        assert read["timed_out"] == [], lib
        assert sorted(r[:4] for r in read["records"]) == expected, lib
        assert read["ends"] == {"0": model[-1][0] + 1}, lib
        # offsets_for_times: the first record present (after compaction) at or after the timestamp
        assert found["offsets"][:2] == list(probes.values())[:2], lib
        assert found["offsets"][2] in (None, -1), lib  # no record that late: each library's "none"


def test_read_committed_skips_an_aborted_transaction_on_the_remote_tier(kafka_server: KafkaServe,
                                                                         topic_name: str) -> None:
    topic = topic_name
    # cleanup.policy=delete: the cleaner would remove the aborted records, and read_uncommitted shows them
    kafka_server.create_topic(topic, 1, {"cleanup.policy": "delete", "remote.storage.enable": True,
                                         "local.retention.ms": 0, "retention.ms": -1})
    p = f"/v1/topics/{topic}/partitions/0"
    plain = [_produce(kafka_server, topic, [{"key": f"a{i}", "value": f"plain{i}"}])[0] for i in range(3)]
    producer = {"id": 4242, "epoch": 0, "base_sequence": 0, "transactional": True}
    base, last = _produce(kafka_server, topic, [{"key": f"t{i}", "value": f"aborted{i}"} for i in range(3)],
                          producer=producer)
    kafka_server.api("POST", f"{p}/markers", {"producer_id": 4242, "producer_epoch": 0, "type": "abort"})
    after = _produce(kafka_server, topic, [{"key": "z", "value": "after"}])[0]
    kafka_server.api("POST", f"{p}/roll")
    kafka_server.api("POST", f"{p}/tier")
    assert _local_segments(kafka_server, topic) == []
    committed = sorted(plain + [after])
    everything = sorted(plain + list(range(base, last + 1)) + [after])
    answers = _run_all([
        {"library": "confluent", "action": "read_all", "bootstrap": kafka_server.bootstrap, "topic": topic,
         "isolation": "read_committed"},
        {"library": "kafka-python", "action": "read_all", "bootstrap": kafka_server.bootstrap, "topic": topic,
         "isolation": "read_committed"},
        {"library": "aiokafka", "action": "read_all", "bootstrap": kafka_server.bootstrap, "topic": topic,
         "isolation": "read_uncommitted"},
    ])
    for lib, answer, want in zip(LIBRARIES, answers, (committed, committed, everything), strict=True):
        assert answer["timed_out"] == [], lib
        assert sorted(r[1] for r in answer["records"]) == want, lib


def test_admin_clients_create_describe_and_alter(kafka_server: KafkaServe, topic_name: str) -> None:
    t1, t2 = f"{topic_name}-c", f"{topic_name}-k"
    conf = {"cleanup.policy": "compact", "remote.storage.enable": "true"}
    confluent_ops = [
        {"op": "create", "topic": t1, "partitions": 2, "config": conf},
        {"op": "create", "topic": t1, "partitions": 2, "config": conf},
        {"op": "create", "topic": f"{t1}-bad", "config": {"segment.bytes": "lots"}},
        {"op": "describe", "topic": t1},
        {"op": "incremental_alter", "topic": t1, "configs": [["min.cleanable.dirty.ratio", "SET", "0.25"]]},
        {"op": "incremental_alter", "topic": t1, "configs": [["min.cleanable.dirty.ratio", "SET", "2"]]},
        {"op": "describe", "topic": t1},
        {"op": "create_partitions", "topic": t1, "count": 3},
        {"op": "create_partitions", "topic": t1, "count": 1},
        {"op": "describe", "topic": "no-such-topic"},
        {"op": "delete", "topic": f"{t1}-missing"},
        {"op": "describe_broker", "topic": "0"},
    ]
    kp_ops = [
        {"op": "create", "topic": t2, "partitions": 1, "config": conf},
        {"op": "create", "topic": t2, "partitions": 1, "config": conf},
        {"op": "create", "topic": f"{t2}-bad", "config": {"no.such.key": "1"}},
        {"op": "describe", "topic": t2},
        {"op": "alter", "topic": t2, "configs": {"delete.retention.ms": "1000"}, "incremental": True},
        {"op": "alter", "topic": t2, "configs": {"min.compaction.lag.ms": "5"}, "incremental": False},
        {"op": "describe", "topic": t2},
        {"op": "delete", "topic": t2},
        {"op": "describe_broker", "topic": "0"},
    ]
    confluent, kp = (a["answers"] for a in _run_all([
        {"library": lib, "action": "admin", "bootstrap": kafka_server.bootstrap, "ops": ops}
        for lib, ops in (("confluent", confluent_ops), ("kafka-python", kp_ops))]))
    assert confluent[0] == {t1: None}
    assert confluent[1] == {t1: {"error": "TOPIC_ALREADY_EXISTS"}}
    assert confluent[2] == {f"{t1}-bad": {"error": "INVALID_CONFIG"}}
    assert confluent[3]["cleanup.policy"][0] == "compact" and confluent[3]["remote.storage.enable"][0] == "true"
    assert confluent[4] is None
    assert confluent[5] == {"error": "INVALID_CONFIG"}
    assert confluent[6]["min.cleanable.dirty.ratio"][0] == "0.25"
    assert confluent[7] is None
    assert confluent[8] == {"error": "INVALID_PARTITIONS"}
    assert confluent[9] == {"error": "UNKNOWN_TOPIC_OR_PART"}
    assert confluent[10] == {"error": "UNKNOWN_TOPIC_OR_PART"}
    topic = kafka_server.api("GET", f"/v1/topics/{t1}")
    assert topic["partitions"] == 3 and topic["config"]["min.cleanable.dirty.ratio"] == 0.25
    assert kp[0] == {t2: None}
    assert kp[1]["error"] == "TopicAlreadyExistsError"
    assert kp[2]["error"] == "InvalidConfigurationError"
    assert kp[3]["cleanup.policy"] == ["compact", "DYNAMIC_TOPIC_CONFIG"]
    assert kp[3]["segment.bytes"][1] == "DEFAULT_CONFIG"
    assert kp[4] is None and kp[5] is None
    assert kp[6]["delete.retention.ms"][0] == "1000" and kp[6]["min.compaction.lag.ms"][0] == "5"
    assert kp[6]["remote.storage.enable"][0] == "true"  # the non-incremental alter kept the other overrides
    assert kp[7] is None
    # a broker's describe: the node's settings and the topic defaults under Kafka's broker names, read-only
    assert confluent[11]["broker.id"][0] == "0"
    assert confluent[11]["log.segment.bytes"] == ["1073741824", 5, True]  # DEFAULT_CONFIG, read-only
    assert confluent[11]["log.cleanup.policy"][0] == "compact"
    assert kp[8]["message.max.bytes"][0] == confluent[11]["message.max.bytes"][0]
    assert kp[8]["num.io.threads"] == ["8", "DEFAULT_CONFIG"]
    assert t2 not in [t["name"] for t in kafka_server.api("GET", "/v1/topics")]


def test_admin_clients_delete_records_and_describe_the_broker(kafka_server: KafkaServe, topic_name: str) -> None:
    plain, tiered, compacted = f"{topic_name}-d", f"{topic_name}-t", f"{topic_name}-c"
    # retention.ms=-1: the records' timestamps (TS0, 2023) are past the default 7 days
    for topic, config in ((plain, {"cleanup.policy": "delete", "retention.ms": "-1"}),
                          (tiered, {"cleanup.policy": "delete", "remote.storage.enable": "true",
                                    "local.retention.ms": "0", "retention.ms": "-1"}),
                          (compacted, {"cleanup.policy": "compact"})):
        kafka_server.api("POST", "/v1/topics", {"name": topic, "partitions": 1, "config": config})
        _produce(kafka_server, topic, [{"key": f"k{i}", "value": f"v{i}", "timestamp": TS0 + i} for i in range(6)])
        if topic == tiered:  # [0, 5] only on the remote tier, [6, 9] local
            kafka_server.api("POST", f"/v1/topics/{topic}/partitions/0/roll")
            _produce(kafka_server, topic, [{"key": f"k{i}", "value": f"v{i}", "timestamp": TS0 + i}
                                           for i in range(6, 10)])
            kafka_server.api("POST", f"/v1/topics/{topic}/partitions/0/tier")
    # a transactional producer's batch at offsets 6-7 of the compacted topic, its transaction left open
    _produce(kafka_server, compacted, [{"key": "t", "value": "x"}, {"key": "u", "value": "y"}],
             producer={"id": 42, "epoch": 0, "base_sequence": 0, "transactional": True})
    confluent, kp, aio = (a["answers"] for a in _run_all([
        {"library": "confluent", "action": "admin", "bootstrap": kafka_server.bootstrap, "ops": [
            {"op": "delete_records", "topic": plain, "offset": 4},
            {"op": "delete_records", "topic": compacted, "offset": 2},
            {"op": "delete_records", "topic": plain, "offset": 100},
            {"op": "create_acls", "topic": plain},
            {"op": "elect_leaders", "topic": plain, "type": "PREFERRED"}]},
        {"library": "kafka-python", "action": "admin", "bootstrap": kafka_server.bootstrap, "ops": [
            {"op": "delete_records", "topic": tiered, "offset": 3},
            {"op": "describe_log_dirs", "topic": plain},
            {"op": "describe_producers", "topic": compacted},
            {"op": "describe_topic_partitions", "topic": plain},
            {"op": "describe_topic_partitions", "topic": "no-such-topic", "limit": 1},
            {"op": "list_reassignments", "topic": plain},
            {"op": "alter_reassignments", "topic": plain, "replicas": {"0": [0]}},
            {"op": "alter_reassignments", "topic": plain, "replicas": {"0": [0, 7]}},
            {"op": "alter_reassignments", "topic": plain, "replicas": {"0": None}},
            {"op": "list_config_resources", "topic": None},
            {"op": "list_config_resources", "topic": None, "types": ["BROKER", "GROUP"]},
            {"op": "list_config_resources", "topic": None, "types": ["BROKER_LOGGER"]}]},
        {"library": "aiokafka", "action": "admin", "bootstrap": kafka_server.bootstrap, "ops": [
            {"op": "delete_records", "topic": compacted, "offset": 1}]}]))
    assert confluent == [{"low_watermark": 4}, {"error": "POLICY_VIOLATION"}, {"error": "OFFSET_OUT_OF_RANGE"},
                         {plain: {"error": "SECURITY_DISABLED"}},  # no authorizer, as a Kafka broker without one
                         {f"{plain}-0": "ELECTION_NOT_NEEDED"}]  # its only replica leads it
    assert kp[0] == {"low_watermark": 3}
    # DescribeLogDirs: the one broker's data dir, with the partition's local bytes
    (broker,) = kp[1]
    (d,) = broker["dirs"]
    assert d["error_code"] == 0 and d["log_dir"].endswith("data")
    assert d["sizes"] == {f"{plain}-0": kafka_server.api("GET", f"/v1/topics/{plain}/partitions/0")["local_size_bytes"]}
    assert kp[2] == [[42, 0, 1, 6]]  # DescribeProducers: id, epoch, last sequence, open transaction's start
    assert kp[3] == {"next_cursor": None, "topics": [[plain, 0, [[0, 0, [0]]]]]}  # KIP-966: broker 0 leads it
    assert kp[4] == {"next_cursor": None, "topics": [["no-such-topic", 3, []]]}  # UNKNOWN_TOPIC_OR_PARTITION
    # one replica per partition, its leader: no reassignment is ever in progress; to the replica it has is done at
    # once, to others is refused (a partition moves with POST .../leadership), and there is nothing to cancel
    assert kp[5] == {}
    assert kp[6] == {f"{plain}-0": None}
    assert kp[7] == {f"{plain}-0": "InvalidReplicationAssignmentError"}
    assert kp[8] == {f"{plain}-0": "NoReassignmentInProgressError"}
    # ListConfigResources (KIP-1142): every topic and the broker; no group has configs here, no logger is listed
    assert set(kp[9]) == {"topic", "broker"} and {plain, tiered, compacted} <= set(kp[9]["topic"])
    assert kp[9]["broker"] == ["0"] and kp[10] == {"broker": ["0"]}
    assert kp[11]["error"] == "UnsupportedVersionError"
    assert aio[0]["errno"] == 44  # POLICY_VIOLATION
    # -1 is the high watermark; a lower offset moves nothing
    kp2, aio2 = (a["answers"] for a in _run_all([
        {"library": "kafka-python", "action": "admin", "bootstrap": kafka_server.bootstrap, "ops": [
            {"op": "delete_records", "topic": plain, "offset": -1}]},
        {"library": "aiokafka", "action": "admin", "bootstrap": kafka_server.bootstrap, "ops": [
            {"op": "delete_records", "topic": tiered, "offset": 1}]}]))
    assert kp2 == [{"low_watermark": 6}] and aio2 == [{"low_watermark": 3}]
    for topic, start in ((plain, 6), (tiered, 3), (compacted, 0)):
        assert kafka_server.api("GET", f"/v1/topics/{topic}/partitions/0")["log_start_offset"] == start
    # a consumer from the start of the tiered partition reads from the remote tier, from the new start on
    (read,) = _run_all([{"library": "confluent", "action": "read_all", "bootstrap": kafka_server.bootstrap,
                         "topic": tiered, "offset": 3}])
    assert [r[1] for r in read["records"]] == list(range(3, 10))
