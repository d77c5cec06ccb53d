"""The transaction reproductions, through the HTTP app of a real Node on the tiered engine.

Each runs on the file:// store and on moto's S3 server. The cause: a tiered rewrite gave each
source segment only its own transaction index and the map pass read only the indexes inside the
dirty range, while an ABORT marker (and its index entry) may live in a later segment, remote or
local. Kafka collects aborted transactions by reading forward until the search is complete.
"""

from __future__ import annotations

import uuid
import warnings
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

with warnings.catch_warnings():
    warnings.simplefilter("ignore")
    from fastapi.testclient import TestClient

from log.index.txn_index import AbortedTxn, parse_txn_index
from log.record import ControlRecordType, RecordBatch, iter_batches
from remote.storage_manager import IndexType
from service.app import create_app
from service.config import load_config
from service.node import Node

P0 = "/v1/topics/t/partitions/0"
TOPIC_CONFIG = {"cleanup.policy": "compact", "remote.storage.enable": True, "local.retention.ms": -1,
                "min.cleanable.dirty.ratio": 0.01, "segment.bytes": 1 << 20}


@pytest.fixture(params=["file", "s3"])
def client(request: pytest.FixtureRequest, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[TestClient]:
    options: dict[str, Any] = {"data_dir": tmp_path / "data", "cleaner_threads": 0, "tiered_cleaner_threads": 0,
                               "tiering_interval_ms": 3_600_000}
    if request.param == "s3":
        import boto3

        moto_url = request.getfixturevalue("moto_server_url")
        for k, v in (("AWS_ACCESS_KEY_ID", "testing"), ("AWS_SECRET_ACCESS_KEY", "testing"),
                     ("AWS_DEFAULT_REGION", "us-east-1")):
            monkeypatch.setenv(k, v)
        bucket = f"b-{uuid.uuid4().hex[:12]}"
        boto3.client("s3", endpoint_url=moto_url, region_name="us-east-1").create_bucket(Bucket=bucket)
        options.update(remote=f"s3://{bucket}/segments", s3_endpoint=moto_url, s3_region="us-east-1")
    node = Node(load_config(options, env={}))
    try:
        with TestClient(create_app(node)) as c:
            r = c.post("/v1/topics", json={"name": "t", "config": TOPIC_CONFIG})
            assert r.status_code == 201, r.text
            yield c
    finally:
        node.shutdown()


def produce(c: TestClient, key: str, value: str, producer: dict[str, Any] | None = None) -> int:
    body: dict[str, Any] = {"records": [{"key": key, "value": value}]}
    if producer is not None:
        body["producer"] = producer
    r = c.post(f"{P0}/records", json=body)
    assert r.status_code == 200, r.text
    return int(r.json()["base_offset"])


def marker(c: TestClient, pid: int, kind: str) -> int:
    r = c.post(f"{P0}/markers", json={"producer_id": pid, "producer_epoch": 0, "type": kind})
    assert r.status_code == 200, r.text
    return int(r.json()["offset"])


def roll(c: TestClient) -> None:
    assert c.post(f"{P0}/roll").status_code == 200


def tier(c: TestClient) -> list[int]:
    r = c.post(f"{P0}/tier")
    assert r.status_code == 200, r.text
    return list(r.json()["copied"])


def clean(c: TestClient) -> dict[str, Any]:
    r = c.post(f"{P0}/clean", params={"wait": "true"})
    assert r.status_code == 200, r.text
    return dict(r.json())


def consume(c: TestClient, isolation: str) -> list[tuple[int, str | None, str | None]]:
    out: list[tuple[int, str | None, str | None]] = []
    offset = 0
    while True:
        r = c.get(f"{P0}/records", params={"offset": offset, "max_records": 100, "isolation": isolation})
        assert r.status_code == 200, r.text
        page = r.json()
        if not page["records"]:
            return out
        out += [(x["offset"], x["key"], x["value"]) for x in page["records"]]
        offset = page["next_offset"]


def latest(records: list[tuple[int, str | None, str | None]]) -> dict[str | None, str | None]:
    return {k: v for _o, k, v in records}


TXN5 = {"id": 5, "epoch": 0, "base_sequence": 0, "transactional": True}


def remote_state(node: Node) -> tuple[dict[int, RecordBatch], list[AbortedTxn]]:
    """Every batch of the remote tier by base offset, and every remote transaction index entry."""
    tp = node.log("t", 0).topic_partition
    batches: dict[int, RecordBatch] = {}
    txns: list[AbortedTxn] = []
    for md in node.metadata.list_remote_log_segments(tp):
        batches.update((b.base_offset, b) for _p, b in iter_batches(node.storage_manager.fetch_log_segment(md, 0)))
        txns += parse_txn_index(node.storage_manager.fetch_index(md, IndexType.TRANSACTION))
    return batches, txns


def test_abort_marker_in_the_next_segment_keeps_the_committed_value(client: TestClient) -> None:
    """Reproduction 1: the committed a=COMMITTED survives, a=ABORTED is never read as committed."""
    c = client
    assert produce(c, "a", "COMMITTED") == 0
    assert produce(c, "a", "ABORTED", TXN5) == 1
    roll(c)
    assert marker(c, 5, "abort") == 2
    assert produce(c, "b", "other") == 3
    assert tier(c) == [0]
    assert clean(c)["checkpoint"] == 2
    committed = consume(c, "read_committed")
    assert (0, "a", "COMMITTED") in committed
    assert latest(committed) == {"a": "COMMITTED", "b": "other"}
    roll(c)
    assert tier(c) == [2]
    clean(c)
    committed = consume(c, "read_committed")
    assert latest(committed) == {"a": "COMMITTED", "b": "other"}
    assert all(v != "ABORTED" for _o, _k, v in committed)
    # and again, once everything is clean: the marker (or its empty header) still guards the txn
    roll(c)
    tier(c)
    clean(c)
    committed = consume(c, "read_committed")
    assert latest(committed) == {"a": "COMMITTED", "b": "other"}
    assert all(v != "ABORTED" for _o, _k, v in committed)


def tier_txn_data_and_its_abort_marker_apart(c: TestClient) -> None:
    """Producer 5's aborted records (offsets 1-2) and their ABORT marker (4) in different remote segments:
    [0, 2], [3] and [4, 5]."""
    assert produce(c, "k", "v0") == 0
    assert produce(c, "k", "ABORTED-1", TXN5) == 1
    assert produce(c, "x", "ABORTED-2", {**TXN5, "base_sequence": 1}) == 2
    roll(c)
    assert produce(c, "y", "plain") == 3
    roll(c)
    assert marker(c, 5, "abort") == 4
    assert produce(c, "z", "after") == 5
    roll(c)
    assert tier(c) == [0, 3, 4]


def test_abort_marker_in_a_later_remote_segment(client: TestClient) -> None:
    """Reproduction 2: the transaction's data and its ABORT marker in different remote segments;
    one tiered clean neither exposes the aborted records nor drops the marker still needed."""
    c = client
    tier_txn_data_and_its_abort_marker_apart(c)
    before = consume(c, "read_committed")
    assert latest(before) == {"k": "v0", "y": "plain", "z": "after"}
    clean(c)
    after = consume(c, "read_committed")
    assert latest(after) == {"k": "v0", "y": "plain", "z": "after"}
    assert all(not (v or "").startswith("ABORTED") for _o, _k, v in after)
    # the marker is still needed and kept: producer 5's last batch (now an empty header) was
    # read in this round, so the ABORT marker and its index entry stay in the cleaned segment
    batches, txns = remote_state(c.app.state.node)  # type: ignore[attr-defined]
    assert batches[2].producer_id == 5 and batches[2].records_count == 0
    assert batches[4].is_control and batches[4].control_type() is ControlRecordType.ABORT
    assert not batches[4].has_delete_horizon
    assert [(t.producer_id, t.first_offset, t.last_offset) for t in txns] == [(5, 1, 4)]
    uncommitted = consume(c, "read_uncommitted")
    assert all(not (v or "").startswith("ABORTED") for _o, _k, v in uncommitted)
    clean(c)
    assert latest(consume(c, "read_committed")) == {"k": "v0", "y": "plain", "z": "after"}


def test_a_clean_published_while_read_committed_reads_never_exposes_aborted_records(client: TestClient) -> None:
    """Found by the soak: a read_committed read of a remote segment collects the aborted transactions from its txn
    index and from the remote segments after it. A tiered clean that published meanwhile replaced the segment and
    those after it with one beginning where the segment begins, which the look-up of later segments skipped, while
    the replaced ones were no longer listed: the ABORT marker was never found and the aborted records were shown.
    Now the look-up notices its segment was replaced (SegmentReplacedError, which the read paths retry on) and the
    read starts over from the replacement."""
    from remote.errors import ObjectNotFoundError, SegmentReplacedError

    c = client
    tier_txn_data_and_its_abort_marker_apart(c)
    node: Node = c.app.state.node  # type: ignore[attr-defined]
    path = node.remote.read_path
    log = node.log("t", 0)
    tp = log.topic_partition
    first = node.metadata.remote_log_segment_metadata(tp, 0)
    assert [(t.producer_id, t.first_offset) for t in path.remote_aborted(tp, log, first, 0, 3)] == [(5, 1)]
    read_indexes = path.reader.aborted_transactions
    cleaned: list[dict[str, Any]] = []

    def clean_while_collecting(md: Any) -> list[AbortedTxn]:
        txns = read_indexes(md)
        if md.id == first.id and not cleaned:
            cleaned.append(clean(c))  # the segment being read and those after it are replaced now
        return txns

    path.reader.aborted_transactions = clean_while_collecting  # type: ignore[method-assign]
    try:
        with pytest.raises(SegmentReplacedError) as raised:
            path.remote_aborted(tp, log, first, 0, 3)
    finally:
        path.reader.aborted_transactions = read_indexes  # type: ignore[method-assign]
    assert cleaned and isinstance(raised.value, ObjectNotFoundError)  # what the read paths retry on
    replacement = node.metadata.remote_log_segment_metadata(tp, 0)
    assert replacement.id != first.id
    # the read starting over reads the replacement, whose aborted records are gone or guarded by their marker
    page = path.read(tp, 0, isolation="read_committed", max_records=100)
    values = [f[3] for f in page.fields]
    assert values and b"ABORTED-1" not in values and b"ABORTED-2" not in values
