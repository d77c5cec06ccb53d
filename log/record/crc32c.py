"""CRC-32C (Castagnoli), the checksum of v2 record batches and producer snapshots.

Reflected polynomial 0x82F63B78, initial value and final XOR 0xFFFFFFFF (the iSCSI/ext4 CRC).
Computed in C by the ``crc32c`` package; it accepts any buffer, so callers pass memoryview
slices and no bytes are copied.
"""

from __future__ import annotations

from crc32c import crc32c as _crc32c


def crc32c(data: bytes | bytearray | memoryview, value: int = 0) -> int:
    """CRC-32C of ``data``; pass a previous result as ``value`` to continue over more bytes."""
    return _crc32c(data, value)
