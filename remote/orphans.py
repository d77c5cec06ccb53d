"""Orphan objects: segment objects whose id the metadata store has never heard of.

Every writer but one registers a segment (COPY_SEGMENT_STARTED) *before* uploading it, so
its objects are always reachable from metadata and the deferred-delete loop
(:meth:`remote.log_manager.RemoteLogManager.delete_unreferenced`) cleans up after it. The
exception is the Spark offload (:mod:`cleaner.spark.job`): its executors upload rewritten
segments under ids the driver pre-generated, and the driver registers them only once it
knows their real sizes. A driver that dies in between leaves objects no metadata names.

:func:`sweep_orphan_objects` finds and deletes them. An object store has no portable
"last modified", so in-flight jobs protect their objects with a **lease**: before its tasks
upload, a job writes ``<topic>-<partition>/_leases/<job id>.json`` listing the segment ids it
will use (or the prefix every id it makes starts with: the job's tag) and when it (last) renewed
the lease; the job deletes the lease when it is done.
An object with an unknown id is deleted unless a lease younger than ``grace_ms`` names it;
leases older than that are deleted too (their job is presumed dead). ``grace_ms`` must
therefore exceed the time between two renewals of a running job (the Spark driver renews at
every stage boundary).

Race-freedom: the sweep lists objects first, then reads leases, then metadata. A registered
writer's id is in metadata before its first object exists; a Spark job's lease exists before
its first object and is deleted only after its ids are registered (or its objects removed).
So an object listed in step one is either named by a lease or by metadata read afterwards.

Where to call it: the Spark driver sweeps its partitions at job start. A service may also
sweep each tiered partition from its periodic loop next to ``RemoteLogManager.run_once``
(e.g. after the "deferred delete" step), with the same grace as its Spark jobs.
"""

from __future__ import annotations

import json
import logging
import re
from collections.abc import Collection, Iterable
from dataclasses import dataclass

from log.clock import Clock
from log.types import TopicPartition
from metadata.manager import RemoteLogMetadataManager
from metadata.types import RemoteLogSegmentState
from remote.errors import ObjectNotFoundError
from remote.object_store import ObjectStore

logger = logging.getLogger(__name__)

LEASE_DIR = "_leases"
#: ``<20-digit start offset>-<32 hex segment id>.<suffix>`` (RemoteStorageManager's layout)
_SEGMENT_OBJECT = re.compile(r"^\d{20}-([0-9a-f]{32})\.[A-Za-z_]+$")


@dataclass(frozen=True, slots=True)
class Lease:
    """A running job's claim on segment ids it is about to upload."""

    job_id: str
    renewed_ms: int
    segment_ids: frozenset[str]
    #: every id starting with one of these is claimed too (ids made on executors carry the job's tag)
    id_prefixes: frozenset[str] = frozenset()

    def __post_init__(self) -> None:
        if not re.fullmatch(r"[A-Za-z0-9_.-]{1,100}", self.job_id):
            raise ValueError(f"invalid lease job id {self.job_id!r}")
        if any(not re.fullmatch(r"[0-9a-f]{8,32}", p) for p in self.id_prefixes):
            raise ValueError(f"lease id prefixes are 8 to 32 lowercase hex digits, got {sorted(self.id_prefixes)}")

    def claims(self, segment_id: str) -> bool:
        return segment_id in self.segment_ids or any(segment_id.startswith(p) for p in self.id_prefixes)

    def to_bytes(self) -> bytes:
        doc: dict[str, object] = {"job_id": self.job_id, "renewed_ms": self.renewed_ms,
                                  "segment_ids": sorted(self.segment_ids)}
        if self.id_prefixes:
            doc["id_prefixes"] = sorted(self.id_prefixes)
        return json.dumps(doc).encode()

    @staticmethod
    def from_bytes(data: bytes) -> Lease:
        doc = json.loads(data)
        return Lease(str(doc["job_id"]), int(doc["renewed_ms"]), frozenset(str(s) for s in doc["segment_ids"]),
                     frozenset(str(p) for p in doc.get("id_prefixes", ())))


