"""``tiercompact dump-log``: Kafka's kafka-dump-log for segment and index files.

Output follows Kafka's DumpLogSegments, one line per batch::

    baseOffset: 0 lastOffset: 2 count: 3 baseSequence: -1 lastSequence: -1 producerId: -1
    producerEpoch: -1 partitionLeaderEpoch: 0 isTransactional: false isControl: false
    deleteHorizonMs: OptionalLong.empty position: 0 CreateTime: 1700000000000 size: 95 magic: 2
    compresscodec: none crc: 2312413 isvalid: true

(on one line) and, with ``print_records``, one ``| offset: ...`` line per record, control
records showing ``endTxnMarker: COMMIT coordinatorEpoch: 0``. ``.index``, ``.timeindex``
and ``.txnindex`` files print their entries. A batch that fails its CRC is printed with
``isvalid: false``; a structurally broken batch stops the walk; either way the file is
reported as corrupt with the byte position and :func:`dump_file` returns False.
"""

from __future__ import annotations

import struct
from collections.abc import Callable
from pathlib import Path

from log.checkpoint import LeaderEpochCheckpointFile
from log.errors import CorruptIndexError, CorruptRecordError
from log.index.key_index import KeyIndex
from log.producer_snapshot import decode_snapshot
from log.record import ControlRecordType, RecordBatch, decode_end_txn_marker_value, iter_file_batches
from log.types import TimestampType

Out = Callable[[str], None]


def _b(v: bool) -> str:
    return "true" if v else "false"


def _text(data: bytes | None) -> str:
    if data is None:
        return "null"
    return data.decode("utf-8", errors="backslashreplace")


def _ts_name(t: TimestampType) -> str:
    return "LogAppendTime" if t is TimestampType.LOG_APPEND_TIME else "CreateTime"


def batch_line(pos: int, b: RecordBatch) -> str:
    horizon = b.delete_horizon_ms
    return (f"baseOffset: {b.base_offset} lastOffset: {b.last_offset} count: {b.records_count} "
            f"baseSequence: {b.base_sequence} lastSequence: {b.last_sequence} producerId: {b.producer_id} "
            f"producerEpoch: {b.producer_epoch} partitionLeaderEpoch: {b.partition_leader_epoch} "
            f"isTransactional: {_b(b.is_transactional)} isControl: {_b(b.is_control)} "
            f"deleteHorizonMs: {'OptionalLong.empty' if horizon is None else f'OptionalLong[{horizon}]'} "
            f"position: {pos} {_ts_name(b.timestamp_type)}: {b.max_timestamp} size: {b.size_in_bytes} "
            f"magic: {b.magic} compresscodec: {b.compression.name.lower()} crc: {b.crc} "
            f"isvalid: {_b(b.is_valid())}")


def record_lines(b: RecordBatch) -> list[str]:
    out = []
    ts_name = _ts_name(b.timestamp_type)
    for r in b.records():
        head = (f"| offset: {r.offset} {ts_name}: {r.timestamp} keySize: {-1 if r.key is None else len(r.key)} "
                f"valueSize: {-1 if r.value is None else len(r.value)} sequence: {r.sequence} "
                f"headerKeys: [{','.join(k for k, _ in r.headers)}]")
        if b.is_control:
            ctype = ControlRecordType.parse(r.key)
            if ctype.is_transaction_marker:
                _, coordinator_epoch = decode_end_txn_marker_value(r.value)
                out.append(f"{head} endTxnMarker: {ctype.name} coordinatorEpoch: {coordinator_epoch}")
            else:
                out.append(f"{head} controlType: {ctype.name}")
            continue
        headers = " ".join(f"{k}={_text(v)}" for k, v in r.headers)
        line = f"{head} key: {_text(r.key)} payload: {_text(r.value)}"
        out.append(line + (f" headers: {headers}" if headers else ""))
    return out


def dump_log(path: Path, out: Out, *, print_records: bool = False) -> bool:
    """Print every batch of a ``.log`` file; False if a batch is corrupt."""
    out(f"Dumping {path}")
    base = base_offset_of(path.name)
    if base is not None:
        out(f"Log starting offset: {base}")
    ok = True
    try:
        for pos, batch in iter_file_batches(path):
            out(batch_line(pos, batch))
            if not batch.is_valid():
                ok = False
                out(f"Corrupt record batch at position {pos}: stored crc {batch.crc} != computed "
                    f"{batch.compute_checksum()}")
                continue
            if print_records:
                try:
                    for line in record_lines(batch):
                        out(line)
                except CorruptRecordError as e:
                    ok = False
                    out(f"Corrupt records in the batch at position {pos}: {e}")
    except CorruptRecordError as e:
        ok = False
        where = f" at position {e.position}" if e.position is not None else ""
        out(f"Corrupt record batch{where}: {e}")
    return ok


def _entries(path: Path, fmt: struct.Struct) -> tuple[list[tuple[int, ...]], int]:
    data = path.read_bytes()
    whole = len(data) - len(data) % fmt.size
    return [fmt.unpack_from(data, i) for i in range(0, whole, fmt.size)], len(data) - whole


