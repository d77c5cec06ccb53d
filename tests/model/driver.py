"""One partition driven in lock-step on a real engine and on the reference model.

Every operation is applied to both and the engine's answer compared with the model's
(offsets assigned, duplicates, rejections); :meth:`Driver.check` reads both isolation levels
and returns every difference from the guarantees. The state machine (machine.py), the
differential test and the regression tests all go through this one class.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from log.errors import InvalidProducerEpochError, OffsetOutOfRangeError, PolicyViolationError
from tests.model.engines import Engine
from tests.model.partition_model import PartitionModel

KEYS = (b"a", b"b", b"c", b"d")
IDEMPOTENT_PIDS = (1, 2)
TXN_PIDS = (11, 12)
#: producer ids the transaction coordinator hands out (tests/model/coordinator.py) start here
COORDINATOR_PIDS_FROM = 101
CODECS = ("none", "gzip", "none", "lz4", "zstd", "snappy")

#: a record to produce before its value is assigned: (key, kind); kind 0 makes a keyed record a tombstone
Draft = tuple[bytes | None, int]


class ModelViolation(AssertionError):
    """The engine broke a guarantee the model states."""


class Driver:
    def __init__(self, engine: Engine, model: PartitionModel, *, page: int = 10_000) -> None:
        self.e = engine
        self.model = model
        self.page = page
        self.values = 0
        self.batches = 0
        #: called once per operation with its name (the state machine counts them)
        self.on_op: Callable[[str], None] = lambda name: None

    @property
    def now(self) -> int:
        return self.e.clock.milliseconds()

    def records(self, drafts: list[Draft]) -> list[tuple[bytes | None, bytes | None]]:
        out = []
        for key, kind in drafts:
            self.values += 1
            out.append((key, None if key is not None and kind == 0 else b"v%d" % self.values))
        return out

    def _append(self, recs: list[tuple[bytes | None, bytes | None]], *, kafka: bool = False, **kw: Any) -> None:
        """Produce ``recs`` as one batch; the batches cycle through every codec (compression
        changes no record, but the cleaner must rebuild compressed batches). With ``kafka``, every
        other round of codecs goes through the Kafka listener as a Kafka producer sends it instead."""
        want = self.model.append(recs, now=self.now, **kw)
        self.batches += 1
        codec = CODECS[self.batches % len(CODECS)]
        if kafka and (self.batches // len(CODECS)) % 2:  # every codec both ways, a round of them each
            self.on_op("kafka_produce")
            got = self.e.produce_kafka(recs, compression=codec, **kw)
        else:
            got = self.e.produce(recs, compression=codec, **kw)
        if (got.base_offset, got.last_offset, got.duplicate) != (want.base_offset, want.last_offset, want.duplicate):
            raise ModelViolation(f"append {recs} {kw}: engine {got}, model {want}")

    # ---- produce ---------------------------------------------------------------------------------
    def produce_plain(self, drafts: list[Draft]) -> None:
        self.on_op("produce_plain")
        recs = self.records(drafts)
        # a Kafka producer's batch, unless keyless: Kafka refuses those on a compacted topic (INVALID_RECORD)
        self._append(recs, kafka=all(k is not None for k, _v in recs))

    def _next(self, pid: int, new_epoch: bool) -> tuple[int, int]:
        """(epoch, base sequence) of the producer's next batch; ``new_epoch``: the producer
        re-initialised (InitProducerId) and starts its next epoch at sequence 0, unless it is
        inside a transaction (which a real producer must end first)."""
        p = self.model.producers.get(pid)
        if p is None:
            return 0, 0
        if new_epoch and not p.open_txn:
            return p.epoch + 1, 0
        return p.epoch, p.next_sequence

    def produce_idempotent(self, pid: int, drafts: list[Draft], new_epoch: bool = False) -> None:
        self.on_op("produce_idempotent")
        epoch, seq = self._next(pid, new_epoch)
        recs = self.records(drafts)
        self._append(recs, kafka=all(k is not None for k, _v in recs), producer_id=pid, producer_epoch=epoch,
                     base_sequence=seq)

    def produce_transactional(self, pid: int, drafts: list[Draft], new_epoch: bool = False) -> None:
        self.on_op("produce_transactional")
        epoch, seq = self._next(pid, new_epoch)
        self._append(self.records(drafts), producer_id=pid, producer_epoch=epoch, base_sequence=seq,
                     transactional=True)

    def can_retry(self) -> bool:
        return any(p.last_batch is not None for p in self.model.producers.values())

    def retry_last_batch(self, choice: int) -> None:
        """A producer resends its last batch (a lost ack): a duplicate, nothing is appended."""
        self.on_op("retry_last_batch")
        ps = sorted((p for p in self.model.producers.values() if p.last_batch is not None),
                    key=lambda p: p.producer_id)
        p = ps[choice % len(ps)]
        assert p.last_batch is not None
        seq, _n, _first, _last, recs = p.last_batch
        self._append(list(recs), producer_id=p.producer_id, producer_epoch=p.epoch, base_sequence=seq,
                     transactional=p.producer_id in TXN_PIDS or p.producer_id >= COORDINATOR_PIDS_FROM)

    def can_zombie(self) -> bool:
        return any(p.epoch > 0 for p in self.model.producers.values())

    def zombie_produce(self, drafts: list[Draft]) -> None:
        """A producer with a superseded epoch is fenced: the engine must reject its batch."""
        self.on_op("zombie_produce")
        p = min((p for p in self.model.producers.values() if p.epoch > 0), key=lambda p: p.producer_id)
        try:
            r = self.e.produce(self.records(drafts), producer_id=p.producer_id, producer_epoch=p.epoch - 1,
                               base_sequence=0,
                               transactional=p.producer_id in TXN_PIDS or p.producer_id >= COORDINATOR_PIDS_FROM)
        except InvalidProducerEpochError:
            return
        raise ModelViolation(f"a batch of producer {p.producer_id} at fenced epoch {p.epoch - 1} was appended: {r}")

    def end_transaction(self, pid: int, commit: bool, bump: bool = False) -> None:
        """The coordinator's COMMIT/ABORT marker (at a bumped epoch, fencing the producer's old one)."""
        self.on_op("commit" if commit else "abort")
        p = self.model.producers.get(pid)
        epoch = (p.epoch if p else 0) + (1 if bump else 0)
        want = self.model.end_transaction(pid, epoch, commit=commit)
        got = self.e.marker(pid, epoch, commit)
        if got != want:
            raise ModelViolation(f"marker offset: engine {got}, model {want}")

    # ---- log maintenance ---------------------------------------------------------------------------
    def roll(self) -> None:
        self.on_op("roll")
        self.e.roll()

    def force_roll(self) -> None:
        """KIP-354: an active segment older than max.compaction.lag.ms must be rolled."""
        self.on_op("force_roll")
        _base, first = self.e.active_segment()
        due = self.model.roll_due(first, self.now)
        rolled = self.e.force_roll()
        if due and not rolled:
            raise ModelViolation(f"the active segment starting at {first} is older than max.compaction.lag.ms="
                                 f"{self.model.max_compaction_lag_ms} but was not rolled")

    def tier(self) -> None:
        self.on_op("tier")
        self.e.tier()

    def retention(self) -> None:
        self.on_op("retention")
        self.e.retention()

    def clean(self, run: Callable[[], Any] | None = None) -> None:
        """One round now (``run``: another way to run it, e.g. a Spark job); afterwards no key
        may appear twice in read_committed below the new cleaner checkpoint."""
        self.on_op("clean")
        base, _first = self.e.active_segment()
        self.model.clean(self.now, active_segment_base=base)
        (run or self.e.clean)()
        self._check_compacted()

    def external_publish(self) -> None:
        """Another writer publishes a compaction between steps (a standalone Spark job) and the
        node follows it: the same guarantees as :meth:`clean` once it has."""
        self.on_op("external_publish")
        base, _first = self.e.active_segment()
        self.model.clean(self.now, active_segment_base=base)
        self.e.external_publish()
        self._check_compacted()

    def background_round(self) -> None:
        """What a background cleaner thread does next: if it picks this partition (dirty ratio
        or max.compaction.lag.ms), a round with the same guarantees as :meth:`clean`."""
        self.on_op("background_round")
        base, _first = self.e.active_segment()
        now = self.now
        if self.e.background_round():
            self.model.clean(now, active_segment_base=base)
            self._check_compacted()

    def _check_compacted(self) -> None:
        checkpoint = self.e.checkpoint()
        if checkpoint is not None:
            dups = self.model.duplicate_keys_below(self.e.read_all("read_committed"), checkpoint)
            if dups:
                raise ModelViolation(f"after a clean, keys appear more than once below the cleaner checkpoint "
                                     f"{checkpoint}: {dups}")

    def delete_records(self, fraction: float, kind: str) -> None:
        """A client's DeleteRecords: an offset between the log start and the high watermark, -1 (the
        high watermark), one below the start (moves nothing) or one past the high watermark
        (OFFSET_OUT_OF_RANGE); a topic without cleanup.policy=delete refuses it (POLICY_VIOLATION)."""
        self.on_op("delete_records")
        m = self.model
        hw, start = m.high_watermark, m.deleted_below
        offset = {"hw": -1, "beyond": hw + 1, "below": max(start - 1, 0)}.get(kind, start + int(fraction * (hw - start)))
        try:
            got = self.e.delete_records(offset)
        except PolicyViolationError:
            if m.deletable:
                raise ModelViolation(f"DeleteRecords({offset}) refused on a topic with cleanup.policy=delete") from None
            return
        except OffsetOutOfRangeError:
            if m.deletable and m.delete_records(offset) is not None:
                raise ModelViolation(f"DeleteRecords({offset}) refused as out of range; HW {hw}") from None
            return
        want = m.delete_records(offset) if m.deletable else None
        if want is None:
            raise ModelViolation(f"DeleteRecords({offset}) was accepted (start {got}); the model refuses it "
                                 f"(HW {hw}, cleanup.policy with delete: {m.deletable})")
        if got < want or got != self.e.log_start_offset():
            raise ModelViolation(f"DeleteRecords({offset}): the engine's log start is {got} (now "
                                 f"{self.e.log_start_offset()}), the model's {want}")

    def leader_change(self) -> None:
        self.on_op("leader_change")
        self.e.leader_change()

    def restart(self) -> None:
        self.on_op("restart")
        self.e.restart()

    def advance_clock(self, ms: int) -> None:
        self.on_op("advance_clock")
        self.e.clock.advance(ms)

    def read_from(self, fraction: float, isolation: str, max_records: int = 3) -> None:
        """A consumer that seeks to an offset (a fraction of the way through the log) reads the
        records of the full read at or after it, in order: an offset that compaction removed
        reads as the next one present."""
        self.on_op("read_from")
        start = self.e.log_start_offset()
        full = self.e.read_all(isolation, 10_000, start)
        leo, lso, hw = self.e.offsets()
        upper = lso if isolation == "read_committed" else hw
        offset = start + int(fraction * (upper - start))
        if offset >= upper:
            return
        want = [o for o in full if o[0] >= offset]
        res = self.e.node.read(self.e.topic, 0, offset, max_records=max_records, isolation=isolation)
        got = [(r.offset, r.key, r.value, r.timestamp) for r in res.records]
        if (want and not got) or got != want[:len(got)] or len(got) > max_records:
            raise ModelViolation(f"{isolation} from offset {offset} (max {max_records}) read {got}; the full read "
                                 f"from the log start has {want[:max_records]} there")
        if got and res.next_offset <= got[-1][0]:
            raise ModelViolation(f"{isolation} from offset {offset}: next offset {res.next_offset} after {got[-1]}")

    # ---- checking ------------------------------------------------------------------------------------
    def observe(self) -> tuple[list[Any], list[Any]]:
        start = self.e.log_start_offset()
        return (self.e.read_all("read_uncommitted", self.page, start),
                self.e.read_all("read_committed", self.page, start))

    def check(self) -> list[str]:
        """Offsets (log end, LSO, HW), both isolation levels, and their consistency."""
        m = self.model
        errors = []
        leo, lso, hw = self.e.offsets()
        if (leo, lso, hw) != (m.log_end_offset, m.last_stable_offset, m.high_watermark):
            errors.append(f"(log end, LSO, HW): engine {(leo, lso, hw)}, model "
                          f"{(m.log_end_offset, m.last_stable_offset, m.high_watermark)}")
        uncommitted, committed = self.observe()
        errors += m.check(uncommitted, "read_uncommitted")
        errors += m.check(committed, "read_committed")
        errors += m.check_isolation_consistency(uncommitted, committed)
        return errors

    def assert_ok(self) -> None:
        errors = self.check()
        if errors:
            raise ModelViolation("\n".join(errors[:20]))
