"""transactional.id.expiration.ms (Kafka's TransactionStateManager.removeExpiredTransactionalIds) on the transaction coordinator, with a fake clock."""

from __future__ import annotations

import time

from coordinator.txn import state as S
from coordinator.txn.coordinator import TxnConfig
from log.types import TopicPartition
from tests.coordinator.txn_harness import Harness

TP0 = TopicPartition("t", 0)
WEEK = TxnConfig().id_expiration_ms


def _committed(h: Harness, tid: str, commit: bool = True) -> tuple[int, int]:
    _c, pid, epoch = h.tc.init_producer_id(tid, 30_000)
    assert h.tc.add_partitions(tid, pid, epoch, [TP0]) == {TP0: 0}
    assert h.tc.end_txn(tid, pid, epoch, commit) == 0
    assert h.settle(tid).state == ("CompleteCommit" if commit else "CompleteAbort")
    return pid, epoch


def test_the_default_is_kafkas_seven_days() -> None:
    assert WEEK == 604_800_000


def test_an_idle_empty_id_is_removed_and_starts_afresh(h: Harness) -> None:
    tc = h.tc
    _c, pid, _e = tc.init_producer_id("a", 30_000)
    h.clock.ms += WEEK - 1
    assert tc.remove_expired_ids() == []
    h.clock.ms += 1
    assert tc.remove_expired_ids() == ["a"]
    assert tc.describe("a") == (S.TRANSACTIONAL_ID_NOT_FOUND, None)
    assert h.txns.get("a") is None and tc.list() == []
    assert tc.stats["expired_ids"] == 1
    code, pid2, epoch2 = tc.init_producer_id("a", 30_000)
    assert code == 0 and pid2 != pid and epoch2 == 0  # a new producer id, not the next epoch of the old one
    assert h.txns.get("a").producer_id == pid2  # type: ignore[union-attr]


def test_complete_ids_expire_from_their_last_update(h: Harness) -> None:
    _committed(h, "c", commit=True)
    h.clock.ms += WEEK // 2
    _committed(h, "x", commit=False)
    h.clock.ms += WEEK // 2
    assert h.tc.remove_expired_ids() == ["c"]  # "x" was written half a week later
    assert h.state("x").state == "CompleteAbort"
    h.clock.ms += WEEK // 2
    assert h.tc.remove_expired_ids() == ["x"]
    assert h.txns.all() == []


def test_open_and_preparing_transactions_never_expire_this_way(h: Harness) -> None:
    tc = h.tc
    _c, pid, epoch = tc.init_producer_id("open", 60_000)
    assert tc.add_partitions("open", pid, epoch, [TP0]) == {TP0: 0}
    _c, pid2, epoch2 = tc.init_producer_id("prep", 60_000)
    assert tc.add_partitions("prep", pid2, epoch2, [TP0]) == {TP0: 0}
    h.sink.fail = True  # its markers never land: it stays PrepareCommit
    assert tc.end_txn("prep", pid2, epoch2, True) == 0
    time.sleep(0.02)
    h.clock.ms += 10 * WEEK
    assert tc.remove_expired_ids() == []
    assert (h.state("open").state, h.state("prep").state) == ("Ongoing", "PrepareCommit")
    assert {r.transactional_id for r in h.txns.all()} == {"open", "prep"}
    # the transaction timeout aborts the open one; once complete it is idle and can expire later
    h.sink.fail = False
    assert tc.expire() == ["open"]
    assert h.settle("open").state == "CompleteAbort" and h.settle("prep").state == "CompleteCommit"
    assert tc.remove_expired_ids() == []
    h.clock.ms += WEEK
    assert sorted(tc.remove_expired_ids()) == ["open", "prep"]


def test_a_superseded_coordinator_cannot_remove_an_id(h: Harness) -> None:
    old = h.tc
    _c, pid, _e = old.init_producer_id("z", 30_000)
    old.close()
    h.tc = new = h.start()  # a new incarnation claims the slot at the next coordinator epoch
    h.clock.ms += WEEK
    assert old.remove_expired_ids() == []  # it has not noticed; the store refuses its delete
    assert old.stats["fenced_writes"] == 1 and old.stats["expired_ids"] == 0
    assert h.txns.get("z") is not None and new.describe("z")[0] == 0
    assert new.remove_expired_ids() == ["z"]
    assert h.txns.get("z") is None
