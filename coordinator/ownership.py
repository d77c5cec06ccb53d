"""Which live node coordinates which key: keys hash to slots (Kafka's __consumer_offsets partitions), slots are claimed with an epoch.

A key maps to slot ``abs(java hashCode(key)) % N`` (Kafka's
``GroupMetadataManager.partitionFor`` / ``TransactionStateManager.partitionFor``, N =
``offsets.topic.num.partitions`` / ``transaction.state.log.num.partitions``, 50 by default). Each
slot's preferred owner is ``live[slot % len(live)]`` over the live broker ids of the cluster
registry, sorted. Every node runs :meth:`CoordinatorOwnership.reconcile` periodically:

- it claims (compare-and-swap on the epoch, :class:`metadata.coordinators.CoordinatorStore`) the
  slots it prefers whose owner is gone (no heartbeat, a different incarnation: a restart) or
  released; the slot is *loading* while the listeners' ``on_load`` runs, then *owned*;
- it hands off (``on_unload`` then release) the slots it holds that another live node prefers,
  so a node that joins gets its share (the coordinator moves, as when Kafka moves a partition
  leader);
- it drops (``on_unload``) the slots it finds claimed by someone else (its claim was superseded).

Writes of a coordinator carry its (broker, epoch) and are fenced in the store, so a node that
has not noticed it lost a slot yet cannot write for it.
"""

from __future__ import annotations

import enum
import logging
import threading
from collections.abc import Callable
from dataclasses import dataclass

from metadata.coordinators import CoordinatorClaim, CoordinatorStore

logger = logging.getLogger(__name__)

#: offsets.topic.num.partitions / transaction.state.log.num.partitions
DEFAULT_NUM_SLOTS = 50


def java_string_hash(s: str) -> int:
    """``String.hashCode()`` of Java: ``s[0]*31^(n-1) + ... + s[n-1]`` over UTF-16 code units, as int32."""
    h = 0
    data = s.encode("utf-16-be")
    for i in range(0, len(data), 2):
        h = (31 * h + ((data[i] << 8) | data[i + 1])) & 0xFFFFFFFF
    return h - (1 << 32) if h >= 1 << 31 else h


def slot_for(key: str, num_slots: int) -> int:
    """Kafka's ``Utils.abs(key.hashCode()) % numPartitions`` (abs of Integer.MIN_VALUE is 0)."""
    h = java_string_hash(key)
    return (0 if h == -(1 << 31) else abs(h)) % num_slots


class SlotStatus(enum.Enum):
    OWNED = "owned"
    LOADING = "loading"
    NOT_OWNER = "not_owner"


@dataclass(frozen=True)
class Ownership:
    """A key's slot as this node sees it: the owner (None: nobody live holds it) and, when it is us, our epoch."""

    slot: int
    owner: int | None
    status: SlotStatus
    epoch: int = -1


LoadFn = Callable[[int, int], None]
UnloadFn = Callable[[int], None]


