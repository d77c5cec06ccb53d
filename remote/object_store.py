"""ObjectStore: the minimal blob-store contract tiered storage needs.

Implementations: :mod:`remote.file_store` (``file://DIR``, the embedded default) and
:mod:`remote.s3_store` (``s3://bucket/prefix``). Keys are ``/``-separated relative paths
(``orders-0/00000000000000000000-<id>.log``); see :func:`validate_key`.

Contract shared by every implementation (checked by tests/contract/test_object_store.py):
  * writes are atomic: a reader sees the whole new object or the previous one, never a part;
  * ``put`` overwrites; ``delete`` of a missing key is not an error;
  * every failure is a :class:`~remote.errors.RemoteStorageError` naming the key;
  * a ``put`` is verified by checksum before it returns: the caller may pass the source's
    CRC-32C (:class:`ChecksummedData`), and the store checks that what it holds has it
    (and, without one, that what it holds is what it read); a mismatch removes the
    object and raises :class:`~remote.errors.RemoteStorageChecksumError`;
  * stores are thread-safe and picklable (Spark executors receive them).
"""

from __future__ import annotations

import io
import os
from abc import ABC, abstractmethod
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO

from log.errors import InvalidRequestError
from log.record.crc32c import crc32c
from remote.errors import RemoteStorageIOError

Source = bytes | bytearray | memoryview | BinaryIO | str | os.PathLike[str]


@dataclass(frozen=True, slots=True)
class ChecksummedData:
    """Upload data with the CRC-32C its bytes must have, computed by the caller from the
    source (end to end: corruption anywhere between the caller and the store's disk or
    wire is caught). Wrappers pass it through unchanged."""

    data: Source
    crc32c: int

    def __post_init__(self) -> None:
        if isinstance(self.data, ChecksummedData) or not 0 <= self.crc32c <= 0xFFFFFFFF:
            raise InvalidRequestError(f"invalid checksummed upload (crc32c={self.crc32c!r})")


PutData = Source | ChecksummedData

_CHUNK = 1 << 20


def source_crc32c(src: bytes | bytearray | memoryview | str | os.PathLike[str]) -> int:
    """CRC-32C of bytes or of a local file's content (streamed)."""
    if isinstance(src, bytes | bytearray | memoryview):
        return crc32c(src)
    value = 0
    with open(src, "rb") as f:
        while chunk := f.read(_CHUNK):
            value = crc32c(chunk, value)
    return value


def split_checksum(data: PutData) -> tuple[Source, int | None]:
    """(the data, the caller's expected CRC-32C or None)."""
    if isinstance(data, ChecksummedData):
        return data.data, data.crc32c
    return data, None


def validate_key(key: str) -> str:
    """Return ``key`` if it is a safe relative object key, else raise InvalidRequestError.

    Rejects empty keys, absolute keys, ``.``/``..``/empty components, backslashes and NULs,
    so a key can never escape a ``file://`` root.
    """
    if not isinstance(key, str) or not key:
        raise InvalidRequestError(f"invalid object key {key!r}: must be a non-empty string")
    if key.startswith("/") or "\\" in key or "\x00" in key:
        raise InvalidRequestError(f"invalid object key {key!r}: must be relative, without '\\' or NUL")
    for part in key.split("/"):
        if part in ("", ".", ".."):
            raise InvalidRequestError(f"invalid object key {key!r}: empty, '.' or '..' path component")
    return key


def open_put_data(data: PutData) -> tuple[BinaryIO, int | None, bool]:
    """Normalise ``put`` input to (readable binary stream, size if known, whether we opened it).
    A :class:`ChecksummedData` is unwrapped (use :func:`split_checksum` to keep the checksum)."""
    data, _ = split_checksum(data)
    if isinstance(data, bytes | bytearray | memoryview):
        b = bytes(data)
        return io.BytesIO(b), len(b), True
    if isinstance(data, str | os.PathLike):
        p = Path(data)
        f = p.open("rb")
        return f, os.fstat(f.fileno()).st_size, True
    size: int | None = None
    try:
        pos = data.tell()
        size = data.seek(0, os.SEEK_END) - pos
        data.seek(pos)
    except (OSError, AttributeError, io.UnsupportedOperation):
        size = None
    return data, size, False



def open_upload(key: str, data: PutData) -> tuple[BinaryIO, bool, int | None]:
    """``put``'s first step in every store: (stream to read, whether we opened it (close it
    after), the caller's expected CRC-32C or None); an unreadable source is a
    RemoteStorageIOError naming ``key``."""
    source, expected = split_checksum(data)
    try:
        stream, _size, owned = open_put_data(source)
    except OSError as e:
        raise RemoteStorageIOError(f"cannot read upload source for {key!r}: {e}", key=key) from None
    return stream, owned, expected