def lease_key(tp: TopicPartition, job_id: str) -> str:
    return f"{tp.dir_name}/{LEASE_DIR}/{job_id}.json"


def write_lease(store: ObjectStore, tp: TopicPartition, job_id: str, segment_ids: Iterable[str],
                clock: Clock, id_prefixes: Iterable[str] = ()) -> Lease:
    """Write (or renew) ``job_id``'s lease on ``segment_ids`` (and every id starting with one of
    ``id_prefixes``) for ``tp``."""
    lease = Lease(job_id, clock.milliseconds(), frozenset(segment_ids), frozenset(id_prefixes))
    store.put(lease_key(tp, job_id), lease.to_bytes())
    return lease


def release_lease(store: ObjectStore, tp: TopicPartition, job_id: str) -> None:
    store.delete(lease_key(tp, job_id))


def segment_id_of_key(tp: TopicPartition, key: str) -> str | None:
    """The segment id in a segment object's key, or None for any other key."""
    prefix = tp.dir_name + "/"
    if not key.startswith(prefix):
        return None
    m = _SEGMENT_OBJECT.match(key[len(prefix):])
    return m.group(1) if m else None


def sweep_orphan_objects(store: ObjectStore, rlmm: RemoteLogMetadataManager, tp: TopicPartition, *,
                         grace_ms: int, clock: Clock, protect: Collection[str] = ()) -> list[str]:
    """Delete ``tp``'s segment objects whose id no metadata row and no live lease names, and the
    objects of segments whose deletion finished (an upload that landed after it).

    ``protect`` adds ids the caller itself is about to use. Returns the deleted keys (orphan
    objects first, then expired leases). Keys that are neither segment objects nor leases are
    left alone.

    Raises:
        RemoteStorageError: listing or a delete failed (calling again is safe).
        MetadataStoreError: the metadata store failed.
    """
    if grace_ms < 0:
        raise ValueError(f"grace_ms must be >= 0, got {grace_ms}")
    prefix = tp.dir_name + "/"
    keys = list(store.list(prefix))  # 1. objects
    lease_prefix = f"{prefix}{LEASE_DIR}/"
    now = clock.milliseconds()
    protected = set(protect)
    live: list[Lease] = []
    expired: list[str] = []
    for key in store.list(lease_prefix):  # 2. leases
        try:
            lease = Lease.from_bytes(store.get(key))
        except ObjectNotFoundError:
            continue  # released meanwhile: its ids are registered or removed (read below)
        except (ValueError, KeyError, TypeError):
            logger.warning("%s: unreadable lease %s; treating it as expired", tp, key)
            expired.append(key)
            continue
        if now - lease.renewed_ms < grace_ms:
            live.append(lease)
        else:
            expired.append(key)
    # 3. metadata: every segment not yet deleted. Objects of a DELETE_SEGMENT_FINISHED segment are
    # dead (ids are never reused) and can still appear after the delete: a PUT the client gave
    # up on (timeout, dropped answer) may land in the store later (found by the soak).
    live_states = [st for st in RemoteLogSegmentState if st is not RemoteLogSegmentState.DELETE_SEGMENT_FINISHED]
    known = {md.id for md in rlmm.list_remote_log_segments(tp, include_superseded=True, states=live_states)}
    deleted: list[str] = []
    for key in keys:
        sid = segment_id_of_key(tp, key)
        if sid is None or sid in known or sid in protected or any(lease.claims(sid) for lease in live):
            continue
        store.delete(key)
        deleted.append(key)
    for key in expired:
        store.delete(key)
        deleted.append(key)
    if deleted:
        logger.info("%s: removed %d orphan objects/leases", tp, len(deleted))
    return deleted