class CoordinatorOwnership:
    """One kind's slots (``group`` or ``txn``) on this node; ``reconcile`` is the periodic round (``start`` runs it)."""

    def __init__(self, store: CoordinatorStore, kind: str, *, broker_id: int, incarnation: str,
                 live: Callable[[], dict[int, str]], now_ms: Callable[[], int],
                 num_slots: int = DEFAULT_NUM_SLOTS, interval_ms: int = 500) -> None:
        self.store = store
        self.kind = kind
        self.broker_id = broker_id
        self.incarnation = incarnation
        self.num_slots = num_slots
        self.interval_ms = interval_ms
        self._live = live
        self._now_ms = now_ms
        self._loads: list[LoadFn] = []
        self._unloads: list[UnloadFn] = []
        #: the last claims read, by slot (what FindCoordinator answers from)
        self._claims: dict[int, CoordinatorClaim] = {}
        self._live_ids: dict[int, str] = {}
        #: slots this node holds: slot -> (epoch, loaded)
        self._mine: dict[int, tuple[int, bool]] = {}
        self._round_lock = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self.rounds = 0
        self.moves = 0

    # ---- listeners -------------------------------------------------------------------
    def add_listener(self, on_load: LoadFn, on_unload: UnloadFn) -> None:
        """``on_load(slot, epoch)`` after a claim (before the slot answers as owned); ``on_unload(slot)`` before a
        hand-off or after losing it. Both run on the ownership thread and may block (store reads)."""
        self._loads.append(on_load)
        self._unloads.append(on_unload)

    # ---- lookups (any thread, no store access) ---------------------------------------
    def slot(self, key: str) -> int:
        return slot_for(key, self.num_slots)

    def lookup(self, key: str) -> Ownership:
        slot = self.slot(key)
        mine = self._mine.get(slot)
        if mine is not None:
            epoch, loaded = mine
            return Ownership(slot, self.broker_id, SlotStatus.OWNED if loaded else SlotStatus.LOADING, epoch)
        c = self._claims.get(slot)
        live = self._live_ids
        if c is None or c.released or live.get(c.broker_id) != c.incarnation:
            return Ownership(slot, None, SlotStatus.NOT_OWNER)
        return Ownership(slot, c.broker_id, SlotStatus.NOT_OWNER)

    def owned_slots(self) -> dict[int, int]:
        """The slots this node holds and has loaded: slot -> epoch."""
        return {s: e for s, (e, loaded) in list(self._mine.items()) if loaded}

    def epoch_of(self, slot: int) -> int | None:
        mine = self._mine.get(slot)
        return mine[0] if mine is not None and mine[1] else None

    # ---- the round -------------------------------------------------------------------
    def preferred_owner(self, slot: int, live_ids: list[int]) -> int:
        return live_ids[slot % len(live_ids)]

    def reconcile(self) -> None:
        """One round: claim what we prefer and nobody live holds, hand off what another live node prefers."""
        with self._round_lock:
            self._reconcile()
            self.rounds += 1

    def _reconcile(self) -> None:
        live = dict(self._live())
        live[self.broker_id] = self.incarnation
        ids = sorted(live)
        claims = self.store.claims(self.kind)
        self._claims = claims
        self._live_ids = live
        wanted: dict[int, int | None] = {}
        for slot in range(self.num_slots):
            c = claims.get(slot)
            preferred = self.preferred_owner(slot, ids)
            if c is not None and c.broker_id == self.broker_id and c.incarnation == self.incarnation:
                if preferred != self.broker_id:
                    self._hand_off(slot, c.epoch)
                elif slot not in self._mine or not self._mine[slot][1]:
                    self._load(slot, c.epoch)
                continue
            if slot in self._mine:  # superseded: someone else claimed it
                logger.warning("%s coordinator slot %d was taken over (epoch now %s); unloading", self.kind, slot,
                               None if c is None else c.epoch)
                self._unload(slot)
            owner_alive = c is not None and not c.released and live.get(c.broker_id) == c.incarnation
            if preferred == self.broker_id and not owner_alive:
                wanted[slot] = None if c is None else c.epoch
        if not wanted:
            return
        won = self.store.claim_many(self.kind, wanted, self.broker_id, self.incarnation, self._now_ms())
        self._claims = {**self._claims, **{c.slot: c for c in won}}
        for new in won:  # claimed (the others' claims are answered by them): now load each
            if wanted[new.slot] is not None:
                self.moves += 1
            self._load(new.slot, new.epoch)

    def _load(self, slot: int, epoch: int) -> None:
        self._mine[slot] = (epoch, False)
        try:
            for fn in self._loads:
                fn(slot, epoch)
        except Exception:  # noqa: BLE001 - stays loading; the next round retries
            logger.exception("loading %s coordinator slot %d failed; retrying next round", self.kind, slot)
            return
        self._mine[slot] = (epoch, True)

    def _unload(self, slot: int) -> None:
        self._mine.pop(slot, None)
        for fn in self._unloads:
            try:
                fn(slot)
            except Exception:  # noqa: BLE001 - unloading drops memory only
                logger.exception("unloading %s coordinator slot %d failed", self.kind, slot)

    def _hand_off(self, slot: int, epoch: int) -> None:
        self._unload(slot)
        if self.store.release(self.kind, slot, self.broker_id, epoch):
            self.moves += 1
            logger.info("%s coordinator slot %d handed off (epoch %d)", self.kind, slot, epoch)

    # ---- lifecycle -------------------------------------------------------------------
    def start(self) -> CoordinatorOwnership:
        self._thread = threading.Thread(target=self._run, name=f"tiercompact-{self.kind}-coordinators", daemon=True)
        self._thread.start()
        return self

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                self.reconcile()
            except Exception as e:  # noqa: BLE001 - a store outage: the next round retries
                logger.warning("%s coordinator round failed: %s", self.kind, e)
            self._stop.wait(self.interval_ms / 1000)

    def stop(self, *, release: bool = True) -> None:
        """Stop the rounds; with ``release``, hand every held slot back so another node claims it at once."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(10)
            self._thread = None
        with self._round_lock:
            for slot in list(self._mine):
                self._unload(slot)
            if release:
                try:
                    self.store.release_all(self.kind, self.broker_id, self.incarnation)
                except Exception as e:  # noqa: BLE001 - the claims then die with our heartbeat
                    logger.warning("could not release the %s coordinator slots: %s", self.kind, e)
