"""The stateful property test's machine: drives a real partition (tests/model/engines.py) and
the reference model (tests/model/partition_model.py) through tests/model/driver.py, and after
every step checks both isolation levels against the model.

Operations: produce (plain, idempotent, transactional; keys from a small pool, tombstones,
keyless records), retry of a producer's last batch, a fenced (zombie) produce, COMMIT/ABORT
markers (optionally bumping the producer epoch), roll, forced roll (max.compaction.lag.ms),
tier, retention, clean, leadership change, close-and-reopen, DeleteRecords, and the clock advancing;
transactions driven by the real transaction coordinator (tests/model/coordinator.py):
InitProducerId, AddPartitionsToTxn + produce, EndTxn, expiry, coordinator restart (also in the
middle of EndTxn); and on the Spark engine a second writer's publish (a standalone job) that the
node follows.
"""

from __future__ import annotations

from typing import Any, ClassVar

from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, precondition, rule

from tests.model.coordinator import TIDS, CoordinatorHarness
from tests.model.driver import IDEMPOTENT_PIDS, KEYS, TXN_PIDS, Draft, Driver
from tests.model.engines import Engine, EngineSpec, topic_config
from tests.model.partition_model import PartitionModel

drafts_st = st.lists(st.tuples(st.sampled_from((*KEYS, None)), st.integers(0, 4)), min_size=1, max_size=3)
#: now and then a producer re-initialises at the next epoch (its old epoch is then fenced)
new_epoch_st = st.sampled_from((False, False, False, False, True))


def _ready(m: PartitionMachine) -> bool:
    return m.d is not None


def _can_spend(m: PartitionMachine) -> bool:
    return m.d is not None and (m.expensive_budget is None or m.expensive < m.expensive_budget)


