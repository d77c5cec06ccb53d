"""Differential check: the local, tiered (file:// and moto S3) and Spark engines give the same
logical log, (offset, key, value, timestamp) at both isolation levels, for the same input, and
each agrees with the reference model.

A scenario is a seeded list of operations (produce of every kind, markers, roll, tier, clean,
clock, retention) applied to every engine through the same Driver. The Spark engine is a tiered
node on which every scenario is a topic: its earlier cleans run in-process and its final clean
is ONE Spark job over all the scenario topics (one Spark round per test session).
"""

from __future__ import annotations

import random
from collections.abc import Callable, Sequence
from typing import Any

import pytest

from tests.model.driver import IDEMPOTENT_PIDS, KEYS, TXN_PIDS, Driver
from tests.model.engines import Engine, EngineSpec, node_config, topic_config
from tests.model.partition_model import PartitionModel

Op = tuple[Any, ...]
SEEDS = range(6)
CONFIG = {"delete_retention_ms": 1000, "min_lag_ms": 0, "max_lag_ms": None, "segment_bytes": 400}


def scenario(seed: int, steps: int = 45) -> list[Op]:
    """A seeded operation list; it always ends with every transaction decided, a roll, a tier
    and a final clean, so the last clean covers the whole log."""
    rnd = random.Random(seed)
    ops: list[Op] = []
    open_txn: set[int] = set()

    def drafts() -> list[tuple[bytes | None, int]]:
        return [(rnd.choice((*KEYS, None)), rnd.randrange(5)) for _ in range(rnd.randint(1, 3))]

    for _ in range(steps):
        x = rnd.random()
        if x < 0.25:
            ops.append(("produce_plain", drafts()))
        elif x < 0.4:
            ops.append(("produce_idempotent", rnd.choice(IDEMPOTENT_PIDS), drafts()))
        elif x < 0.55:
            pid = rnd.choice(TXN_PIDS)
            open_txn.add(pid)
            ops.append(("produce_transactional", pid, drafts()))
        elif x < 0.65 and open_txn:
            pid = rnd.choice(sorted(open_txn))
            open_txn.discard(pid)
            ops.append(("end_transaction", pid, rnd.random() < 0.5))
        elif x < 0.75:
            ops.append(("roll",))
        elif x < 0.82:
            ops.append(("tier",))
        elif x < 0.9:
            ops.append(("clean",))
        elif x < 0.95:
            ops.append(("retention",))
        else:
            ops.append(("advance_clock", rnd.choice((10, 600, 1500))))
        ops.append(("advance_clock", 1))
    ops += [("end_transaction", pid, False) for pid in sorted(open_txn)]
    ops += [("roll",), ("tier",), ("advance_clock", 2000), ("final_clean",)]
    return ops


def apply(d: Driver, ops: Sequence[Op], final_clean: Callable[[], Any] | None = None) -> None:
    for op in ops:
        name, args = op[0], op[1:]
        if name == "final_clean":
            d.clean(final_clean)
        else:
            getattr(d, name)(*args)
        d.assert_ok()


def new_model() -> PartitionModel:
    return PartitionModel(delete_retention_ms=CONFIG["delete_retention_ms"],
                          min_compaction_lag_ms=CONFIG["min_lag_ms"], max_compaction_lag_ms=CONFIG["max_lag_ms"])


def run_on(spec: EngineSpec, ops: Sequence[Op]) -> tuple[list[Any], list[Any]]:
    e = Engine(spec, topic_config(spec.tiered, **CONFIG))
    try:
        d = Driver(e, new_model(), page=4)
        apply(d, ops)
        return d.observe()
    finally:
        e.close()


@pytest.fixture
def engine_specs(request: pytest.FixtureRequest, aws_test_credentials: None) -> list[EngineSpec]:
    url = request.getfixturevalue("moto_server_url")
    return [EngineSpec("local"), EngineSpec("file"), EngineSpec("s3", url, request.getfixturevalue("model_bucket"))]


@pytest.mark.parametrize("seed", SEEDS)
def test_local_and_tiered_engines_give_the_same_logical_log(seed: int, engine_specs: list[EngineSpec]) -> None:
    ops = scenario(seed)
    logs = {spec.kind: run_on(spec, ops) for spec in engine_specs}
    assert logs["file"] == logs["local"]
    assert logs["s3"] == logs["local"]


@pytest.mark.spark
@pytest.mark.slow
@pytest.mark.parametrize("mode", ["whole", "split"])
def test_a_spark_round_gives_the_same_logical_log(spark: Any, tmp_path: Any, mode: str) -> None:
    """Every scenario is a topic of one tiered node, run one after the other on the node's
    clock; then ONE Spark job runs every scenario's final clean. Each topic must then read as
    the same scenario does on its own tiered node with an in-process final clean at that time."""
    from cleaner.spark.job import SparkCleanJob
    from log.clock import MockClock
    from service.node import Node
    from tests.model.engines import START_MS
    from tests.spark.conftest import mode_config

    clock = MockClock(START_MS)
    spec = EngineSpec("file")
    node = Node(node_config(spec, tmp_path), clock=clock)
    try:
        drivers: dict[int, Driver] = {}
        started: dict[int, int] = {}
        scripts = {seed: scenario(seed) for seed in SEEDS}
        for seed in SEEDS:
            started[seed] = clock.milliseconds()
            e = Engine(spec, topic_config(True, **CONFIG), node=node, clock=clock, topic=f"s{seed}")
            d = drivers[seed] = Driver(e, new_model(), page=4)
            apply(d, scripts[seed][:-1])
        final_at = clock.milliseconds()
        job = SparkCleanJob(spark, logs=node.log_manager.get_log, rlmm=node.metadata, store_url=node.config.remote_url,
                            leader_epoch=node.remote.leader_epoch, checkpoint=node.cleaner_checkpoint,
                            write_checkpoint=lambda tp, off: node.cleaner.manager.update_checkpoints(add=(tp, off)),
                            broker_id=node.broker_id, clock=clock, config=mode_config(mode))
        outcomes: dict[Any, Any] = {}

        def spark_round() -> None:
            if not outcomes:
                outcomes.update(job.run([d.e.tp for d in drivers.values()]))

        for d in drivers.values():
            d.clean(spark_round)
            d.assert_ok()
        assert {o.status for o in outcomes.values()} <= {"cleaned", "nothing-to-clean"}, outcomes
        assert any(o.status == "cleaned" for o in outcomes.values())
        for seed, d in drivers.items():
            assert d.observe() == reference_run(scripts[seed], started[seed], final_at), f"scenario {seed}"
    finally:
        node.shutdown()


def reference_run(ops: Sequence[Op], start_ms: int, final_at: int) -> tuple[list[Any], list[Any]]:
    """One scenario alone on a tiered node whose clock starts at ``start_ms``, with its final
    clean in-process at ``final_at``."""
    from log.clock import MockClock

    spec = EngineSpec("file")
    e = Engine(spec, topic_config(True, **CONFIG), clock=MockClock(start_ms))
    try:
        d = Driver(e, new_model(), page=4)
        apply(d, ops[:-1])
        d.advance_clock(final_at - d.now)
        apply(d, ops[-1:])
        return d.observe()
    finally:
        e.close()
