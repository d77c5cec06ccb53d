"""The stateful property test on every engine (local, tiered on file://, tiered on moto S3, and
tiered with cleans run as the node's Spark offload jobs):
a RuleBasedStateMachine drives a real partition and the reference model with the same
operations and checks both isolation levels after every step (tests/model/machine.py).

``make test`` runs a fixed, derandomized budget per engine; ``make fuzz`` runs the same
machine with fresh randomness for as long as asked:

* ``TIERCOMPACT_TEST_FUZZ_EXAMPLES``: examples per batch and engine (default 1000), each batch
  with fresh randomness;
* ``TIERCOMPACT_TEST_FUZZ_SECONDS``: keep running batches until this many seconds have passed on
  each engine (without it, one batch);
* ``TIERCOMPACT_TEST_FUZZ_ENGINES``: a comma-separated subset of local,file,s3,spark.
"""

from __future__ import annotations

import os
import time
from typing import Any

import pytest
from hypothesis import HealthCheck, settings
from hypothesis.stateful import run_state_machine_as_test

from tests.model.engines import ENGINES, EngineSpec
from tests.model.machine import machine_for

STEPS = 40
#: examples per engine in ``make test`` (derandomized: the same examples every run), sized for CI
#: (the test still asserts every engine cleaned, restarted and aborted); a Spark job costs about a
#: second, so that engine runs fewer. ``make fuzz`` runs thousands with fresh randomness.
EXAMPLES = {"local": 80, "file": 70, "s3": 75, "spark": 40}
#: object-store round trips dominate the S3 engine's time: fewer expensive steps per example
EXPENSIVE_BUDGET = {"local": None, "file": None, "s3": 5, "spark": 6}

FUZZ_EXAMPLES = os.environ.get("TIERCOMPACT_TEST_FUZZ_EXAMPLES")
FUZZ_SECONDS = os.environ.get("TIERCOMPACT_TEST_FUZZ_SECONDS")
FUZZ_ENGINES = os.environ.get("TIERCOMPACT_TEST_FUZZ_ENGINES")
FUZZING = bool(FUZZ_EXAMPLES or FUZZ_SECONDS)


def _settings(examples: int, *, derandomize: bool) -> settings:
    return settings(max_examples=examples, stateful_step_count=STEPS, deadline=None, derandomize=derandomize,
                    database=None, print_blob=True,
                    suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much,
                                           HealthCheck.data_too_large])


def run_engine(spec: EngineSpec) -> dict[str, Any]:
    stats: dict[str, int] = {}
    machine = machine_for(spec, expensive_budget=EXPENSIVE_BUDGET[spec.kind], stats=stats)
    started = time.monotonic()
    if not FUZZING:
        run_state_machine_as_test(machine, settings=_settings(EXAMPLES[spec.kind], derandomize=True))
    else:
        per_batch = int(FUZZ_EXAMPLES or 1000)
        deadline = started + float(FUZZ_SECONDS) if FUZZ_SECONDS else None
        while True:
            run_state_machine_as_test(machine, settings=_settings(per_batch, derandomize=False))
            print(f"model state machine [{spec.kind}] after {int(time.monotonic() - started)} s: {stats}", flush=True)
            if deadline is None or time.monotonic() >= deadline:
                break
    stats["seconds"] = int(time.monotonic() - started)
    print(f"\nmodel state machine [{spec.kind}]: {stats}")
    return stats


def _engines() -> list[str]:
    if FUZZ_ENGINES:
        return [e.strip() for e in FUZZ_ENGINES.split(",") if e.strip()]
    return [*ENGINES, "spark"]


@pytest.mark.slow
@pytest.mark.timeout(0 if FUZZING else 1800)  # on a loaded 2-core machine an engine may outlast the default 600 s
@pytest.mark.parametrize("kind", _engines())
def test_state_machine(kind: str, request: pytest.FixtureRequest) -> None:
    if kind == "spark":
        request.getfixturevalue("spark")  # the session the engine's nodes reuse (getOrCreate)
    if kind == "s3":
        request.getfixturevalue("aws_test_credentials")
        spec = EngineSpec("s3", request.getfixturevalue("moto_server_url"), request.getfixturevalue("model_bucket"))
    else:
        spec = EngineSpec(kind)
    stats = run_engine(spec)
    assert stats.get("examples", 0) >= (1 if FUZZING else EXAMPLES[kind])
    assert stats.get("clean", 0) > 0 and stats.get("restart", 0) > 0 and stats.get("abort", 0) > 0
    assert stats.get("kafka_produce", 0) > 0  # batches entered through the Kafka listener too
