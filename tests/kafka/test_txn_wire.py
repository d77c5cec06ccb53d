"""The transaction coordinator on the wire, two in-process nodes sharing a metadata store and an object store.

- node A coordinates the transactional id, node B leads the partition: EndTxn on A makes A send
  WriteTxnMarkers to B, which appends the COMMIT marker (the LSO moves past the transaction);
- the state machine's answers: INVALID_TRANSACTION_TIMEOUT, INVALID_PRODUCER_ID_MAPPING, a fenced
  epoch, CONCURRENT_TRANSACTIONS-free retries of EndTxn, INVALID_TXN_STATE, expiry aborting an open
  transaction and fencing its producer; Describe/ListTransactions;
- a coordinator that stops with a transaction in PrepareCommit: the node that takes the slot over
  finishes its markers;
- WriteTxnMarkers refuses a marker from an older coordinator epoch (TRANSACTION_COORDINATOR_FENCED);
- transactional.id.expiration.ms removes an idle transactional id (one node).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from kafka.protocol.admin.transactions import DescribeTransactionsRequest, ListTransactionsRequest
from kafka.protocol.producer import (
    AddPartitionsToTxnRequest,
    EndTxnRequest,
    InitProducerIdRequest,
    ProduceRequest,
    WriteTxnMarkersRequest,
)
from kafka.record.default_records import DefaultRecordBatchBuilder

from coordinator.ownership import SlotStatus
from coordinator.txn.state import TxnState
from log.types import TopicPartition
from metadata.txn_state import TxnRecord
from tests.kafka.wire import InProcessNode, Wire, wait_until

TOPIC = "txn-wire"


def _batch(pid: int, epoch: int, seq: int, n: int = 2) -> bytes:
    b = DefaultRecordBatchBuilder(2, 0, True, pid, epoch, seq, 1 << 20)
    for i in range(n):
        b.append(i, 1_700_000_000_000 + i, f"k{seq + i}".encode(), f"v{seq + i}".encode(), [])
    return bytes(b.build())


def _produce(w: Wire, pid: int, epoch: int, seq: int, tid: str, partition: int = 0) -> int:
    P = ProduceRequest.TopicProduceData.PartitionProduceData
    r = w.call(ProduceRequest(transactional_id=tid, acks=-1, timeout_ms=5000, topic_data=[
        ProduceRequest.TopicProduceData(name=TOPIC, partition_data=[P(index=partition,
                                                                      records=_batch(pid, epoch, seq))])]), 8)
    return int(r.responses[0].partition_responses[0].error_code)


def _init(w: Wire, tid: str, timeout_ms: int = 60_000, pid: int = -1, epoch: int = -1) -> Any:
    return w.call(InitProducerIdRequest(transactional_id=tid, transaction_timeout_ms=timeout_ms, producer_id=pid,
                                        producer_epoch=epoch), 4)


def _add(w: Wire, tid: str, pid: int, epoch: int, partitions: list[int], version: int = 3) -> list[int]:
    T = AddPartitionsToTxnRequest.AddPartitionsToTxnTopic
    r = w.call(AddPartitionsToTxnRequest(v3_and_below_transactional_id=tid, v3_and_below_producer_id=pid,
                                         v3_and_below_producer_epoch=epoch,
                                         v3_and_below_topics=[T(name=TOPIC, partitions=partitions)]), version)
    return [p.partition_error_code for t in r.results_by_topic_v3_and_below for p in t.results_by_partition]


def _end(w: Wire, tid: str, pid: int, epoch: int, commit: bool) -> int:
    return int(w.call(EndTxnRequest(transactional_id=tid, producer_id=pid, producer_epoch=epoch,
                                    committed=commit), 3).error_code)


def _tid_owned_by(node: InProcessNode, prefix: str) -> str:
    own = node.coordinators.txn_ownership
    return next(f"{prefix}-{i}" for i in range(1000) if own.lookup(f"{prefix}-{i}").status is SlotStatus.OWNED)


def test_transactions_across_two_nodes(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'meta.db'}"
    extra = {"remote": (tmp_path / "remote").as_uri(), "broker_heartbeat_interval_ms": 100,
             "broker_session_timeout_ms": 1000}
    a = InProcessNode(tmp_path / "a", url, broker_id=1, **extra)
    b = InProcessNode(tmp_path / "b", url, broker_id=2, **extra)
    stopped_a = False
    try:
        wait_until(lambda: len(a.coordinators.txn_ownership.owned_slots()) == 25
                   and len(b.coordinators.txn_ownership.owned_slots()) == 25, what="the txn slots split")
        config = {"remote.storage.enable": True, "cleanup.policy": "delete"}
        a.node.create_topic(TOPIC, 2, config)
        b.node.create_topic(TOPIC, 2, config)
        b.node.become_leader(TOPIC, 0, 1, 2)
        b.node.become_leader(TOPIC, 1, 1, 2)
        wa, wb = a.wire(), b.wire()
        tid = _tid_owned_by(a, "wire")

        # the coordinator's refusals
        assert _init(wa, tid, timeout_ms=10**9).error_code == 50  # INVALID_TRANSACTION_TIMEOUT
        assert _init(wb, tid).error_code == 16  # NOT_COORDINATOR on the other node
        r = _init(wa, tid)
        assert r.error_code == 0 and r.producer_epoch == 0
        pid, epoch = r.producer_id, r.producer_epoch
        assert _add(wa, tid, pid + 1, epoch, [0]) == [49]  # INVALID_PRODUCER_ID_MAPPING
        assert _add(wa, tid, pid, epoch + 1, [0]) == [90]  # PRODUCER_FENCED (v2+)
        assert _add(wa, tid, pid, epoch + 1, [0], version=1) == [47]  # INVALID_PRODUCER_EPOCH before
        assert _end(wa, tid, pid, epoch, True) == 48  # INVALID_TXN_STATE: nothing open

        # a transaction on partitions B leads, coordinated by A: markers go over WriteTxnMarkers
        assert _add(wa, tid, pid, epoch, [0, 1]) == [0, 0]
        assert _produce(wb, pid, epoch, 0, tid, 0) == 0
        assert _produce(wb, pid, epoch, 0, tid, 1) == 0
        log0 = b.node.log(TOPIC, 0)
        assert log0.last_stable_offset == 0
        d = wa.call(DescribeTransactionsRequest(transactional_ids=[tid]), 0).transaction_states[0]
        assert (d.error_code, d.transaction_state, d.producer_id) == (0, "Ongoing", pid)
        assert [(t.topic, sorted(t.partitions)) for t in d.topics] == [(TOPIC, [0, 1])]
        listed = wa.call(ListTransactionsRequest(state_filters=["Ongoing"], producer_id_filters=[]), 0)
        assert [t.transactional_id for t in listed.transaction_states] == [tid]
        assert _end(wa, tid, pid, epoch, True) == 0
        wait_until(lambda: log0.last_stable_offset == log0.log_end_offset == 3, what="the COMMIT marker on B")
        wait_until(lambda: a.coordinators.transactions.describe(tid)[1].state == "CompleteCommit",
                   what="CompleteCommit")
        assert _end(wa, tid, pid, epoch, True) == 0  # a retried EndTxn of the completed commit
        assert _end(wa, tid, pid, epoch, False) == 48

        # expiry: an open transaction past its timeout is aborted and its producer fenced
        r = _init(wa, tid, timeout_ms=1, pid=pid, epoch=epoch)
        assert r.error_code == 0 and r.producer_epoch == epoch + 1
        epoch = r.producer_epoch
        assert _add(wa, tid, pid, epoch, [0]) == [0]
        assert _produce(wb, pid, epoch, 0, tid, 0) == 0
        tc = a.coordinators.transactions
        wait_until(lambda: tc.expire() or tc.describe(tid)[1].state != "Ongoing", what="expiry")
        wait_until(lambda: tc.describe(tid)[1].state == "CompleteAbort", what="the expired transaction aborted")
        assert _end(wa, tid, pid, epoch, True) == 90  # the producer was fenced by the abort's epoch bump
        assert log0.last_stable_offset == log0.log_end_offset

        # WriteTxnMarkers from an older coordinator epoch is refused
        M = WriteTxnMarkersRequest.WritableTxnMarker
        stale = wb.call(WriteTxnMarkersRequest(markers=[M(
            producer_id=pid, producer_epoch=epoch + 1, transaction_result=False, coordinator_epoch=-5,
            topics=[M.WritableTxnMarkerTopic(name=TOPIC, partition_indexes=[0])])]), 1)
        assert stale.markers[0].topics[0].partitions[0].error_code == 52  # TRANSACTION_COORDINATOR_FENCED

        # A dies with a transaction in PrepareCommit: B takes the slot over and writes its markers
        r = _init(wa, tid, timeout_ms=60_000)
        pid, epoch = r.producer_id, r.producer_epoch
        assert _add(wa, tid, pid, epoch, [1]) == [0]
        assert _produce(wb, pid, epoch, 0, tid, 1) == 0
        log1 = b.node.log(TOPIC, 1)
        assert log1.last_stable_offset < log1.log_end_offset
        own = a.coordinators.txn_ownership
        slot = own.slot(tid)
        rec = tc.store.get(tid)
        assert rec is not None
        prepared = TxnRecord(**{**rec.__dict__, "state": TxnState.PREPARE_COMMIT.value})
        tc.store.put(prepared, slot=slot, broker_id=1, coordinator_epoch=own.epoch_of(slot) or 0)
        wa.close()
        a.stop()
        stopped_a = True
        wait_until(lambda: b.coordinators.txn_ownership.lookup(tid).status is SlotStatus.OWNED, timeout_s=20,
                   what="B takes the slot over")
        wait_until(lambda: log1.last_stable_offset == log1.log_end_offset, timeout_s=20,
                   what="B finishes the markers")
        wait_until(lambda: b.coordinators.transactions.describe(tid)[1].state == "CompleteCommit",
                   what="CompleteCommit recorded by B")
        assert b.coordinators.transactions.stats["recovered"] >= 1
        assert log1.producer_state.ongoing_transactions() == {}
        assert TopicPartition(TOPIC, 1) not in b.coordinators.transactions.describe(tid)[1].partitions
        wb.close()
    finally:
        if not stopped_a:
            a.stop()
        b.stop()


def test_peer_client_authenticates_with_scram(tmp_path: Path) -> None:
    """Node-to-node calls (WriteTxnMarkers) log in with SCRAM-SHA-256 when the node has credentials."""
    import pytest

    from service.kafka.peer_client import PeerClient, PeerError, credentials_for

    node = InProcessNode(tmp_path / "n", f"sqlite:///{tmp_path / 'meta.db'}", broker_id=1,
                         token="peer-secret-token")
    try:
        M = WriteTxnMarkersRequest.WritableTxnMarker
        req = WriteTxnMarkersRequest(markers=[M(producer_id=1, producer_epoch=0, transaction_result=True,
                                                coordinator_epoch=0,
                                                topics=[M.WritableTxnMarkerTopic(name="nope", partition_indexes=[0])])])
        creds = credentials_for(node.node.config, 7)
        assert creds is not None
        peers = PeerClient(creds)
        r = peers.call("127.0.0.1", node.port, req, 1)
        assert r.markers[0].topics[0].partitions[0].error_code == 3  # served after logging in: no such topic
        peers.close()
        other = PeerClient(("alice", "peer-secret-token")).call("127.0.0.1", node.port, req, 1)
        assert other.markers[0].topics[0].partitions[0].error_code == 31  # CLUSTER_AUTHORIZATION_FAILED
        with pytest.raises(PeerError):
            PeerClient((creds[0], "wrong-password")).call("127.0.0.1", node.port, req, 1)
        with pytest.raises(PeerError):
            PeerClient(None).call("127.0.0.1", node.port, req, 1)  # no SASL: the listener closes
    finally:
        node.stop()


def test_an_idle_transactional_id_expires(tmp_path: Path) -> None:
    """transactional.id.expiration.ms: the coordinator's loop removes an idle id; Describe/ListTransactions stop
    showing it and its next InitProducerId gets a new producer id."""
    node = InProcessNode(tmp_path / "n", f"sqlite:///{tmp_path / 'meta.db'}", broker_id=1,
                         transactional_id_expiration_ms=1500,
                         transaction_remove_expired_transaction_cleanup_interval_ms=50,
                         transaction_abort_timed_out_transaction_cleanup_interval_ms=50)
    try:
        tc = node.coordinators.transactions
        assert tc.config.id_expiration_ms == 1500
        wait_until(lambda: node.coordinators.txn_ownership.owned_slots(), what="a txn slot")
        tid = _tid_owned_by(node, "idle")
        w = node.wire()
        r = _init(w, tid)
        assert r.error_code == 0
        first_pid = r.producer_id

        def described() -> int:
            return int(w.call(DescribeTransactionsRequest(transactional_ids=[tid]), 0).transaction_states[0]
                       .error_code)

        assert described() == 0
        wait_until(lambda: described() == 105, what="the idle id removed")  # TRANSACTIONAL_ID_NOT_FOUND
        listed = w.call(ListTransactionsRequest(state_filters=[], producer_id_filters=[]), 0)
        assert tid not in [t.transactional_id for t in listed.transaction_states]
        assert tc.store.get(tid) is None and tc.stats["expired_ids"] == 1
        r = _init(w, tid)
        assert r.error_code == 0 and r.producer_id != first_pid and r.producer_epoch == 0
        w.close()
    finally:
        node.stop()
