"""FileObjectStore: ``file://DIR``, the embedded default object store.

Each key is a file under DIR. Writes go to a temp file in ``DIR/.tiercompact-tmp`` (same
filesystem), are fsynced, read back and checked against the CRC-32C of the bytes read from
the source (and the caller's expected CRC-32C, when given), then renamed over the target
and the directory fsynced, so a reader sees the old object or the whole new, verified one,
and a crash leaves at most a stray temp file (never listed). Keys are validated and resolved paths checked, so no key escapes DIR.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import BinaryIO
from urllib.parse import unquote, urlparse

from log.errors import InvalidConfigError, InvalidRequestError
from log.record.crc32c import crc32c
from remote.errors import (
    ObjectNotFoundError,
    RemoteStorageChecksumError,
    RemoteStorageError,
    RemoteStorageIOError,
)
from remote.object_store import ObjectStore, PutData, open_upload, validate_key

TMP_DIR = ".tiercompact-tmp"
TMP_PREFIX = ".tmp-"  # temp files are ".tmp-<pid>-<random>": clear_temp keeps a live process's
_CHUNK = 1 << 20


def _fsync_dir(path: Path) -> None:
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def _copy(src: BinaryIO, dst: BinaryIO, limit: int | None = None) -> tuple[int, int]:
    """Copy; returns (bytes copied, CRC-32C of them)."""
    n = crc = 0
    while limit is None or n < limit:
        chunk = src.read(_CHUNK if limit is None else min(_CHUNK, limit - n))
        if not chunk:
            break
        dst.write(chunk)
        crc = crc32c(chunk, crc)
        n += len(chunk)
    return n, crc


def _file_crc32c(f: BinaryIO) -> int:
    f.seek(0)
    crc = 0
    while chunk := f.read(_CHUNK):
        crc = crc32c(chunk, crc)
    return crc


def atomic_write_from(path: Path, src: BinaryIO, limit: int | None = None, tmp_dir: Path | None = None, *,
                      verify: bool = False, expected_crc32c: int | None = None, key: str | None = None) -> int:
    """Copy ``src`` into ``path`` via temp file + fsync + rename; returns bytes written.

    ``verify``: after the fsync, read the temp file back and compare its CRC-32C with that of
    the bytes read from ``src`` and with ``expected_crc32c`` (the source's, from the caller);
    on a mismatch the temp file is removed, ``path`` is untouched and
    RemoteStorageChecksumError is raised.
    """
    tmp_dir = tmp_dir or path.parent
    tmp_dir.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f"{TMP_PREFIX}{os.getpid()}-", dir=tmp_dir)
    try:
        with os.fdopen(fd, "w+b" if verify else "wb") as f:
            n, read_crc = _copy(src, f, limit)
            f.flush()
            os.fsync(f.fileno())
            if verify:
                stored = _file_crc32c(f)
                want = read_crc if expected_crc32c is None else expected_crc32c
                if stored != read_crc or stored != want:
                    raise RemoteStorageChecksumError(
                        f"checksum mismatch writing {path.name}: source CRC-32C {want:08x}, received "
                        f"{read_crc:08x}, stored {stored:08x} ({n} bytes); nothing was written", key=key)
        path.parent.mkdir(parents=True, exist_ok=True)
        os.replace(tmp, path)
        _fsync_dir(path.parent)
        return n
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def _writer_alive(name: str) -> bool:
    """Whether the process that named this temp file (".tmp-<pid>-...") is still running."""
    pid_text = name[len(TMP_PREFIX):].split("-", 1)[0] if name.startswith(TMP_PREFIX) else ""
    if not pid_text.isdigit():
        return False
    pid = int(pid_text)
    if pid == os.getpid():
        return True
    try:
        os.kill(pid, 0)
    except (ProcessLookupError, OverflowError, ValueError):
        return False
    except PermissionError:  # alive, another user's
        return True
    return True


class FileObjectStore(ObjectStore):
    """Objects as files under a root directory. Thread-safe and picklable (it holds a path)."""

    verifies_writes = True  # put() counts what it wrote, fsyncs, checks its CRC-32C and renames

    def __init__(self, root: str | os.PathLike[str]) -> None:
        r = os.fspath(root)
        if r.startswith("file://"):
            parsed = urlparse(r)
            if parsed.netloc not in ("", "localhost"):
                raise InvalidConfigError(f"file:// URL {r!r} must be file:///absolute/path")
            r = unquote(parsed.path)
        if not r:
            raise InvalidConfigError("file object store needs a directory")
        self.root = Path(r).expanduser().resolve()
        self.root.mkdir(parents=True, exist_ok=True)
        self._tmp = self.root / TMP_DIR

    @property
    def url(self) -> str:
        return self.root.as_uri()

    def _path(self, key: str) -> Path:
        validate_key(key)
        if key.split("/", 1)[0] == TMP_DIR:
            raise InvalidRequestError(f"invalid object key {key!r}: {TMP_DIR} is reserved")
        p = (self.root / key).resolve()
        if not p.is_relative_to(self.root) or p == self.root:
            raise InvalidRequestError(f"invalid object key {key!r}: resolves outside {self.root}")
        return p

    def put(self, key: str, data: PutData) -> int:
        path = self._path(key)
        stream, owned, expected = open_upload(key, data)
        try:
            return atomic_write_from(path, stream, tmp_dir=self._tmp, verify=True, expected_crc32c=expected,
                                     key=key)
        except OSError as e:
            raise RemoteStorageIOError(f"put failed: {e}", key=key) from None
        finally:
            if owned:
                stream.close()

    def get(self, key: str) -> bytes:
        path = self._path(key)
        try:
            return path.read_bytes()
        except (FileNotFoundError, IsADirectoryError, NotADirectoryError):
            raise ObjectNotFoundError(f"no object {key!r} in {self.url}", key=key) from None
        except OSError as e:
            raise RemoteStorageIOError(f"get failed: {e}", key=key) from None

    def get_range(self, key: str, start: int, end_exclusive: int) -> bytes:
        self._check_range(start, end_exclusive)
        path = self._path(key)
        try:
            with path.open("rb") as f:
                f.seek(start)
                return f.read(max(0, end_exclusive - start))
        except (FileNotFoundError, IsADirectoryError, NotADirectoryError):
            raise ObjectNotFoundError(f"no object {key!r} in {self.url}", key=key) from None
        except OSError as e:
            raise RemoteStorageIOError(f"ranged get failed: {e}", key=key) from None

    def get_to_file(self, key: str, path: str | os.PathLike[str], start: int = 0, end: int | None = None) -> int:
        self._check_range(start, end)
        src = self._path(key)
        dst = Path(path)
        try:
            with src.open("rb") as f:
                f.seek(start)
                return atomic_write_from(dst, f, None if end is None else max(0, end - start))
        except (FileNotFoundError, IsADirectoryError, NotADirectoryError) as e:
            if not src.is_file():
                raise ObjectNotFoundError(f"no object {key!r} in {self.url}", key=key) from None
            raise RemoteStorageIOError(f"download to {dst} failed: {e}", key=key) from None
        except OSError as e:
            raise RemoteStorageIOError(f"download to {dst} failed: {e}", key=key) from None

    def size(self, key: str) -> int:
        path = self._path(key)
        try:
            if not path.is_file():
                raise FileNotFoundError
            return path.stat().st_size
        except FileNotFoundError:
            raise ObjectNotFoundError(f"no object {key!r} in {self.url}", key=key) from None
        except OSError as e:
            raise RemoteStorageIOError(f"stat failed: {e}", key=key) from None

    def exists(self, key: str) -> bool:
        return self._path(key).is_file()

    def delete(self, key: str) -> None:
        path = self._path(key)
        try:
            path.unlink(missing_ok=True)
        except IsADirectoryError:
            return
        except OSError as e:
            raise RemoteStorageIOError(f"delete failed: {e}", key=key) from None
        # drop now-empty parent directories so a prefix's listing stays cheap
        parent = path.parent
        while parent != self.root:
            try:
                parent.rmdir()
            except OSError:
                break
            parent = parent.parent

    def list(self, prefix: str = "") -> Iterator[str]:
        keys: list[str] = []
        try:
            for dirpath, dirnames, filenames in os.walk(self.root):
                rel = Path(dirpath).relative_to(self.root).as_posix()
                if rel == ".":
                    rel = ""
                    dirnames[:] = [d for d in dirnames if d != TMP_DIR]
                base = f"{rel}/" if rel else ""
                # prune directories that cannot contain a match
                dirnames[:] = [d for d in dirnames if (base + d + "/").startswith(prefix)
                               or prefix.startswith(base + d + "/")]
                keys.extend(base + f for f in filenames if (base + f).startswith(prefix))
        except OSError as e:
            raise RemoteStorageError(f"list of {prefix!r} failed: {e}") from None
        return iter(sorted(keys))

    def close(self) -> None:
        pass

    def clear_temp(self) -> int:
        """Remove temp files a crashed writer left (call at startup); returns how many.

        Several nodes may share one store directory, so only files of processes that are no
        longer running are removed (and unnamed ones from older versions); a live writer's
        in-flight upload is left alone.
        """
        removed = 0
        try:
            entries = list(self._tmp.iterdir())
        except OSError:
            return 0
        for p in entries:
            if _writer_alive(p.name):
                continue
            try:
                if p.is_dir():
                    shutil.rmtree(p)
                else:
                    p.unlink()
                removed += 1
            except FileNotFoundError:
                pass
            except OSError:
                continue
        try:
            self._tmp.rmdir()  # only if empty: a live writer's file keeps it
        except OSError:
            pass
        return removed

    def __repr__(self) -> str:
        return f"FileObjectStore({str(self.root)!r})"
