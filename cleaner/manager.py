"""Which partitions the cleaner works on, and their cleaning state (Kafka's LogCleanerManager).

State machine per partition (A.11)::

    none --grab--> IN_PROGRESS --done_cleaning--> none (checkpoint written)
    IN_PROGRESS --abort_and_pause--> ABORTED --(the cleaner notices)--> PAUSED(1)
    none --abort_and_pause / pause--> PAUSED(1);  PAUSED(n) --pause--> PAUSED(n+1)
    PAUSED(n) --resume--> PAUSED(n-1) ... none

A partition in any state is skipped by selection and by retention, so other components
(retention, the tiered cleaner, topic deletion, shutdown) call :meth:`abort_and_pause_cleaning`
before touching a partition's segments and :meth:`resume_cleaning` afterwards.
:meth:`abort_and_pause_cleaning` blocks until a running round has stopped.

A partition whose round raised an unexpected error is marked *uncleanable*: it is not selected
again until it is forgotten (:meth:`forget`, e.g. on topic deletion) or :meth:`clear_uncleanable`
is called.

The cleaner checkpoint (``cleaner-offset-checkpoint`` in the data dir) maps each partition to
its first dirty offset; it is only written by :meth:`done_cleaning` (after a successful swap) and
when the selection finds a checkpoint out of range.

Thread-safety: every method is thread-safe (one lock plus a condition for state waits). The
lock is ``cleaner.manager`` in the node's hierarchy (log/locks.py): taken under a
RemoteLogManager partition lock (local retention reads the checkpoint), and above the log
registry, the local logs and the checkpoint file. Nothing above it in the hierarchy is ever
called while it is held: tiered selection plans without it (see
:meth:`LogCleanerManager.grab_filthiest_compacted_log`), and the condition is only waited on
with no other lock held.
"""

from __future__ import annotations

import enum
import logging
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from cleaner.errors import CleanerStateError, LogCleaningAbortedError
from cleaner.log_to_clean import LogToClean, cleanable_offsets, max_compaction_delay
from cleaner.stats import PreCleanStats
from log.checkpoint import OffsetCheckpointFile
from log.clock import SYSTEM_CLOCK, Clock
from log.local_log import LocalLog
from log.locks import RANK_CLEANER_MANAGER, ordered_condition, ordered_rlock
from log.types import TopicPartition

logger = logging.getLogger(__name__)


class CleaningStateKind(enum.Enum):
    IN_PROGRESS = "in_progress"
    ABORTED = "aborted"
    PAUSED = "paused"


@dataclass(frozen=True, slots=True)
class CleaningState:
    kind: CleaningStateKind
    paused_count: int = 0

    def __post_init__(self) -> None:
        if (self.kind is CleaningStateKind.PAUSED) != (self.paused_count > 0):
            raise ValueError(f"{self.kind} with paused_count {self.paused_count}")


IN_PROGRESS = CleaningState(CleaningStateKind.IN_PROGRESS)
ABORTED = CleaningState(CleaningStateKind.ABORTED)


def paused(n: int) -> CleaningState:
    return CleaningState(CleaningStateKind.PAUSED, n)


class _StateTable(dict[TopicPartition, CleaningState]):
    """The cleaning states, plus a count of changes per partition (selection plans without
    the lock and checks afterwards that the partition's state did not change meanwhile)."""

    def __init__(self) -> None:
        super().__init__()
        self.changes: dict[TopicPartition, int] = {}

    def _touch(self, tp: TopicPartition) -> None:
        self.changes[tp] = self.changes.get(tp, 0) + 1

    def __setitem__(self, tp: TopicPartition, state: CleaningState) -> None:
        super().__setitem__(tp, state)
        self._touch(tp)

    def __delitem__(self, tp: TopicPartition) -> None:
        super().__delitem__(tp)
        self._touch(tp)

    def pop(self, tp: TopicPartition, *default: Any) -> Any:  # type: ignore[override]
        self._touch(tp)
        return super().pop(tp, *default)


