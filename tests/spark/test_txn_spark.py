"""The transaction reproductions on the Spark engine: the driver collects aborted
transactions forward over both tiers and hands the map and every rewrite task the complete set.

Partition 0: the ABORT marker lies in the local active segment, above the remote tier.
Partition 1: the transaction's data and its ABORT marker lie in different remote segments.
Each partition is also cleaned in process on a twin world: the two engines give the same bytes.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from log.fetch import READ_COMMITTED, READ_UNCOMMITTED
from log.local_log import RecordSpec
from log.record import ControlRecordType
from log.types import TopicPartition
from tests.spark.conftest import clean_in_process, make_world, mode_config, remote_image, s3_store, spark_job
from tests.tiered.conftest import World

pytestmark = pytest.mark.spark

P0, P1 = TopicPartition("t", 0), TopicPartition("t", 1)
CONFIG = {"local.retention.ms": -1}


def _put(w: World, tp: TopicPartition, key: bytes, value: bytes, **producer: Any) -> int:
    return w.lm.get_log(tp).append_records([RecordSpec(key, value, timestamp=w.clock.milliseconds())],
                                           **producer).base_offset


def _abort(w: World, tp: TopicPartition, pid: int) -> int:
    return w.lm.get_log(tp).append_marker(pid, 0, ControlRecordType.ABORT)


def _roll_tier(w: World, tp: TopicPartition) -> None:
    w.lm.get_log(tp).roll()
    w.clock.advance(1)
    w.rlm.tier(tp)


def _read(w: World, tp: TopicPartition, isolation: str) -> list[tuple[int, bytes | None, bytes | None]]:
    out: list[tuple[int, bytes | None, bytes | None]] = []
    offset = w.rlm.log_start_offset(tp)
    while True:
        res = w.rlm.read(tp, offset, isolation=isolation, max_records=10_000)
        out.extend((r.offset, r.key, r.value) for r in res.records)
        if res.next_offset >= res.high_watermark or res.next_offset == offset:
            return out
        offset = res.next_offset


def _latest(records: list[tuple[int, bytes | None, bytes | None]]) -> dict[bytes | None, bytes | None]:
    return {k: v for _o, k, v in records}


TXN = {"producer_id": 5, "producer_epoch": 0, "transactional": True}


def _build(w: World) -> None:
    # partition 0: reproduction 1 (the marker stays in the local active segment for the first round)
    assert _put(w, P0, b"a", b"COMMITTED") == 0
    assert _put(w, P0, b"a", b"ABORTED", base_sequence=0, **TXN) == 1
    w.lm.get_log(P0).roll()
    assert _abort(w, P0, 5) == 2
    assert _put(w, P0, b"b", b"other") == 3
    w.clock.advance(1)
    w.rlm.tier(P0)  # segment [0, 1] only: the marker stays local
    assert [m.start_offset for m in w.rlmm.list_remote_log_segments(P0)] == [0]
    # partition 1: reproduction 2 (data and marker in different remote segments)
    assert _put(w, P1, b"k", b"v0") == 0
    assert _put(w, P1, b"k", b"ABORTED-1", base_sequence=0, **TXN) == 1
    assert _put(w, P1, b"x", b"ABORTED-2", base_sequence=1, **TXN) == 2
    w.lm.get_log(P1).roll()
    assert _put(w, P1, b"y", b"plain") == 3
    w.lm.get_log(P1).roll()
    assert _abort(w, P1, 5) == 4
    assert _put(w, P1, b"z", b"after") == 5
    _roll_tier(w, P1)
    assert [m.start_offset for m in w.rlmm.list_remote_log_segments(P1)] == [0, 3, 4]


EXPECTED = {P0: {b"a": b"COMMITTED", b"b": b"other"}, P1: {b"k": b"v0", b"y": b"plain", b"z": b"after"}}


def _check(w: World) -> None:
    for tp, want in EXPECTED.items():
        committed = _read(w, tp, READ_COMMITTED)
        assert _latest(committed) == want, tp
        assert all(not (v or b"").startswith(b"ABORTED") for _o, _k, v in committed)
    assert (0, b"a", b"COMMITTED") in _read(w, P0, READ_UNCOMMITTED)


@pytest.mark.parametrize("backend", ["file", "s3"])
def test_spark_rounds_see_abort_markers_in_later_segments(spark, request, tmp_path: Path, backend: str,
                                                          mode: str) -> None:
    def store(name: str) -> tuple[str, dict[str, Any]]:
        if backend == "file":
            return f"file://{tmp_path / name}", {}
        return s3_store(request.getfixturevalue("moto_server_url"))

    sp = make_world(tmp_path / "spark", store("objects-spark"), partitions=2, config=CONFIG)
    ip = make_world(tmp_path / "inproc", store("objects-inproc"), partitions=2, config=CONFIG)
    try:
        for w in (sp, ip):
            _build(w)
        outcomes = spark_job(spark, sp, config=mode_config(mode)).run([P0, P1])
        assert {tp: o.status for tp, o in outcomes.items()} == {P0: "cleaned", P1: "cleaned"}
        for tp in (P0, P1):
            clean_in_process(ip, tp)
        _check(sp)
        _check(ip)
        for tp in (P0, P1):
            assert remote_image(sp, tp) == remote_image(ip, tp)
        # reproduction 1, second round: the marker's segment is tiered and cleaned too
        for w in (sp, ip):
            _roll_tier(w, P0)
            w.clock.advance(5_000)  # past delete.retention.ms
        spark_job(spark, sp, config=mode_config(mode)).run([P0, P1])
        for tp in (P0, P1):
            clean_in_process(ip, tp)
        _check(sp)
        _check(ip)
        for tp in (P0, P1):
            assert remote_image(sp, tp) == remote_image(ip, tp)
    finally:
        sp.close()
        ip.close()
