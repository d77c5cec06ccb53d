"""One name for the cleaner's kernels: compiled (``_fastpath.pyx``) or the pure-Python reference.

Callers do ``from cleaner.kernels.fastpath import kernels`` and call ``kernels()``: it returns
the compiled module when it was built at install time (``pip install`` compiles it with Cython
when a C compiler exists, see setup.py), otherwise ``_fastpath_py``, logging ONE warning the
first time. ``TIERCOMPACT_PURE_PYTHON=1`` forces the reference (read when first asked; tests
switch with :func:`use_kernels`); the choice is a :class:`~log.record.kernels.KernelChoice`, as
the format layer's codec kernels'. Both honour :class:`RecordKernels`, and their cleaned output
is the same bytes (tests/cleaner/test_fastpath_differential.py).
"""

from __future__ import annotations

import logging
from typing import Any, Protocol

from log.record.kernels import PURE_PYTHON_ENV, KernelChoice

logger = logging.getLogger(__name__)

__all__ = ["PURE_PYTHON_ENV", "RecordKernels", "compiled_kernels", "is_compiled", "kernels", "pure_kernels",
           "use_kernels"]


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
    N_COUNTS: int
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


def _load_compiled() -> RecordKernels | None:
    try:
        import cleaner.kernels._fastpath as _fastpath  # type: ignore[import-not-found]
    except ImportError:
        return None
    return _fastpath  # type: ignore[no-any-return]


def compiled_kernels() -> RecordKernels | None:
    """The compiled module, or None if it was not built."""
    return _load_compiled()


def pure_kernels() -> RecordKernels:
    import cleaner.kernels._fastpath_py as _fastpath_py

    return _fastpath_py  # type: ignore[return-value]


# _load_compiled is looked up when called, so a test can replace it
_CHOICE: KernelChoice[RecordKernels] = KernelChoice(lambda: _load_compiled(), pure_kernels, "record kernels",
                                                    logger)


def kernels() -> RecordKernels:
    """The kernels to use (decided once per process; see the module docstring)."""
    return _CHOICE.active()


def is_compiled() -> bool:
    return kernels() is not pure_kernels()


def use_kernels(k: RecordKernels | None) -> RecordKernels | None:
    """Switch the process's kernels (tests); None decides again on the next :func:`kernels` call.
    Returns the previous choice."""
    return _CHOICE.use(k)