class ObjectStore(ABC):
    """A flat key -> bytes store (see the module docstring for the shared contract)."""

    #: whether :meth:`put` itself verifies what the store holds (and raises otherwise), so
    #: callers need not read the size back; a wrapper that cannot promise it says False
    verifies_writes: bool = False

    @property
    @abstractmethod
    def url(self) -> str:
        """The URL this store was opened from (``file:///abs/dir``, ``s3://bucket/prefix``)."""

    @abstractmethod
    def put(self, key: str, data: PutData) -> int:
        """Write ``data`` (bytes, a readable binary stream read to its end, or a file path,
        optionally wrapped in :class:`ChecksummedData`) under ``key``, replacing any existing
        object, atomically. Returns the bytes written. The write is checksum-verified before
        this returns (see the module docstring).

        Raises:
            RemoteStorageChecksumError: what the store holds does not have the expected
                checksum; nothing stays under ``key`` (retriable).
            RemoteStorageTransientError: a retry may succeed (nothing was written).
            RemoteStorageIOError: the write failed or could not be verified; nothing partial
                remains under ``key``.
            InvalidRequestError: the key is not valid (see :func:`validate_key`).
        """

    def put_file(self, key: str, path: str | os.PathLike[str]) -> int:
        """Upload the local file ``path`` to ``key``; same contract as :meth:`put`."""
        return self.put(key, Path(path))

    @abstractmethod
    def get(self, key: str) -> bytes:
        """The whole object.

        Raises:
            ObjectNotFoundError: no object under ``key``.
            RemoteStorageTransientError / RemoteStorageIOError: the read failed.
        """

    @abstractmethod
    def get_range(self, key: str, start: int, end_exclusive: int) -> bytes:
        """Bytes ``[start, end_exclusive)`` of the object, clipped to its size (a range
        starting at or after the end yields ``b""``).

        Raises:
            InvalidRequestError: ``start < 0`` or ``end_exclusive < start``.
            ObjectNotFoundError, RemoteStorageTransientError, RemoteStorageIOError: as :meth:`get`.
        """

    @abstractmethod
    def get_to_file(self, key: str, path: str | os.PathLike[str], start: int = 0, end: int | None = None) -> int:
        """Stream bytes ``[start, end)`` (``end=None``: to the object's end) into the local
        file ``path``, written atomically (temp file + rename). Returns the bytes written.

        Raises: as :meth:`get_range`; on failure ``path`` is left untouched.
        """

    @abstractmethod
    def size(self, key: str) -> int:
        """The object's size in bytes. Raises ObjectNotFoundError if missing."""

    @abstractmethod
    def exists(self, key: str) -> bool:
        """Whether an object exists under ``key``."""

    @abstractmethod
    def delete(self, key: str) -> None:
        """Delete ``key``. Idempotent: deleting a missing key is not an error.

        Raises:
            RemoteStorageTransientError / RemoteStorageIOError: the delete failed.
        """

    @abstractmethod
    def list(self, prefix: str = "") -> Iterator[str]:
        """Keys starting with ``prefix`` (a plain string prefix, not a directory), sorted."""

    @abstractmethod
    def close(self) -> None:
        """Release clients and connections. Idempotent; the store may be reopened lazily."""

    def __enter__(self) -> ObjectStore:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    @staticmethod
    def _check_range(start: int, end: int | None) -> None:
        if start < 0 or (end is not None and end < start):
            raise InvalidRequestError(f"invalid byte range [{start}, {end}): need 0 <= start <= end")


class ForwardingObjectStore(ObjectStore):
    """An ObjectStore that forwards every call to ``inner``: the base of wrappers (counting,
    circuit breaking, fault injection) that override only the calls they change.

    ``put_file`` is not forwarded: the base class's version calls :meth:`put`, so a wrapper's
    ``put`` sees file uploads too.
    """

    def __init__(self, inner: ObjectStore) -> None:
        self.inner = inner
        self.verifies_writes = inner.verifies_writes  # forwarding changes nothing about verification

    @property
    def url(self) -> str:
        return self.inner.url

    def put(self, key: str, data: PutData) -> int:
        return self.inner.put(key, data)

    def get(self, key: str) -> bytes:
        return self.inner.get(key)

    def get_range(self, key: str, start: int, end_exclusive: int) -> bytes:
        return self.inner.get_range(key, start, end_exclusive)

    def get_to_file(self, key: str, path: str | os.PathLike[str], start: int = 0, end: int | None = None) -> int:
        return self.inner.get_to_file(key, path, start, end)

    def size(self, key: str) -> int:
        return self.inner.size(key)

    def exists(self, key: str) -> bool:
        return self.inner.exists(key)

    def delete(self, key: str) -> None:
        self.inner.delete(key)

    def list(self, prefix: str = "") -> Iterator[str]:
        return self.inner.list(prefix)

    def close(self) -> None:
        self.inner.close()

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.inner!r})"
