"""Control records: the key of every control batch record and the end-transaction marker value.

Control record key (4 bytes)::

    version  int16   0
    type     int16   0 ABORT, 1 COMMIT, 2 LEADER_CHANGE, 3 SNAPSHOT_HEADER, 4 SNAPSHOT_FOOTER,
                     5 KRAFT_VERSION, 6 KRAFT_VOTERS; anything else is UNKNOWN (-1)

End-transaction marker value (6 bytes)::

    version           int16   0
    coordinatorEpoch  int32
"""

from __future__ import annotations

import enum
import struct

from log.errors import CorruptRecordError

_KEY = struct.Struct(">hh")
_MARKER = struct.Struct(">hi")

CONTROL_KEY_SIZE = _KEY.size
END_TXN_MARKER_VALUE_SIZE = _MARKER.size
CURRENT_CONTROL_RECORD_KEY_VERSION = 0
CURRENT_END_TXN_MARKER_VERSION = 0


class ControlRecordType(enum.IntEnum):
    UNKNOWN = -1
    ABORT = 0
    COMMIT = 1
    LEADER_CHANGE = 2
    SNAPSHOT_HEADER = 3
    SNAPSHOT_FOOTER = 4
    KRAFT_VERSION = 5
    KRAFT_VOTERS = 6

    @classmethod
    def parse(cls, key: bytes | bytearray | memoryview | None) -> ControlRecordType:
        """Type of a control record from its key; unknown types map to UNKNOWN like Kafka."""
        if key is None or len(key) < CONTROL_KEY_SIZE:
            raise CorruptRecordError(
                f"invalid control record key: {0 if key is None else len(key)} bytes, need {CONTROL_KEY_SIZE}"
            )
        version, type_id = _KEY.unpack_from(key, 0)
        if version < 0:
            raise CorruptRecordError(f"invalid control record key version {version}")
        try:
            return cls(type_id)
        except ValueError:
            return cls.UNKNOWN

    @property
    def is_transaction_marker(self) -> bool:
        return self is ControlRecordType.ABORT or self is ControlRecordType.COMMIT

    def key_bytes(self) -> bytes:
        if self is ControlRecordType.UNKNOWN:
            raise ValueError("cannot write a control record of type UNKNOWN")
        return _KEY.pack(CURRENT_CONTROL_RECORD_KEY_VERSION, int(self))


def encode_end_txn_marker_value(coordinator_epoch: int) -> bytes:
    return _MARKER.pack(CURRENT_END_TXN_MARKER_VERSION, coordinator_epoch)


def decode_end_txn_marker_value(value: bytes | bytearray | memoryview | None) -> tuple[int, int]:
    """``(version, coordinator_epoch)`` of an end-transaction marker value."""
    if value is None or len(value) < END_TXN_MARKER_VALUE_SIZE:
        raise CorruptRecordError(
            f"invalid end-transaction marker value: {0 if value is None else len(value)} bytes,"
            f" need {END_TXN_MARKER_VALUE_SIZE}"
        )
    version, epoch = _MARKER.unpack_from(value, 0)
    if version < 0:
        raise CorruptRecordError(f"invalid end-transaction marker version {version}")
    return version, epoch
