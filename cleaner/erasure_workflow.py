"""The erasure workflow: on-demand key erasure with a deadline and a receipt (tombstones, targeted rounds, prompt deletion).

``POST /v1/topics/{t}/erasures`` (:meth:`ErasureService.create`) appends a tombstone for each
key through the normal produce path, records which segments (local, remote, both) hold an
older record of each key, and stores the receipt in the metadata store. A background task
(:meth:`ErasureService.run_once`, every ``erasure_check_interval_ms`` and at once after a new
erasure) drives each partition it leads:

``pending``: roll the segment holding the tombstones and tier it (tiered partitions), wait
for ``min.compaction.lag.ms``, run a cleaning round now (ahead of dirty-ratio selection),
then, once no live segment holds an older record of any key, delete the replaced remote
objects (fenced, through the RemoteLogManager, without waiting for the deferred-delete loop)
and the replaced local files (``*.deleted``) that held one, verify (the live segments' key
indexes or scans rule the keys out; every deleted object answers "not found") and move to
``values_removed``. ``values_removed``: after ``delete.retention.ms`` more rounds until the
tombstones themselves are gone, their replaced copies deleted the same way -> ``complete``.

Receipt parts are written by the partition's leader only, fenced by its leader epoch for
tiered partitions: a leader that lost its epoch has its round and its progress rejected, and
the new leader, reading the same receipt from the metadata store, continues. A restart
continues the same way. Deadlines are watched (:meth:`ErasureService.at_risk`).

The workflow is given the node's narrow ports (:mod:`cleaner.ports`: produce, clean, topics
and logs, note an error), the remote tier's leadership and deletions, and the stores; the
HTTP routes and the CLI reach it as ``node.erasures``.
"""

from __future__ import annotations

import base64
import copy
import logging
import time
import uuid
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, Protocol

from cleaner.erasure import KeyLocator
from cleaner.errors import CleanerStateError, ErasureNotFoundError, ErasureRefusedError
from cleaner.ports import Clean, ErrorSink, Leadership, Partitions, Produce
from log.clock import Clock
from log.errors import InvalidRequestError, TiercompactError, UnknownTopicOrPartitionError
from log.local_log import LocalLog, RecordSpec
from log.locks import RANK_LEAF, ordered_lock
from log.segment import DELETED_SUFFIX
from log.types import TopicPartition
from metadata.erasures import (
    COMPLETE,
    FAILED,
    PENDING,
    VALUES_REMOVED,
    ErasureConfirmation,
    ErasurePartition,
    ErasureRecord,
)
from metadata.errors import FencedLeaderEpochError, NotLeaderForPartitionError
from metadata.store import MetadataStore
from metadata.types import RemoteLogSegmentMetadata
from remote.object_store import ObjectStore
from remote.orphans import sweep_orphan_objects
from remote.storage_manager import RemoteStorageManager

logger = logging.getLogger(__name__)

#: deadline of an erasure that names none and whose topic's max.compaction.lag.ms is unlimited
DEFAULT_DEADLINE_MS = 24 * 3600 * 1000
LONG_MAX = 2**63 - 1
#: an erasure is at risk once less than this share of its window is left (or it is overdue)
AT_RISK_FRACTION = 0.1
MAX_KEYS = 1000
#: least time between two rounds one erasure runs on one partition
MIN_ROUND_INTERVAL_MS = 500
#: wait after a round that could not run (the partition was busy or the round failed)
ROUND_RETRY_MS = 5_000


class _SegmentCache(Protocol):
    def invalidate_segment(self, segment_id: str) -> None: ...


class RemoteTier(Leadership, Protocol):
    """What the workflow asks of the RemoteLogManager: leadership, tiering the rolled
    segments now, fenced deletion of replaced segments now, the orphan grace and the cache."""

    orphan_object_grace_ms: int

    @property
    def cache(self) -> _SegmentCache: ...

    def copy_rolled_segments(self, tp: TopicPartition) -> list[RemoteLogSegmentMetadata]: ...

    def delete_replaced_now(self, tp: TopicPartition, segment_ids: Sequence[str]) -> dict[str, int]: ...