class LogCleanerManager:
    def __init__(self, logs: Callable[[], Mapping[TopicPartition, LocalLog]], checkpoint_path: Path, *,
                 clock: Clock = SYSTEM_CLOCK,
                 offline: Callable[[], Iterable[TopicPartition]] = lambda: ()) -> None:
        self._logs = logs
        #: partitions that exist but could not be opened: their checkpoints are kept, not dropped
        self._offline = offline
        self._checkpoint = OffsetCheckpointFile(Path(checkpoint_path))
        self._clock = clock
        self._lock = ordered_rlock("cleaner.manager", RANK_CLEANER_MANAGER)
        self._cond = ordered_condition("cleaner.manager", RANK_CLEANER_MANAGER, self._lock)
        self._states = _StateTable()
        self._uncleanable: set[TopicPartition] = set()
        self._uncleanable_reasons: dict[TopicPartition, str] = {}  # why, when known (e.g. the corrupt batch)
        self._last_run_ms: int = clock.milliseconds()
        self.max_dirty_percent = 0
        self.pre_clean_stats = PreCleanStats()
        #: (tp, log, checkpoint, now) -> the tiered pool's LogToClean; set by a LogCleaner with tiering
        self.tiered_log_to_clean: Callable[[TopicPartition, LocalLog, int | None, int], Any] | None = None

    # ---- checkpoints -----------------------------------------------------------------
    def all_cleaner_checkpoints(self) -> dict[TopicPartition, int]:
        with self._lock:
            return self._checkpoint.read()

    def update_checkpoints(self, add: tuple[TopicPartition, int] | None = None,
                           remove: TopicPartition | None = None) -> None:
        """Rewrite the file keeping only partitions still in the log pool (or offline: a partition
        that failed to open keeps its checkpoint for when it is repaired), then apply the change."""
        with self._lock:
            live = set(self._logs()) | set(self._offline())
            cps = {tp: o for tp, o in self._checkpoint.read().items() if tp in live}
            if remove is not None:
                cps.pop(remove, None)
            if add is not None:
                cps[add[0]] = add[1]
            self._checkpoint.write(cps)

    def maybe_truncate_checkpoint(self, tp: TopicPartition, offset: int) -> None:
        """On log truncation: a checkpoint beyond ``offset`` becomes ``offset``."""
        with self._lock:
            log = self._logs().get(tp)
            if log is None or not log.config.compact:
                return
            cp = self._checkpoint.read().get(tp)
            if cp is not None and cp > offset:
                self.update_checkpoints(add=(tp, offset))

    # ---- selection -------------------------------------------------------------------
    def grab_filthiest_compacted_log(self, now: int | None = None, *, tiered: bool = False) -> LogToClean | None:
        """Pick the compacted log most in need of cleaning and mark it IN_PROGRESS (A.3.4).

        Eligible: cleanup.policy contains compact, no cleaning state, not uncleanable, and
        either past max.compaction.lag.ms with cleanable bytes, or dirty ratio strictly above
        min.cleanable.dirty.ratio. Order: see :meth:`LogToClean.priority` (KIP-354).

        Partitions with ``remote.storage.enable`` belong to the tiered pool (``tiered=True``,
        which needs :attr:`tiered_log_to_clean`): a local-only round on them would compact the
        local copies while the remote tier stays dirty, and local retention would then serve
        the dirty remote data.

        Locking (log/locks.py): the candidates are snapshotted under the manager's lock, their
        cleanable ranges computed without it (the tiered plan takes the RemoteLogManager's
        partition lock and reads the metadata store, both above this lock in the hierarchy),
        and the winner is marked IN_PROGRESS under the lock again, provided its state did not
        change meanwhile (a partition paused, cleaned or deleted in between is left for the
        next selection).
        """
        if tiered and self.tiered_log_to_clean is None:
            return None
        with self._lock:
            now = self._clock.milliseconds() if now is None else now
            self._last_run_ms = now
            checkpoints = self._checkpoint.read()
            candidates = [(tp, log, self._states.changes.get(tp, 0)) for tp, log in sorted(self._logs().items())
                          if log.config.compact and tp not in self._states and tp not in self._uncleanable
                          and log.config.remote_storage_enable == tiered]
        pre = PreCleanStats()
        dirty: list[tuple[LogToClean, int]] = []
        failed: list[tuple[TopicPartition, int]] = []
        for tp, log, version in candidates:
            try:
                if tiered:
                    assert self.tiered_log_to_clean is not None
                    ltc = self.tiered_log_to_clean(tp, log, checkpoints.get(tp), now)
                    if ltc is None:
                        continue
                else:
                    ltc = self.log_to_clean(tp, log, checkpoints.get(tp), now, pre)
            except Exception:
                logger.exception("%s: failed to compute its cleanable range; marking it uncleanable", tp)
                failed.append((tp, version))
                continue
            if ltc.total_bytes > 0:
                dirty.append((ltc, version))
        with self._lock:
            live = self._logs()

            def unchanged(tp: TopicPartition, log: LocalLog, version: int) -> bool:
                return (tp not in self._states and tp not in self._uncleanable and live.get(tp) is log
                        and self._states.changes.get(tp, 0) == version)

            for tp, version in failed:
                if live.get(tp) is not None and self._states.changes.get(tp, 0) == version:
                    self._uncleanable.add(tp)
            self.pre_clean_stats = pre
            self.max_dirty_percent = int(100 * max((x.cleanable_ratio for x, _ in dirty), default=0.0))
            cleanable = [x for x, v in dirty
                         if ((x.need_compaction_now and x.cleanable_bytes > 0)
                             or x.cleanable_ratio > float(x.log.config.get("min.cleanable.dirty.ratio")))
                         and unchanged(x.topic_partition, x.log, v)]
            pre.cleanable_partitions = len(cleanable)
            if not cleanable:
                return None
            best = max(cleanable, key=lambda x: x.priority())
            self._states[best.topic_partition] = IN_PROGRESS
            return best

    def log_to_clean(self, tp: TopicPartition, log: LocalLog, checkpoint: int | None, now: int,
                     pre: PreCleanStats | None = None) -> LogToClean:
        """The LogToClean of one log as of ``now`` (fixes an out-of-range checkpoint on the way)."""
        offs = cleanable_offsets(log, checkpoint, now)
        if offs.force_update_checkpoint:
            self.update_checkpoints(add=(tp, offs.first_dirty_offset))
        delay = max_compaction_delay(log, offs.first_dirty_offset, now)
        if pre is not None:
            pre.update_max_compaction_delay(delay)
        return LogToClean(tp, log, offs.first_dirty_offset, offs.first_uncleanable_dirty_offset,
                          need_compaction_now=delay > 0, now=now)

    def start_cleaning(self, tp: TopicPartition) -> None:
        """Mark ``tp`` IN_PROGRESS for a one-shot clean; raises if it already has a state."""
        with self._lock:
            state = self._states.get(tp)
            if state is not None:
                raise CleanerStateError(f"cleaning is {state.kind.value}; try again later", tp)
            self._states[tp] = IN_PROGRESS

    def deletable_logs(self) -> list[tuple[TopicPartition, LocalLog]]:
        """Logs retention may run on now (no cleaning state, not uncleanable); they are held IN_PROGRESS
        until :meth:`done_deleting`. Logs whose segments are tiered are left to the remote log manager.

        Deliberate difference from Kafka: every log whose cleanup.policy contains ``delete`` is
        returned here. Kafka's deletableLogs returns only compacted (``compact,delete``) logs and
        leaves pure ``delete`` logs to LogManager's retention thread; the segments removed are the
        same, only the thread running retention differs (README, "Deliberate differences")."""
        with self._lock:
            out = []
            for tp, log in sorted(self._logs().items()):
                if (log.config.delete and not log.config.remote_storage_enable
                        and tp not in self._states and tp not in self._uncleanable):
                    self._states[tp] = IN_PROGRESS
                    out.append((tp, log))
            return out

    def done_deleting(self, tps: list[TopicPartition]) -> None:
        with self._lock:
            for tp in tps:
                self._end_round(tp, "deleting")

    # ---- completing a round ------------------------------------------------------------
    def done_cleaning(self, tp: TopicPartition, end_offset: int | None) -> None:
        """Finish a round: write the checkpoint (IN_PROGRESS) or become PAUSED(1) (ABORTED).

        ``end_offset`` None means the round failed: no checkpoint is written.
        """
        with self._lock:
            if self._states.get(tp) is IN_PROGRESS and end_offset is not None:
                self.update_checkpoints(add=(tp, end_offset))
            self._end_round(tp, "cleaning")

    def _end_round(self, tp: TopicPartition, what: str) -> None:
        """IN_PROGRESS -> none, ABORTED -> PAUSED(1) (waking abort_and_pause); under the lock."""
        state = self._states.get(tp)
        if state is IN_PROGRESS:
            del self._states[tp]
        elif state is ABORTED:
            self._states[tp] = paused(1)
            self._cond.notify_all()
        else:
            raise CleanerStateError(f"done {what} in state {state}", tp)

    def mark_uncleanable(self, tp: TopicPartition, reason: str | None = None) -> None:
        with self._lock:
            self._uncleanable.add(tp)
            if reason:
                self._uncleanable_reasons[tp] = reason
            else:
                self._uncleanable_reasons.pop(tp, None)

    def clear_uncleanable(self, tp: TopicPartition) -> None:
        with self._lock:
            self._uncleanable.discard(tp)
            self._uncleanable_reasons.pop(tp, None)

    def uncleanable_reasons(self) -> dict[TopicPartition, str]:
        """Why each uncleanable partition was marked, where a reason was given."""
        with self._lock:
            marked = self.uncleanable_partitions()
            return {tp: r for tp, r in self._uncleanable_reasons.items() if tp in marked}

    def uncleanable_partitions(self) -> set[TopicPartition]:
        with self._lock:
            live = self._logs()
            self._uncleanable &= set(live)  # a deleted partition is forgotten
            return set(self._uncleanable)

    def uncleanable_bytes(self, now: int | None = None) -> int:
        """Cleanable bytes of the uncleanable partitions (Kafka's uncleanable-bytes gauge)."""
        now = self._clock.milliseconds() if now is None else now
        total = 0
        cps = self.all_cleaner_checkpoints()
        logs = self._logs()
        for tp in self.uncleanable_partitions():
            log = logs.get(tp)
            if log is None:
                continue
            try:
                offs = cleanable_offsets(log, cps.get(tp), now)
                total += LogToClean(tp, log, offs.first_dirty_offset, offs.first_uncleanable_dirty_offset).cleanable_bytes
            except Exception:  # a broken log must not break the metric
                logger.debug("uncleanable bytes of %s unavailable", tp, exc_info=True)
        return total

    def time_since_last_run_ms(self) -> int:
        with self._lock:
            return max(self._clock.milliseconds() - self._last_run_ms, 0)

    # ---- pausing -------------------------------------------------------------------------
    def state(self, tp: TopicPartition) -> CleaningState | None:
        with self._lock:
            return self._states.get(tp)

    def pause_cleaning(self, tp: TopicPartition) -> None:
        """none -> PAUSED(1), PAUSED(n) -> PAUSED(n+1); IN_PROGRESS/ABORTED wait via abort_and_pause."""
        self.abort_and_pause_cleaning(tp)

    def abort_and_pause_cleaning(self, tp: TopicPartition, timeout: float | None = None) -> None:
        """Stop any round on ``tp`` and keep it from starting until :meth:`resume_cleaning`.

        Blocks until a running round has noticed the abort (its state becomes PAUSED).
        """
        with self._cond:
            state = self._states.get(tp)
            if state is None:
                self._states[tp] = paused(1)
            elif state.kind is CleaningStateKind.PAUSED:
                self._states[tp] = paused(state.paused_count + 1)
            elif state is IN_PROGRESS:
                self._states[tp] = ABORTED
            if not self._cond.wait_for(lambda: self._is_paused(tp), timeout=timeout):
                raise CleanerStateError("timed out waiting for the running round to stop", tp)

    def _is_paused(self, tp: TopicPartition) -> bool:
        s = self._states.get(tp)
        return s is not None and s.kind is CleaningStateKind.PAUSED

    def resume_cleaning(self, tp: TopicPartition) -> None:
        with self._cond:
            state = self._states.get(tp)
            if state is None:
                raise CleanerStateError("resume cleaning of a partition that is not paused", tp)
            if state.kind is not CleaningStateKind.PAUSED:
                raise CleanerStateError(f"resume cleaning of a partition in state {state.kind.value}", tp)
            if state.paused_count == 1:
                del self._states[tp]
            else:
                self._states[tp] = paused(state.paused_count - 1)

    def abort_cleaning(self, tp: TopicPartition) -> None:
        """abort_and_pause then resume: stop a running round, keep the partition eligible."""
        self.abort_and_pause_cleaning(tp)
        self.resume_cleaning(tp)

    def pause_cleaning_for_non_compacted_partitions(self) -> list[tuple[TopicPartition, LocalLog]]:
        with self._lock:
            out = []
            for tp, log in sorted(self._logs().items()):
                if not log.config.compact and tp not in self._states:
                    self._states[tp] = paused(1)
                    out.append((tp, log))
            return out

    def check_cleaning_aborted(self, tp: TopicPartition) -> None:
        with self._lock:
            if self._states.get(tp) is ABORTED:
                raise LogCleaningAbortedError("cleaning aborted", tp)

    def forget(self, tp: TopicPartition) -> None:
        """A partition was deleted: drop its state, uncleanable mark and checkpoint."""
        with self._cond:
            self._states.pop(tp, None)
            self._uncleanable.discard(tp)
            self._cond.notify_all()
        self.update_checkpoints(remove=tp)