class PartitionMachine(RuleBasedStateMachine):
    """Subclassed per engine by :func:`machine_for`."""

    spec: ClassVar[EngineSpec]
    #: most expensive operations (object-store round trips, restarts) per example; None = no limit
    expensive_budget: ClassVar[int | None] = None
    #: counts over every example run (examples, steps, operations by name), for the report
    stats: ClassVar[dict[str, int]]

    def __init__(self) -> None:
        super().__init__()
        self.d: Driver | None = None
        self.expensive = 0
        self.coord: CoordinatorHarness | None = None

    @initialize(delete_retention_ms=st.sampled_from((0, 1000)), min_lag_ms=st.sampled_from((0, 0, 2000)),
                max_lag_ms=st.sampled_from((None, 5000)), segment_bytes=st.sampled_from((300, 1024)),
                policy=st.sampled_from(("compact", "compact,delete")), page=st.sampled_from((10_000, 10_000, 5)))
    def setup(self, delete_retention_ms: int, min_lag_ms: int, max_lag_ms: int | None, segment_bytes: int,
              policy: str, page: int) -> None:
        cfg = topic_config(self.spec.tiered, delete_retention_ms=delete_retention_ms, min_lag_ms=min_lag_ms,
                           max_lag_ms=max_lag_ms, segment_bytes=segment_bytes, policy=policy)
        model = PartitionModel(delete_retention_ms=delete_retention_ms, min_compaction_lag_ms=min_lag_ms,
                               max_compaction_lag_ms=max_lag_ms, deletable="delete" in policy)
        self.d = Driver(Engine(self.spec, cfg), model, page=page)
        self.d.on_op = self._count
        self.stats["examples"] = self.stats.get("examples", 0) + 1

    def teardown(self) -> None:
        if self.coord is not None:
            self.coord.close()
        if self.d is not None:
            self.d.e.close()

    def _count(self, name: str) -> None:
        self.stats["steps"] = self.stats.get("steps", 0) + 1
        self.stats[name] = self.stats.get(name, 0) + 1

    @property
    def drv(self) -> Driver:
        assert self.d is not None
        return self.d

    def _spend(self) -> Driver:
        self.expensive += 1
        return self.drv

    # ---- produce -------------------------------------------------------------------------------
    @precondition(_ready)
    @rule(drafts=drafts_st)
    def produce_plain(self, drafts: list[Draft]) -> None:
        self.drv.produce_plain(drafts)

    @precondition(_ready)
    @rule(pid=st.sampled_from(IDEMPOTENT_PIDS), drafts=drafts_st, new_epoch=new_epoch_st)
    def produce_idempotent(self, pid: int, drafts: list[Draft], new_epoch: bool) -> None:
        self.drv.produce_idempotent(pid, drafts, new_epoch)

    @precondition(_ready)
    @rule(pid=st.sampled_from(TXN_PIDS), drafts=drafts_st, new_epoch=new_epoch_st)
    def produce_transactional(self, pid: int, drafts: list[Draft], new_epoch: bool) -> None:
        self.drv.produce_transactional(pid, drafts, new_epoch)

    @precondition(lambda m: _ready(m) and m.drv.can_retry())
    @rule(choice=st.integers(0, 3))
    def retry_last_batch(self, choice: int) -> None:
        self.drv.retry_last_batch(choice)

    @precondition(lambda m: _ready(m) and m.drv.can_zombie())
    @rule(drafts=drafts_st)
    def zombie_produce(self, drafts: list[Draft]) -> None:
        self.drv.zombie_produce(drafts)

    @precondition(_ready)
    @rule(pid=st.sampled_from(TXN_PIDS), commit=st.booleans(), bump=st.sampled_from((False, False, True)))
    def end_transaction(self, pid: int, commit: bool, bump: bool) -> None:
        self.drv.end_transaction(pid, commit, bump)

    @precondition(_ready)
    @rule(tid=st.sampled_from(TIDS), drafts=drafts_st,
          op=st.sampled_from(("init", "produce", "commit", "commit", "abort", "abort", "expire", "restart",
                              "crash_commit", "crash_abort")))
    def coordinator(self, tid: str, op: str, drafts: list[Draft]) -> None:
        """A transactional producer and its coordinator."""
        c = self._coordinator()
        if op == "init":
            c.init(tid)
        elif op == "produce":
            c.produce(tid, drafts)
        elif op in ("commit", "abort", "crash_commit", "crash_abort"):
            c.end(tid, op.endswith("commit"), crash=op.startswith("crash"))
        elif op == "expire":
            c.expire()
        else:
            c.restart()

    @precondition(_ready)
    @rule(tid=st.sampled_from(TIDS), drafts=drafts_st)
    def coordinator_produce(self, tid: str, drafts: list[Draft]) -> None:
        """AddPartitionsToTxn and a transactional batch (InitProducerId first for a new transactional id)."""
        self._coordinator().produce(tid, drafts)

    def _coordinator(self) -> CoordinatorHarness:
        if self.coord is None:
            self.coord = CoordinatorHarness(self.drv)
        return self.coord

    # ---- log maintenance -----------------------------------------------------------------------
    @precondition(_ready)
    @rule()
    def roll(self) -> None:
        self.drv.roll()

    @precondition(lambda m: _can_spend(m) and m.spec.tiered)
    @rule()
    def tier(self) -> None:
        self._spend().tier()

    @precondition(_can_spend)
    @rule()
    def clean(self) -> None:
        self._spend().clean()

    @precondition(_can_spend)
    @rule(op=st.sampled_from(("retention", "force_roll", "leader_change", "restart", "background_round")))
    def maintain(self, op: str) -> None:
        """The rarer node operations, one rule so that producing stays the common step."""
        getattr(self._spend(), op)()

    @precondition(_ready)
    @rule(fraction=st.floats(0, 1), kind=st.sampled_from(("offset", "offset", "hw", "below", "beyond")))
    def delete_records(self, fraction: float, kind: str) -> None:
        self.drv.delete_records(fraction, kind)

    @precondition(_ready)
    @rule(fraction=st.floats(0, 1), committed=st.booleans())
    def read_from(self, fraction: float, committed: bool) -> None:
        self.drv.read_from(fraction, "read_committed" if committed else "read_uncommitted")

    @precondition(_ready)
    @rule(ms=st.sampled_from((1, 10, 500, 1000, 2500, 6000)))
    def advance_clock(self, ms: int) -> None:
        self.drv.advance_clock(ms)

    # ---- the check after every step -------------------------------------------------------------
    @invariant()
    def matches_model(self) -> None:
        if self.d is not None:
            self.d.assert_ok()


class TwoWriterMachine(PartitionMachine):
    """The Spark engine's machine: a second writer (a standalone Spark job on the same stores)
    publishes compactions between steps, which the node must follow."""

    @precondition(_can_spend)
    @rule()
    def external_publish(self) -> None:
        self._spend().external_publish()


def machine_for(spec: EngineSpec, *, expensive_budget: int | None = None, stats: dict[str, int] | None = None,
                **attrs: Any) -> type[PartitionMachine]:
    """A PartitionMachine class bound to one engine (the Spark engine's with a second writer)."""
    base = TwoWriterMachine if spec.kind == "spark" else PartitionMachine
    return type(f"PartitionMachine_{spec.kind}", (base,),
                {"spec": spec, "expensive_budget": expensive_budget, "stats": {} if stats is None else stats,
                 **attrs})
