"""Regression tests: failing examples of the model state machine (and the issue's
reproductions), shrunk and written out as plain operation sequences.

Each test drives a real partition through the same Driver as the state machine and checks
both isolation levels against the reference model after every operation.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from tests.model.driver import Driver
from tests.model.engines import Engine, EngineSpec, topic_config
from tests.model.partition_model import PartitionModel

ALL_ENGINES = pytest.mark.parametrize("kind", ["local", "file", "s3"])


@pytest.fixture
def make_driver(request: pytest.FixtureRequest) -> Iterator[Any]:
    engines: list[Engine] = []

    def make(kind: str, *, delete_retention_ms: int = 1000, min_lag_ms: int = 0, max_lag_ms: int | None = None,
             segment_bytes: int = 1024, policy: str = "compact") -> Driver:
        if kind == "s3":
            request.getfixturevalue("aws_test_credentials")
            spec = EngineSpec("s3", request.getfixturevalue("moto_server_url"),
                              request.getfixturevalue("model_bucket"))
        else:
            spec = EngineSpec(kind)
        e = Engine(spec, topic_config(spec.tiered, delete_retention_ms=delete_retention_ms, min_lag_ms=min_lag_ms,
                                      max_lag_ms=max_lag_ms, segment_bytes=segment_bytes, policy=policy))
        engines.append(e)
        model = PartitionModel(delete_retention_ms=delete_retention_ms, min_compaction_lag_ms=min_lag_ms,
                               max_compaction_lag_ms=max_lag_ms)
        return Driver(e, model)

    yield make
    for e in engines:
        e.close()


def run(d: Driver, *steps: tuple[Any, ...]) -> None:
    """Apply each (operation, *args) and check the model after each one."""
    for name, *args in steps:
        getattr(d, name)(*args)
        d.assert_ok()


# ---- transaction reproductions --------------------------------------------------------------------

@ALL_ENGINES
def test_issue11_abort_marker_in_a_later_segment_keeps_the_committed_value(make_driver: Any, kind: str) -> None:
    """Committed a, aborted a in a transaction, roll, ABORT marker, b: after tier+clean,
    read_committed still shows the committed a; after roll+tier+clean again it never shows
    the aborted a."""
    d = make_driver(kind)
    run(d,
        ("produce_plain", [(b"a", 1)]),
        ("produce_transactional", 5, [(b"a", 1)]),
        ("roll",),
        ("end_transaction", 5, False),
        ("produce_plain", [(b"b", 1)]),
        ("tier",), ("clean",),
        ("roll",), ("tier",), ("clean",),
        ("advance_clock", 2000), ("clean",))


@ALL_ENGINES
def test_issue11_aborted_data_stays_hidden_when_its_marker_is_in_a_later_segment(make_driver: Any,
                                                                               kind: str) -> None:
    d = make_driver(kind)
    run(d,
        ("produce_transactional", 7, [(b"k", 1), (b"x", 1)]),
        ("produce_plain", [(b"k", 1)]),
        ("roll",),
        ("produce_plain", [(b"y", 1)]),
        ("roll",),
        ("end_transaction", 7, False),
        ("produce_plain", [(b"z", 1)]),
        ("roll",), ("tier",), ("clean",),
        ("advance_clock", 1500), ("roll",), ("tier",), ("clean",))


# ---- found by the state machine -----------------------------------------------------------------

@ALL_ENGINES
def test_a_marker_that_bumps_the_epoch_resets_the_producers_sequences(make_driver: Any, kind: str) -> None:
    """The coordinator aborts at a bumped epoch; the producer's first batch at the new epoch
    starts at sequence 0 (Kafka's maybeUpdateProducerEpoch clears the batch metadata). Was:
    OutOfOrderSequenceError "producer 12 sent base sequence 0, expected 1"."""
    d = make_driver(kind)
    run(d,
        ("produce_transactional", 12, [(b"a", 0)]),
        ("end_transaction", 12, False, True),
        ("produce_transactional", 12, [(b"a", 0), (b"a", 0)]),
        ("end_transaction", 12, True),
        ("zombie_produce", [(b"b", 1)]),
        ("restart",),
        ("retry_last_batch", 0))