def _key_text(key: bytes, encoding: str) -> str:
    if encoding == "base64":
        return base64.b64encode(key).decode("ascii")
    return key.decode("utf-8", errors="replace")


class ErasureService:
    """See the module docstring. Thread-safe: its own state is a leaf lock's; the work runs
    on the node's erasure thread (or the caller's, in tests). ``wake`` starts that thread's
    next pass at once (after a new erasure)."""

    def __init__(self, *, partitions: Partitions, producer: Produce, cleaning: Clean, errors: ErrorSink,
                 remote: RemoteTier, metadata: MetadataStore, storage_manager: RemoteStorageManager,
                 object_store: ObjectStore, clock: Clock, broker_id: int, temp_dir: Path,
                 wake: Callable[[], None] = lambda: None, cluster: Callable[[], list[int]] = list) -> None:
        self.partitions = partitions
        self.producer = producer
        self.cleaning = cleaning
        self.errors = errors
        self.remote = remote
        self.metadata = metadata
        self.storage_manager = storage_manager
        self.object_store = object_store
        self.clock = clock
        self.broker_id = broker_id
        self.temp_dir = temp_dir
        self.wake = wake
        #: the broker ids registered in the cluster registry: each confirms a tiered part's removal
        self.cluster = cluster
        self._lock = ordered_lock("service.erasures", RANK_LEAF)
        self._next_round: dict[tuple[str, int], int] = {}

    # ---- the API -------------------------------------------------------------------------
    def create(self, topic: str, keys: list[bytes], *, encoding: str = "utf-8", partitions: list[int] | None = None,
               deadline_ms: int | None = None) -> ErasureRecord:
        t = self.partitions.topic(topic)
        if not keys:
            raise InvalidRequestError("keys is empty: name at least one key to erase")
        if len(keys) > MAX_KEYS:
            raise InvalidRequestError(f"{len(keys)} keys in one erasure; the limit is {MAX_KEYS}")
        if len(set(keys)) != len(keys):
            keys = list(dict.fromkeys(keys))
        parts = sorted(set(partitions)) if partitions is not None else list(range(t.partitions))
        for p in parts:
            if not 0 <= p < t.partitions:
                raise UnknownTopicOrPartitionError(f"topic {topic!r} has no partition {p} (it has {t.partitions})")
        logs = [self.partitions.log(topic, p) for p in parts]
        cfg = logs[0].config
        if not cfg.compact:
            raise ErasureRefusedError(
                f"topic {topic!r} has cleanup.policy={cfg.get('cleanup.policy')}: without 'compact' a tombstone "
                f"removes nothing, so no erasure deadline can be met; add 'compact' to cleanup.policy (PATCH "
                f"/v1/topics/{topic}/config) or delete the topic")
        now = self.clock.milliseconds()
        min_lag = max(int(cfg.get("min.compaction.lag.ms")), 0)
        earliest = now + min_lag
        if deadline_ms is None:
            max_lag = int(cfg.get("max.compaction.lag.ms"))
            deadline_ms = max(earliest + 60_000, now + (max_lag if max_lag < LONG_MAX // 2 else DEFAULT_DEADLINE_MS))
        if deadline_ms <= now:
            raise ErasureRefusedError(f"deadline_ms={deadline_ms} is in the past (now is {now})")
        if deadline_ms < earliest:
            raise ErasureRefusedError(
                f"deadline_ms={deadline_ms} cannot be met: topic {topic!r} has min.compaction.lag.ms={min_lag}, so "
                f"the tombstones appended now become compactable at {earliest} at the earliest. Ask for "
                f"deadline_ms >= {earliest}, or lower min.compaction.lag.ms first")
        for log in logs:  # a follower takes no records: refuse before anything is appended
            self.producer.check_leader_for_produce(log)
        erasure_id = uuid.uuid4().hex
        texts = [_key_text(k, encoding) for k in keys]
        records: list[ErasurePartition] = []
        for p, log in zip(parts, logs, strict=True):
            res = self.producer.produce(topic, p, [RecordSpec(k, None) for k in keys])
            offsets = {k: res.base_offset + i for i, k in enumerate(keys)}
            holdings = self._locator(log, offsets).live_holdings()
            detail = {"appended_ms": now, "broker_id": self.broker_id, "keys": [
                {"key": text, "tombstone_offset": offsets[k], "segments": [h.as_dict() for h in holdings[k]],
                 "rounds": [], "deleted": [], "verified_ms": None}
                for k, text in zip(keys, texts, strict=True)], "rounds": [], "notes": []}
            records.append(ErasurePartition(p, PENDING, now, detail))
        record = ErasureRecord(erasure_id, topic, now, deadline_ms, tuple(texts), encoding, tuple(records))
        self.metadata.create_erasure(record)
        logger.info("erasure %s of %d keys on %s %s created (deadline %d)", erasure_id, len(keys), topic, parts,
                    deadline_ms)
        self.wake()
        return record

    def get(self, erasure_id: str) -> ErasureRecord:
        rec = self.metadata.get_erasure(erasure_id)
        if rec is None:
            raise ErasureNotFoundError(f"no erasure {erasure_id!r}; GET /v1/erasures lists them")
        return rec

    def list_all(self, *, topic: str | None = None, limit: int = 1000) -> list[ErasureRecord]:
        return self.metadata.list_erasures(topic=topic, limit=limit)

    def receipt(self, rec: ErasureRecord) -> dict[str, Any]:
        """API.md's receipt shape (keys flattened over partitions, each naming its partition)."""
        now = self.clock.milliseconds()
        keys = []
        for part in rec.partitions:
            for k in part.detail.get("keys", []):
                keys.append({**k, "partition": part.partition})
        removed = [p.detail.get("values_removed_ms") for p in rec.partitions]
        # missed: a partition's values went after the deadline, or are still there past it
        missed = any((r if r is not None else now) > rec.deadline_ms for r in removed)
        confirmations: dict[int, list[dict[str, Any]]] = {}
        for c in self.metadata.erasure_confirmations(rec.erasure_id):
            confirmations.setdefault(c.partition, []).append(
                {"broker_id": c.broker_id, "confirmed_ms": c.confirmed_ms, "dropped": c.detail.get("dropped", [])})
        waiting = sorted({b for p in rec.partitions if p.state == PENDING for b in p.detail.get("waiting_for_nodes", [])})
        return {"erasure_id": rec.erasure_id, "topic": rec.topic, "state": rec.state, "deadline_ms": rec.deadline_ms,
                "created_ms": rec.created_ms, "encoding": rec.encoding, "time_left_ms": rec.deadline_ms - now,
                "deadline_missed": missed and rec.state != FAILED,
                "partitions": [{"partition": p.partition, "state": p.state, "updated_ms": p.updated_ms,
                                "values_removed_ms": p.detail.get("values_removed_ms"),
                                "complete_ms": p.detail.get("complete_ms"), "rounds": p.detail.get("rounds", []),
                                "verification": p.detail.get("verification"),
                                "notes": p.detail.get("notes", [])[-10:], "error": p.error,
                                "leader_removed_ms": p.detail.get("leader_removed_ms"),
                                "waiting_for_nodes": p.detail.get("waiting_for_nodes", []) if p.state == PENDING else [],
                                "confirmations": confirmations.get(p.partition, [])}
                               for p in rec.partitions],
                "keys": keys, "error": rec.error, "waiting_for_nodes": waiting}

    def summary(self, rec: ErasureRecord) -> dict[str, Any]:
        return {"erasure_id": rec.erasure_id, "topic": rec.topic, "state": rec.state, "deadline_ms": rec.deadline_ms,
                "created_ms": rec.created_ms, "keys": len(rec.keys),
                "partitions": [p.partition for p in rec.partitions], "error": rec.error}

    # ---- deadlines -----------------------------------------------------------------------
    def at_risk(self) -> list[dict[str, Any]]:
        """Unfinished erasures with less than AT_RISK_FRACTION of their window left, or overdue."""
        now = self.clock.milliseconds()
        out = []
        for rec in self.metadata.list_erasures(states=[PENDING]):
            if rec.state != PENDING:
                continue
            left = rec.deadline_ms - now
            if left < (rec.deadline_ms - rec.created_ms) * AT_RISK_FRACTION:
                out.append({"erasure_id": rec.erasure_id, "topic": rec.topic, "deadline_ms": rec.deadline_ms,
                            "time_left_ms": left, "overdue": left < 0,
                            # KIP-354's end-to-end delay, from the tombstones' append
                            "compaction_delay_ms": now - rec.created_ms,
                            "partitions": [p.partition for p in rec.partitions if p.state == PENDING]})
        return out

    def metrics(self) -> dict[str, float]:
        now = self.clock.milliseconds()
        pending = [r for r in self.metadata.list_erasures(states=[PENDING]) if r.state == PENDING]
        risk = self.at_risk()
        left = min((r.deadline_ms - now for r in pending), default=0)
        return {"erasures_pending_count": len(pending), "erasures_at_risk_count": len(risk),
                "erasures_overdue_count": sum(1 for r in risk if r["overdue"]),
                "erasure_min_time_left_secs": left / 1000.0}

    # ---- the work ------------------------------------------------------------------------
    def _locator(self, log: LocalLog, bounds: dict[bytes, int]) -> KeyLocator:
        tmp = self.temp_dir
        tmp.mkdir(parents=True, exist_ok=True)
        return KeyLocator(log, bounds, rlmm=self.metadata, rsm=self.storage_manager, temp_dir=tmp)

    def run_once(self, stop: Any = lambda: False) -> None:
        """One pass over every unfinished erasure part this node leads."""
        for rec in self.metadata.list_erasures(states=[PENDING, VALUES_REMOVED]):
            for part in rec.partitions:
                if stop():
                    return
                if part.state not in (PENDING, VALUES_REMOVED):
                    continue
                try:
                    self.step(rec, part)
                except FencedLeaderEpochError as e:
                    self.errors.note_error(e)  # counted once (fenced_operations_total)
                    self.remote.forget_leader(TopicPartition(rec.topic, part.partition))
                    logger.warning("erasure %s partition %d: fenced, the new leader continues: %s", rec.erasure_id,
                                   part.partition, e)
                except TiercompactError as e:
                    logger.warning("erasure %s partition %d: %s (retried)", rec.erasure_id, part.partition, e)

    def step(self, rec: ErasureRecord, part: ErasurePartition) -> ErasurePartition:
        """Advance one partition's part as far as it goes now; returns the part as stored."""
        # the node that appended the tombstones owns a partition without remote storage (nodes
        # sharing a metadata store do not share such partitions); a tiered one is its leader's
        owner = part.detail.get("broker_id", self.broker_id) == self.broker_id
        try:
            log = self.partitions.log(rec.topic, part.partition)
        except UnknownTopicOrPartitionError:
            if owner and self.metadata.leader_state(TopicPartition(rec.topic, part.partition)) is None:
                return self._save(rec, part, FAILED, copy.deepcopy(part.detail), None,
                                  error=f"topic {rec.topic!r} partition {part.partition} no longer exists")
            return part  # another node's partition
        tp = log.topic_partition
        tiered = log.config.remote_storage_enable
        epoch: int | None = None
        if not tiered and not owner:
            return part
        if tiered:
            try:
                if not self.remote.is_leader(tp):
                    return part
                epoch = self.remote.leader_epoch(tp)
            except NotLeaderForPartitionError:
                return part
        detail = copy.deepcopy(part.detail)
        now = self.clock.milliseconds()
        keys = {k["key"]: k for k in detail["keys"]}
        raw = {self._raw(k, rec.encoding): k for k in keys}
        if part.state == PENDING:
            if tiered and "leader_removed_ms" in detail:
                return self._await_cluster(rec, part, detail, epoch)
            bounds = {r: keys[t]["tombstone_offset"] for r, t in raw.items()}
            state = self._remove(rec, log, tiered, bounds, raw, keys, detail, now, values=True)
            if state is None:
                return self._save(rec, part, PENDING, detail, epoch) if detail != part.detail else part
            if tiered:  # gone from what this leader publishes: every registered node confirms next
                detail["leader_removed_ms"] = self.clock.milliseconds()
                return self._await_cluster(rec, self._save(rec, part, PENDING, detail, epoch), detail, epoch)
            detail["values_removed_ms"] = self.clock.milliseconds()
            logger.info("erasure %s partition %d: values removed", rec.erasure_id, part.partition)
            return self._save(rec, part, VALUES_REMOVED, detail, epoch)
        # values_removed: the tombstones go after delete.retention.ms
        retention = int(log.config.get("delete.retention.ms"))
        if now < int(detail.get("values_removed_ms", 0)) + retention:
            return part
        bounds = {r: keys[t]["tombstone_offset"] + 1 for r, t in raw.items()}
        state = self._remove(rec, log, tiered, bounds, raw, keys, detail, now, values=False)
        if state is None:
            return self._save(rec, part, VALUES_REMOVED, detail, epoch) if detail != part.detail else part
        detail["complete_ms"] = self.clock.milliseconds()
        logger.info("erasure %s partition %d: complete (tombstones gone)", rec.erasure_id, part.partition)
        return self._save(rec, part, COMPLETE, detail, epoch)

    def _await_cluster(self, rec: ErasureRecord, part: ErasurePartition, detail: dict[str, Any],
                       epoch: int | None) -> ErasurePartition:
        """values_removed once every node in the cluster registry confirmed, under its own id,
        that it holds and serves no copy of the listed segments (since the leader removed them)."""
        since = int(detail["leader_removed_ms"])
        confirmed = {c.broker_id for c in self.metadata.erasure_confirmations(rec.erasure_id)
                     if c.partition == part.partition and c.confirmed_ms >= since}
        if self.broker_id not in confirmed:  # the leader serves only the published segments, now rid of them
            self.metadata.confirm_erasure(rec.erasure_id, ErasureConfirmation(
                part.partition, self.broker_id, self.clock.milliseconds(), {"leader": True, "serves": False}))
        waiting = sorted(set(self.cluster()) - confirmed - {self.broker_id})
        if waiting:
            if detail.get("waiting_for_nodes") == waiting:
                return part
            detail["waiting_for_nodes"] = waiting
            self._note(detail, f"waiting for brokers {waiting} to confirm they hold no copy")
            return self._save(rec, part, PENDING, detail, epoch)
        detail["waiting_for_nodes"] = []
        detail["values_removed_ms"] = self.clock.milliseconds()
        logger.info("erasure %s partition %d: values removed (confirmed by every registered node)",
                    rec.erasure_id, part.partition)
        return self._save(rec, part, VALUES_REMOVED, detail, epoch)

    @staticmethod
    def _raw(text: str, encoding: str) -> bytes:
        return base64.b64decode(text) if encoding == "base64" else text.encode("utf-8")

    def _save(self, rec: ErasureRecord, part: ErasurePartition, state: str, detail: dict[str, Any],
              epoch: int | None, *, error: str | None = None) -> ErasurePartition:
        new = ErasurePartition(part.partition, state, self.clock.milliseconds(), detail, error)
        self.metadata.update_erasure_partition(rec.erasure_id, rec.topic, new, leader_epoch=epoch)
        return new

    def _note(self, detail: dict[str, Any], text: str) -> None:
        notes = list(detail.get("notes", []))
        notes.append(f"{self.clock.milliseconds()}: {text}")
        detail["notes"] = notes[-50:]

    def _remove(self, rec: ErasureRecord, log: LocalLog, tiered: bool, bounds: dict[bytes, int],
                raw: dict[bytes, str], keys: dict[str, dict[str, Any]], detail: dict[str, Any], now: int, *,
                values: bool) -> str | None:
        """Roll, tier, round, delete replaced copies, verify. Returns "done" once every key's
        records below its bound are gone from everywhere, else None (try again later)."""
        tp = log.topic_partition
        top = max(bounds.values())
        if values:  # the tombstones must leave the active segment (and be tiered) to be compacted
            with log.lock:
                if log.active_segment.base_offset <= top:  # the active segment holds a tombstone
                    log.roll()
            if tiered:
                self.remote.copy_rolled_segments(tp)
            min_lag = max(int(log.config.get("min.compaction.lag.ms")), 0)
            if now < int(detail.get("appended_ms", 0)) + min_lag:
                return None  # min.compaction.lag.ms: the tombstones may not be compacted yet
        slot = (rec.erasure_id, tp.partition)
        with self._lock:  # the scans below read every segment: not more often than a round may run
            if now < self._next_round.get(slot, 0):
                return None
            self._next_round[slot] = now + MIN_ROUND_INTERVAL_MS
        locator = self._locator(log, bounds)
        live = locator.live_holdings()
        if values:
            for r, hs in live.items():
                _merge_segments(keys[raw[r]]["segments"], hs)
        if any(live.values()):
            if not values:  # tombstone rounds wait for traffic: one a minute (or per delete.retention.ms)
                wait = max(MIN_ROUND_INTERVAL_MS, min(int(log.config.get("delete.retention.ms")), 60_000))
                with self._lock:
                    self._next_round[slot] = now + wait
            if not values:
                # a round needs dirty data to run (as in Kafka, tombstones past their horizon do
                # not make a log cleanable): records written since are rolled (and tiered) for it
                with log.lock:
                    if log.active_segment.size > 0:
                        log.roll()
                if tiered:
                    self.remote.copy_rolled_segments(tp)
            round_id = self._round(log, detail)
            if round_id is None:
                with self._lock:  # busy, failed: back off
                    self._next_round[slot] = max(self._next_round.get(slot, 0), now + ROUND_RETRY_MS)
                return None
            for r, hs in live.items():
                if hs and round_id not in keys[raw[r]]["rounds"]:
                    keys[raw[r]]["rounds"].append(round_id)
            live = locator.live_holdings()
            if any(live.values()):
                return None  # e.g. the offset map filled: the next round continues
        # nothing live holds a key: the replaced copies go now, not at the next retention pass
        deleted_ms = self._delete_replaced(tp, tiered, locator, raw, keys)
        verified = self._verify(tp, locator, raw, keys, deleted_ms)
        if not verified:
            return None
        stamp = self.clock.milliseconds()
        objects = sum(1 for e in keys.values() for d in e["deleted"] if "object" in d)
        detail["verification" if values else "tombstone_verification"] = {
            "verified_ms": stamp, **locator.checked, "deleted_objects_not_found": objects}
        for entry in keys.values():
            entry["verified_ms" if values else "tombstone_verified_ms"] = stamp
        return "done"

    def _round(self, log: LocalLog, detail: dict[str, Any]) -> str | None:
        """One cleaning round now; its round id, or None when it could not run (noted)."""
        tp = log.topic_partition
        started = self.clock.milliseconds()
        try:
            self.cleaning.clean(tp.topic, tp.partition)
        except FencedLeaderEpochError:
            raise
        except CleanerStateError as e:
            self._note(detail, f"round deferred: {e}")
            return None
        except TiercompactError as e:
            self._note(detail, f"round failed: {type(e).__name__}: {e}")
            logger.warning("%s: erasure round failed: %s", tp, e)
            return None
        reports = self.metadata.list_compaction_reports(tp, limit=10)
        mine = [r for r in reports if r.started_ms >= started - 1 and r.outcome == "completed"]
        round_id = mine[-1].round_id if mine else f"unreported-{started}"
        detail["rounds"] = [*detail.get("rounds", []), round_id]
        return round_id

    def _delete_replaced(self, tp: TopicPartition, tiered: bool, locator: KeyLocator, raw: dict[bytes, str],
                         keys: dict[str, dict[str, Any]]) -> dict[str, int]:
        """Delete the replaced remote segments and local files that hold a key; returns what was
        deleted (object key or file path -> time)."""
        out: dict[str, int] = {}
        if tiered:
            replaced = locator.replaced_remote()
            ids = sorted({m.id for ms in replaced.values() for m in ms})
            done = self.remote.delete_replaced_now(tp, ids)
            for r, ms in replaced.items():
                for md in ms:
                    when = done.get(md.id)
                    if when is None:
                        continue
                    for obj in self.storage_manager.object_keys(md):
                        out[obj] = when
                        keys[raw[r]]["deleted"].append({"object": obj, "segment_id": md.id, "deleted_ms": when})
            orphans = locator.orphan_objects()
            if any(orphans.values()):
                # the orphan sweep's own rules (objects a live Spark lease names stay until it
                # expires), now rather than at the next retention pass
                gone = set(sweep_orphan_objects(self.object_store, self.metadata, tp,
                                                grace_ms=self.remote.orphan_object_grace_ms, clock=self.clock))
                when = self.clock.milliseconds()
                for r, objs in orphans.items():
                    for obj in objs:
                        if obj in gone:
                            out[obj] = when
                            keys[raw[r]]["deleted"].append({"object": obj, "orphan": True, "deleted_ms": when})
        for r, paths in locator.replaced_local_files().items():
            for path in paths:
                base = path.name.split(".")[0]
                for f in sorted(path.parent.glob(f"{base}.*{DELETED_SUFFIX}")):
                    f.unlink(missing_ok=True)
                when = self.clock.milliseconds()
                out[str(path)] = when
                keys[raw[r]]["deleted"].append({"file": str(path), "deleted_ms": when})
        return out

    def _verify(self, tp: TopicPartition, locator: KeyLocator, raw: dict[bytes, str],
                keys: dict[str, dict[str, Any]], deleted: dict[str, int]) -> bool:
        """Every live segment rules the keys out (key index, else a scan), no replaced copy is
        left, and every object deleted for a key answers "not found"."""
        store = self.object_store
        if any(locator.live_holdings().values()):
            return False
        if any(locator.replaced_remote().values()) or any(locator.replaced_local_files().values()):
            return False
        if any(locator.orphan_objects().values()):  # a live lease protects them: wait for it
            return False
        for entry in keys.values():
            for sid in {d["segment_id"] for d in entry["deleted"] if d.get("segment_id")}:
                # a read that began before the deletion may have cached a chunk since: drop it again
                self.remote.cache.invalidate_segment(sid)
            for d in entry["deleted"]:
                obj = d.get("object")
                if obj is not None and store.exists(obj):
                    logger.warning("%s: deleted object %s still answers; verification fails", tp, obj)
                    return False
        return True


def _merge_segments(listed: list[dict[str, Any]], found: list[Any]) -> None:
    """Put every segment found holding a key on the receipt once: a segment is its offset
    range; one listed as local and found again after it was tiered keeps its first tier and
    gains its remote segment id (a rewrite makes a new range or a new id: a new entry)."""
    for h in found:
        same = [s for s in listed if s["base_offset"] == h.base_offset and s["end_offset"] == h.end_offset
                and (s.get("segment_id") in (None, h.segment_id))]
        if not same:
            listed.append(h.as_dict())
        elif same[0].get("segment_id") is None and h.segment_id is not None:
            same[0]["segment_id"] = h.segment_id


def wait_for(service: ErasureService, erasure_id: str, states: tuple[str, ...], timeout_s: float) -> ErasureRecord:
    """Poll until the erasure reaches one of ``states`` (tests and the CLI)."""
    deadline = time.monotonic() + timeout_s
    while True:
        rec = service.get(erasure_id)
        if rec.state in states or time.monotonic() > deadline:
            return rec
        time.sleep(0.2)
