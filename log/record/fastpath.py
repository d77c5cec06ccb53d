"""One name for the record kernels: compiled (``_fastpath.pyx``) or the pure-Python reference.

Callers do ``from log.record.fastpath import kernels`` and call ``kernels()``: it returns the
compiled module when it was built at install time (``pip install`` compiles it with Cython when
a C compiler exists, see setup.py), otherwise ``_fastpath_py``, logging ONE warning the first
time. ``TIERCOMPACT_PURE_PYTHON=1`` forces the reference (read when first asked; tests switch
with :func:`use_kernels`). Both honour :class:`RecordKernels`, and their cleaned output is the
same bytes (tests/cleaner/test_fastpath_differential.py).
"""

from __future__ import annotations

import logging
import os
from typing import Any, Protocol

logger = logging.getLogger(__name__)

PURE_PYTHON_ENV = "TIERCOMPACT_PURE_PYTHON"


class KeyTableLike(Protocol):
    capacity: int
    slots: int
    size: int
    base: int
    collisions: int

    @property
    def memory_bytes(self) -> int: ...

    def reset(self, seed: bytes) -> None: ...

    def put(self, key: bytes, offset: int, max_entries: int) -> int: ...

    def get(self, key: bytes) -> int: ...

    def digests(self) -> list[bytes]: ...

    def note_batch(self, base_offset: int, last_offset: int) -> None: ...


class RecordKernels(Protocol):
    """What both ``_fastpath`` modules provide (their docstrings give the details)."""

    OK: int
    FULL: int
    DELTA_OVERFLOW: int
    CORRUPT: int
    FRAME_CHUNK: int
    FRAME_MORE: int
    FRAME_BAD: int
    STOP: int
    FLUSH: int
    UNSUPPORTED: int
    N_COUNTS: int
    #: md5_keys computes digests (the compiled module needs libcrypto at build time for it)
    MD5_KEYS: bool
    KeyTable: Any  # a class whose instances are KeyTableLike; constructor KeyTable(capacity)

    def map_records(self, table: Any, data: bytes | memoryview, count: int, base_offset: int, start: int,
                    max_entries: int) -> tuple[int, int, int]: ...

    def retain_records(self, table: Any, data: bytes | memoryview, count: int, base_offset: int, latest: int,
                       retain_deletes: bool, keep: bytearray) -> tuple[int, int, bool, int, int]: ...

    def rebuild_records(self, data: bytes | memoryview, count: int, base_offset: int, base_timestamp: int, keep: bytes,
                        has_horizon: bool, horizon: int, log_append_time: bool, log_append_ts: int,
                        last_offset_delta: int) -> tuple[bytes, int, int, int] | None: ...

    def hash_keys(self, data: bytes | memoryview, count: int, base_offset: int, seed: bytes) -> tuple[int, int, int]: ...

    def retain_and_rebuild(self, table: Any, data: bytes | memoryview, count: int, base_offset: int, latest: int,
                           retain_deletes: bool, keep: bytearray, base_timestamp: int, has_delete_horizon: bool,
                           delete_horizon: int, new_delete_horizon: int, log_append_time: bool,
                           log_append_ts: int, last_offset_delta: int, known: bool = False) -> tuple[Any, ...]: ...

    def frame_batches(self, buf: bytes | bytearray | memoryview, pos: int, end: int, chunk_bytes: int,
                      have: int, checked_lo: int = 0, checked_hi: int = 0) -> tuple[int, int, int]: ...

    def map_batches(self, table: Any, buf: bytes | bytearray | memoryview, pos: int, end: int, start: int,
                    max_entries: int, latest: int, notes: bytearray | None = None, file_base: int = 0,
                    note_min: int = 0) -> tuple[int, int, int, int, int, int]: ...

    def superseded_runs(self, table: Any, notes: bytes | bytearray | memoryview, latest: int, upper: int,
                        specials: Any, min_bytes: int) -> list[tuple[int, int, int, int, int, int]]: ...

    def chunk_walk(self, notes: bytes | bytearray | memoryview, first: int, n: int, have: int,
                   chunk_bytes: int) -> tuple[int, int]: ...

    def clean_batches(self, table: Any, buf: bytes | bytearray | memoryview, pos: int, end: int, known_lo: int,
                      known_hi: int, latest: int, now: int, new_horizon: int, upper: int, specials: Any,
                      out: bytearray, pend: Any, counts: Any, flush_at: int) -> tuple[int, int, int]: ...

    def md5_keys(self, data: bytes | memoryview, count: int, base_offset: int, start: int,
                 stop: int) -> tuple[int, bytes, bytes]: ...

    def decode_records(self, data: bytes | memoryview, count: int, base_offset: int, base_timestamp: int,
                       base_sequence: int, log_append_time: int | None) -> list[Any] | None: ...

    def encode_records(self, keys: list[bytes | None], values: list[bytes | None], timestamps: list[int],
                       base_timestamp: int) -> tuple[bytes, int] | None: ...


def _load_compiled() -> RecordKernels | None:
    try:
        from log.record import _fastpath  # type: ignore[attr-defined]
    except ImportError:
        return None
    return _fastpath  # type: ignore[no-any-return]


_active: RecordKernels | None = None


def compiled_kernels() -> RecordKernels | None:
    """The compiled module, or None if it was not built."""
    return _load_compiled()


def pure_kernels() -> RecordKernels:
    from log.record import _fastpath_py

    return _fastpath_py  # type: ignore[return-value]


def kernels() -> RecordKernels:
    """The kernels to use (decided once per process; see the module docstring)."""
    global _active
    if _active is None:
        compiled = None if os.environ.get(PURE_PYTHON_ENV, "") not in ("", "0") else _load_compiled()
        if compiled is not None:
            _active = compiled
        else:
            if os.environ.get(PURE_PYTHON_ENV, "") not in ("", "0"):
                logger.warning("%s is set: the cleaner runs the pure-Python record kernels (slower)",
                               PURE_PYTHON_ENV)
            else:
                logger.warning("tiercompact's compiled record kernels are not installed (no C compiler at "
                               "install time?): the cleaner runs the pure-Python kernels, several times "
                               "slower. Reinstall with gcc and the Python headers present to compile them.")
            _active = pure_kernels()
    return _active


def is_compiled() -> bool:
    return kernels() is not pure_kernels()


def use_kernels(k: RecordKernels | None) -> RecordKernels | None:
    """Switch the process's kernels (tests); None decides again on the next :func:`kernels` call.
    Returns the previous choice."""
    global _active
    prev, _active = _active, k
    return prev
