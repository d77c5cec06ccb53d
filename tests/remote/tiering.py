"""Shared helpers for the RemoteLogManager tests: a restartable tiering environment and a
producer that writes a mixed workload (codecs, keyless records, tombstones, headers,
committed and aborted transactions)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from log.clock import MockClock
from log.fetch import READ_COMMITTED, records_from_batches
from log.local_log import LocalLog, RecordSpec
from log.log_manager import LogManager
from log.record import CompressionType, ControlRecordType
from log.types import TopicPartition
from metadata.sql import SqlRemoteLogMetadataManager
from remote.file_store import FileObjectStore
from remote.log_manager import RemoteLogManager
from remote.object_store import ObjectStore
from remote.storage_manager import RemoteStorageManager
from tests.support.faults import FaultyObjectStore

TP = TopicPartition("orders", 0)
TIERED = {"remote.storage.enable": True, "cleanup.policy": "compact,delete", "segment.bytes": 1500,
          "retention.ms": -1, "local.retention.ms": 0}


class TierEnv:
    """LogManager + SQLite metadata file + (faulty) object store + RSM + RLM, restartable."""

    def __init__(self, root: Path, clock: MockClock, *, inner: ObjectStore | None = None, broker_id: int = 1,
                 cache_bytes: int = 1 << 20, chunk_bytes: int = 4096) -> None:
        self.root, self.clock, self.broker_id = root, clock, broker_id
        self.cache_bytes, self.chunk_bytes = cache_bytes, chunk_bytes
        self.inner = inner if inner is not None else FileObjectStore(root / "remote")
        self.store = FaultyObjectStore(self.inner)
        self.checkpoints: dict[TopicPartition, int] = {}
        self._open()

    def _open(self) -> None:
        self.lm = LogManager(self.root / "data", clock=self.clock)
        self.md = SqlRemoteLogMetadataManager(f"sqlite:///{self.root}/md/metadata.db", clock=self.clock)
        self.rsm = RemoteStorageManager(self.store, clock=self.clock, backoff_ms=1, max_attempts=3)
        self.rlm = self.make_rlm(self.broker_id)

    def make_rlm(self, broker_id: int, name: str = "cache") -> RemoteLogManager:
        return RemoteLogManager(self.lm, self.md, self.rsm, broker_id=broker_id, clock=self.clock,
                                cache_dir=self.root / f"{name}-{broker_id}", cache_bytes=self.cache_bytes,
                                cache_chunk_bytes=self.chunk_bytes, cleaner_checkpoint=self.checkpoints.get)

    def restart(self) -> None:
        """A process restart: every in-memory object is rebuilt from disk and the metadata DB."""
        self.rlm.close()
        self.lm.close()
        self.md.close()
        self._open()

    def create(self, tp: TopicPartition = TP, **config: Any) -> LocalLog:
        cfg = {**TIERED, **{k.replace("_", "."): v for k, v in config.items()}}
        self.lm.create_topic(tp.topic, tp.partition + 1, cfg)
        return self.lm.get_log(tp)

    def object_keys(self) -> list[str]:
        return sorted(self.inner.list(""))

    def close(self) -> None:
        self.rlm.close()
        self.lm.close()
        self.md.close()


@dataclass
class Workload:
    """What produce() wrote: the offsets of aborted data records (read_committed hides them)."""

    aborted_offsets: set[int]


CODECS = list(CompressionType)


def produce(log: LocalLog, batches: int = 60, *, clock: MockClock | None = None, txn_every: int = 7,
            seed_key: str = "k") -> Workload:
    """Batches of 1-4 records cycling through every codec; every ``txn_every``-th batch is a
    transaction (alternately committed and aborted, the marker written two batches later so
    transactions span batches and often segments); keyless records, tombstones and headers."""
    aborted: set[int] = set()
    open_txn: tuple[int, int, bool, list[int]] | None = None  # pid, due batch, abort?, offsets
    pid_seq = 1000
    for i in range(batches):
        if clock is not None:
            clock.advance(1)
        recs = []
        for j in range(1 + i % 4):
            key = None if (i + j) % 11 == 0 else f"{seed_key}{(i * 3 + j) % 17}".encode()
            value = None if (i + j) % 13 == 0 and key is not None else f"value-{i}-{j}".encode() * (1 + j)
            headers = (("h", f"{i}".encode()),) if j == 1 else ()
            recs.append(RecordSpec(key, value, headers=headers))
        codec = CODECS[i % len(CODECS)]
        if open_txn is None and i % txn_every == 3:
            pid_seq += 1
            r = log.append_records(recs, compression=codec, producer_id=pid_seq, producer_epoch=0,
                                   base_sequence=0, transactional=True)
            open_txn = (pid_seq, i + 2, (pid_seq % 2) == 0, list(range(r.base_offset, r.last_offset + 1)))
        else:
            log.append_records(recs, compression=codec)
        if open_txn is not None and i >= open_txn[1]:
            pid, _due, abort, offs = open_txn
            log.append_marker(pid, 0, ControlRecordType.ABORT if abort else ControlRecordType.COMMIT)
            if abort:
                aborted.update(offs)
            open_txn = None
    if open_txn is not None:
        pid, _due, abort, offs = open_txn
        log.append_marker(pid, 0, ControlRecordType.ABORT if abort else ControlRecordType.COMMIT)
        if abort:
            aborted.update(offs)
    return Workload(aborted)


def local_records(log: LocalLog, isolation: str) -> list[tuple]:
    """Every record as the local log reads it (the reference for tiered reads)."""
    start = log.log_start_offset
    batches = log.read(start, max_bytes=1 << 30,
                       max_offset=log.last_stable_offset if isolation == READ_COMMITTED else None)
    aborted = log.collect_aborted_transactions(start, log.log_end_offset + 1)
    res = records_from_batches(batches, start, isolation=isolation, aborted=aborted, max_records=10**9)
    return [as_tuple(r) for r in res.records]


def as_tuple(r: Any) -> tuple:
    return (r.offset, r.key, r.value, r.timestamp, r.headers)


def read_all(rlm: RemoteLogManager, tp: TopicPartition, isolation: str, *, start: int = 0,
             max_bytes: int = 700, max_records: int = 7) -> list[tuple]:
    """Consume from ``start`` to the high watermark (LSO for read_committed) in small fetches."""
    out: list[tuple] = []
    log = rlm.log_manager.get_log(tp)
    end = log.last_stable_offset if isolation == READ_COMMITTED else log.high_watermark
    off = start
    for _ in range(100_000):
        if off >= end:
            return out
        res = rlm.read(tp, off, max_bytes=max_bytes, isolation=isolation, max_records=max_records)
        assert res.next_offset > off or res.records, f"no progress at offset {off}"
        out.extend(as_tuple(r) for r in res.records)
        off = res.next_offset
    raise AssertionError("read loop did not finish")
