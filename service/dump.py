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

from log.errors import CorruptRecordError
from log.record import ControlRecordType, RecordBatch, decode_end_txn_marker_value, iter_file_batches
from log.segment import offset_from_filename
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
    try:
        out(f"Log starting offset: {offset_from_filename(path.name)}")
    except ValueError:
        pass
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


def dump_index(path: Path, out: Out) -> bool:
    out(f"Dumping {path}")
    base = offset_from_filename(path.name)
    suffix = path.name.split(".", 1)[1].split(".")[0]
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
    kind = path.name.split(".", 1)[1].split(".")[0] if "." in path.name else ""
    if kind == "log":
        return dump_log(path, out, print_records=print_records)
    if kind in ("index", "timeindex", "txnindex"):
        return dump_index(path, out)
    raise ValueError(f"{path.name}: not a segment file (.log, .index, .timeindex, .txnindex)")