def base_offset_of(name: str) -> int | None:
    """The base offset a segment file or remote object is named by, or None.

    Local files are ``<20-digit base offset>.<type>[.suffix]``; remote objects carry the
    segment id after the offset, ``<20-digit base offset>-<segment id>.<type>``
    (remote/storage_manager.py's key layout).
    """
    head = name.split(".", 1)[0]
    digits = head[:20]
    if len(digits) == 20 and digits.isdigit() and (len(head) == 20 or head[20] == "-"):
        return int(digits)
    return None


def _kind(name: str) -> str:
    """The file type (``log``, ``index``, ...) after the name's first dot."""
    return name.split(".", 1)[1].split(".")[0] if "." in name else ""


def dump_index(path: Path, out: Out) -> bool:
    out(f"Dumping {path}")
    base = base_offset_of(path.name)
    if base is None:
        raise ValueError(f"{path.name}: an index file is named by its segment's base offset "
                         f"(<20 digits>.index, or <20 digits>-<segment id>.index for a remote one); "
                         f"without it the relative offsets cannot be resolved")
    suffix = _kind(path.name)
    ok = True
    if suffix == "index":
        entries, extra = _entries(path, struct.Struct(">ii"))
        for rel, pos in entries:
            out(f"offset: {base + rel} position: {pos}")
    elif suffix == "timeindex":
        entries, extra = _entries(path, struct.Struct(">qi"))
        for ts, rel in entries:
            out(f"timestamp: {ts} offset: {base + rel}")
    else:
        entries, extra = _entries(path, struct.Struct(">hqqqq"))
        for version, pid, first, last, lso in entries:
            out(f"version: {version} producerId: {pid} firstOffset: {first} lastOffset: {last} "
                f"lastStableOffset: {lso}")
    if extra:
        ok = False
        out(f"Corrupt index: {extra} trailing bytes at position {path.stat().st_size - extra}")
    return ok


def dump_file(path: Path, out: Out, *, print_records: bool = False) -> bool:
    """Dump a .log/.index/.timeindex/.txnindex file (suffixes like ``.deleted`` allowed)."""
    kind = _kind(path.name)
    if kind == "log":
        return dump_log(path, out, print_records=print_records)
    if kind in ("index", "timeindex", "txnindex"):
        return dump_index(path, out)
    if kind == "snapshot":
        return dump_producer_snapshot(path, out)
    if kind == "leader_epoch_checkpoint" or path.name.startswith("leader-epoch-checkpoint"):
        return dump_epoch_checkpoint(path, out)
    if kind == "keyindex":
        return dump_key_index(path, out)
    raise ValueError(f"{path.name}: not a segment file (.log, .index, .timeindex, .txnindex, .snapshot, "
                     f".keyindex, leader-epoch-checkpoint)")


def dump_key_index(path: Path, out: Out) -> bool:
    """A remote segment's exact key index (log/index/key_index.py): its summary and hashes."""
    out(f"Dumping {path}")
    try:
        index = KeyIndex.from_bytes(path.read_bytes(), source=str(path))
    except CorruptIndexError as e:
        out(f"Corrupt key index: {e}")
        return False
    horizon = "none" if index.min_delete_horizon_ms is None else index.min_delete_horizon_ms
    out(f"entries: {len(index)} hashId: {index.hash_id} transactional: "
        f"{str(index.has_transactional_batches).lower()} minDeleteHorizonMs: {horizon}")
    for h in index.entries:
        out(f"keyHash: {int(h):016x}")
    return True


def dump_producer_snapshot(path: Path, out: Out) -> bool:
    """A ``.snapshot`` file (local, or a remote segment's) as Kafka's dumpProducerIdSnapshot lists it."""
    out(f"Dumping {path}")
    try:
        producers = decode_snapshot(path.read_bytes(), source=str(path))
    except CorruptRecordError as e:
        out(f"Corrupt producer snapshot: {e}")
        return False
    for pid, p in sorted(producers.items()):
        txn = "None" if p.current_txn_first_offset is None else p.current_txn_first_offset
        out(f"producerId: {pid} producerEpoch: {p.producer_epoch} coordinatorEpoch: {p.coordinator_epoch} "
            f"currentTxnFirstOffset: {txn} lastTimestamp: {p.last_timestamp} firstSequence: {p.first_sequence} "
            f"lastSequence: {p.last_sequence} lastOffset: {p.last_data_offset} "
            f"offsetDelta: {p.last_data_offset - p.first_data_offset if p.last_data_offset >= 0 else 0}")
    return True


def dump_epoch_checkpoint(path: Path, out: Out) -> bool:
    """A leader-epoch checkpoint (a partition's file or a remote segment's copy)."""
    out(f"Dumping {path}")
    try:
        entries = LeaderEpochCheckpointFile(path).read()
    except CorruptRecordError as e:
        out(f"Corrupt leader-epoch checkpoint: {e}")
        return False
    for entry in entries:
        out(f"epoch: {entry.epoch} startOffset: {entry.start_offset}")
    return True
