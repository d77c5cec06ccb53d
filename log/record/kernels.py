"""Compiled kernels or their pure-Python twins, chosen once per process (:class:`KernelChoice`);
here, the format layer's codec kernels (``_codec.pyx`` / ``_codec_py.py``).

Callers do ``from log.record.kernels import kernels`` and call ``kernels()``: it returns the
compiled module when it was built at install time (``pip install`` compiles it with Cython when
a C compiler exists, see setup.py), otherwise the pure-Python twin, logging ONE warning the first
time. ``TIERCOMPACT_PURE_PYTHON=1`` forces the twins (read when first asked; tests switch with
:func:`use_kernels`). The cleaner's kernels (``cleaner/kernels/fastpath.py``) are chosen the same
way, by a KernelChoice of their own.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable
from typing import Any, Generic, Protocol, TypeVar

logger = logging.getLogger(__name__)

PURE_PYTHON_ENV = "TIERCOMPACT_PURE_PYTHON"

K = TypeVar("K")


class KernelChoice(Generic[K]):
    """A compiled extension module and its pure-Python twin (same contract ``K``): which one
    this process runs. ``load_compiled`` answers None when the extension was not built; the
    warnings go to ``log``. Not thread-safe to switch; reading is."""

    def __init__(self, load_compiled: Callable[[], K | None], load_pure: Callable[[], K], what: str,
                 log: logging.Logger) -> None:
        self._load_compiled, self._load_pure = load_compiled, load_pure
        self._what, self._log = what, log
        self._active: K | None = None

    def active(self) -> K:
        """The kernels to use (decided once per process; see the module docstring)."""
        if self._active is None:
            forced = os.environ.get(PURE_PYTHON_ENV, "") not in ("", "0")
            compiled = None if forced else self._load_compiled()
            if compiled is not None:
                self._active = compiled
            else:
                if forced:
                    self._log.warning("%s is set: tiercompact runs the pure-Python %s (slower)", PURE_PYTHON_ENV,
                                      self._what)
                else:
                    self._log.warning("tiercompact's compiled %s are not installed (no C compiler at install "
                                      "time?): the pure-Python ones run, several times slower. Reinstall with "
                                      "gcc and the Python headers present to compile them.", self._what)
                self._active = self._load_pure()
        return self._active

    def use(self, k: K | None) -> K | None:
        """Switch the process's kernels (tests); None decides again on the next :meth:`active`.
        Returns the previous choice."""
        prev, self._active = self._active, k
        return prev


class CodecKernels(Protocol):
    """What ``_codec.pyx`` and ``_codec_py.py`` both provide (their docstrings give the details)."""

    OK: int
    CORRUPT: int
    UNSUPPORTED: int
    #: md5_keys computes digests (the compiled module needs libcrypto at build time for it)
    MD5_KEYS: bool

    def md5_keys(self, data: bytes | memoryview, count: int, base_offset: int, start: int,
                 stop: int) -> tuple[int, bytes, bytes]: ...

    def decode_records(self, data: bytes | memoryview, count: int, base_offset: int, base_timestamp: int,
                       base_sequence: int, log_append_time: int | None) -> list[Any] | None: ...

    def check_produced_records(self, data: bytes | memoryview, count: int, base_timestamp: int, need_key: bool,
                               check_time: bool, now_ms: int, max_diff: int) -> int | None: ...

    def encode_records(self, keys: list[bytes | None], values: list[bytes | None], timestamps: list[int],
                       base_timestamp: int) -> tuple[bytes, int] | None: ...


def compiled_kernels() -> CodecKernels | None:
    """The compiled module, or None if it was not built."""
    try:
        import log.record._codec as _codec  # type: ignore[import-not-found]
    except ImportError:
        return None
    return _codec  # type: ignore[no-any-return]


def pure_kernels() -> CodecKernels:
    import log.record._codec_py as _codec_py

    return _codec_py  # type: ignore[return-value]


_CHOICE: KernelChoice[CodecKernels] = KernelChoice(compiled_kernels, pure_kernels, "record codec kernels", logger)
kernels = _CHOICE.active
use_kernels = _CHOICE.use
