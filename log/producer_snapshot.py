"""Producer state snapshots ``<offset>.snapshot`` (Kafka's ProducerStateManager snapshot files).

Layout (big-endian; storage/src/main/resources/message/ProducerSnapshot.json, version 1)::

    | bytes | field                  |
    |-------|------------------------|
    | 0-1   | version int16 (1)      |
    | 2-5   | crc uint32             |  CRC-32C of bytes [6, end)
    | 6-9   | entryCount int32       |
    | 10-   | entries, 46 bytes each: producerId int64, epoch int16, lastSequence int32,
    |       |   lastOffset int64, offsetDelta int32, timestamp int64, coordinatorEpoch int32,
    |       |   currentTxnFirstOffset int64 (-1 = none)

The offset in the file name is the next offset the snapshot covers: the producer state after
every batch below it. An empty snapshot is ``0001 48674bc7 00000000``.
"""

from __future__ import annotations

import os
import struct
from pathlib import Path

from log.errors import CorruptRecordError
from log.producer_state import ProducerStateEntry
from log.record import crc32c

SNAPSHOT_SUFFIX = ".snapshot"
VERSION = 1
HEADER = struct.Struct(">hIi")
ENTRY = struct.Struct(">qhiqiqiq")


def snapshot_path(directory: Path, offset: int) -> Path:
    return Path(directory) / f"{offset:020d}{SNAPSHOT_SUFFIX}"


def encode_snapshot(producers: dict[int, ProducerStateEntry]) -> bytes:
    body = bytearray(struct.pack(">i", len(producers)))
    for pid in sorted(producers):
        e = producers[pid]
        delta = e.last_data_offset - e.first_data_offset if e.last_data_offset >= 0 else 0
        body += ENTRY.pack(pid, e.producer_epoch, e.last_sequence, e.last_data_offset, delta, e.last_timestamp,
                           e.coordinator_epoch, -1 if e.current_txn_first_offset is None else e.current_txn_first_offset)
    return struct.pack(">hI", VERSION, crc32c(bytes(body))) + bytes(body)


def decode_snapshot(data: bytes, *, source: str | None = None) -> dict[int, ProducerStateEntry]:
    if len(data) < HEADER.size:
        raise CorruptRecordError(f"producer snapshot of {len(data)} bytes is too short", source=source)
    version, crc, count = HEADER.unpack_from(data)
    if version != VERSION:
        raise CorruptRecordError(f"producer snapshot version {version} is not {VERSION}", source=source)
    if crc32c(data[6:]) != crc:
        raise CorruptRecordError("producer snapshot checksum mismatch", source=source)
    if count < 0 or len(data) != HEADER.size + count * ENTRY.size:
        raise CorruptRecordError(f"producer snapshot says {count} entries but holds {len(data) - HEADER.size} "
                                 f"bytes of them", source=source)
    out: dict[int, ProducerStateEntry] = {}
    for i in range(count):
        pid, epoch, last_seq, last_off, delta, ts, coord, txn_first = ENTRY.unpack_from(data, HEADER.size + i * 46)
        first_seq = last_seq - delta if last_seq >= 0 else -1
        out[pid] = ProducerStateEntry(pid, epoch, first_seq, last_seq, last_off - delta if last_off >= 0 else -1,
                                      last_off, ts, coord, None if txn_first < 0 else txn_first)
    return out


def write_snapshot(path: Path, producers: dict[int, ProducerStateEntry], *, sync: bool = True) -> None:
    """Write atomically (temp file, fsync, rename). Without ``sync`` the file is not fsynced (a roll: the log syncs
    it later, LocalLog.sync_rolled); a crash may then leave it empty or torn, which the loader reads as corrupt
    and skips for an older snapshot."""
    tmp = path.with_name(path.name + ".tmp")
    with open(tmp, "wb") as f:
        f.write(encode_snapshot(producers))
        if sync:
            f.flush()
            os.fsync(f.fileno())
    os.replace(tmp, path)


def list_snapshots(directory: Path) -> list[tuple[int, Path]]:
    """(offset, path) of every snapshot file, by offset."""
    out = []
    for p in Path(directory).glob("*" + SNAPSHOT_SUFFIX):
        stem = p.name[: -len(SNAPSHOT_SUFFIX)]
        if stem.isdigit():
            out.append((int(stem), p))
    return sorted(out)
