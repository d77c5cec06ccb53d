"""The ObjectStore checksum contract, on every backend (file://, moto in-process, moto over
HTTP): a put whose bytes do not have the caller's CRC-32C is refused with
RemoteStorageChecksumError and leaves nothing under the key; a matching one is stored as is,
for bytes, file paths and multipart-sized objects alike."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from remote.errors import RemoteStorageChecksumError
from remote.object_store import ChecksummedData, ObjectStore, source_crc32c
from remote.s3_store import MiB


@pytest.mark.parametrize("size", [0, 1, 70_000, 11 * MiB], ids=["empty", "1B", "70KB", "multipart"])
def test_a_matching_checksum_is_stored_and_a_wrong_one_refused(object_store: ObjectStore, tmp_path: Path,
                                                                size: int) -> None:
    data = os.urandom(size)
    src = tmp_path / "src.bin"
    src.write_bytes(data)
    crc = source_crc32c(src)
    assert crc == source_crc32c(data)

    with pytest.raises(RemoteStorageChecksumError) as ei:
        object_store.put("p/seg.log", ChecksummedData(src, crc ^ 0x5A5A5A5A))
    assert ei.value.retriable and ei.value.key == "p/seg.log"
    assert not object_store.exists("p/seg.log")
    assert list(object_store.list("p/")) == []

    assert object_store.put("p/seg.log", ChecksummedData(src, crc)) == size
    assert object_store.get("p/seg.log") == data
    assert object_store.put("p/seg2.log", ChecksummedData(data, crc)) == size
    assert object_store.get("p/seg2.log") == data


def test_a_plain_put_is_still_verified_against_what_was_read(object_store: ObjectStore) -> None:
    assert object_store.put("k", b"abc") == 3
    assert object_store.get("k") == b"abc"
