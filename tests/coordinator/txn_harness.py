"""A transaction coordinator on a SQLite metadata store with a fake clock and a recording marker sink (no network,
no node): the harness of the coordinator's unit tests (the ``h`` fixture in conftest.py)."""

from __future__ import annotations

import itertools
import time
from pathlib import Path
from typing import Any

from coordinator.ownership import CoordinatorOwnership
from coordinator.txn.coordinator import TransactionCoordinator, TxnConfig
from coordinator.txn.state import TxnState
from log.types import TopicPartition
from metadata.coordinators import TRANSACTION
from metadata.sql_coordinators import SqlCoordinatorStore
from metadata.sql_txn_state import SqlTxnStateStore


class Sink:
    def __init__(self) -> None:
        self.markers: list[tuple[int, int, bool, int, TopicPartition]] = []
        self.groups: list[tuple[int, bool, set[str]]] = []
        self.fail = False

    def write_markers(self, pid: int, epoch: int, commit: bool, coordinator_epoch: int,
                      partitions: set[TopicPartition]) -> set[TopicPartition]:
        if self.fail:
            return set(partitions)
        self.markers += [(pid, epoch, commit, coordinator_epoch, tp) for tp in sorted(partitions)]
        return set()

    def complete_groups(self, pid: int, commit: bool, groups: set[str]) -> None:
        self.groups.append((pid, commit, groups))


class Clock:
    def __init__(self) -> None:
        self.ms = 1_000_000

    def __call__(self) -> int:
        return self.ms


class Harness:
    def __init__(self, tmp: Path) -> None:
        self.store = SqlCoordinatorStore(f"sqlite:///{tmp / 'meta.db'}")
        self.txns = SqlTxnStateStore(engine=self.store.engine)
        self.clock = Clock()
        self.sink = Sink()
        self.pids = itertools.count(500)
        self.n = 0
        self.tc = self.start()

    def start(self, broker: int = 0) -> TransactionCoordinator:
        self.n += 1
        inc = f"i{self.n}"
        own = CoordinatorOwnership(self.store, TRANSACTION, broker_id=broker, incarnation=inc,
                                   live=lambda: {broker: inc}, now_ms=self.clock, num_slots=1)
        tc = TransactionCoordinator(self.txns, own, next_producer_id=lambda: next(self.pids), sink=self.sink,
                                    unknown_partitions=lambda tps: {tp for tp in tps if tp.topic == "nope"},
                                    now_ms=self.clock, config=TxnConfig(max_timeout_ms=60_000, init_wait_ms=2000))
        own.reconcile()
        return tc

    def state(self, tid: str, tc: TransactionCoordinator | None = None) -> Any:
        return (tc or self.tc).describe(tid)[1]

    def settle(self, tid: str, tc: TransactionCoordinator | None = None) -> Any:
        deadline = time.monotonic() + 5
        while TxnState(self.state(tid, tc).state).preparing:
            assert time.monotonic() < deadline, "markers not written"
            time.sleep(0.005)
        return self.state(tid, tc)
