"""The tiered round's temporary directory: the files it downloads and writes, their bytes and peak."""

from __future__ import annotations

import shutil
from collections.abc import Callable
from pathlib import Path


class TempSpace:
    """The tiered cleaner's temporary directory, with the bytes it holds and their peak.

    Every downloaded or written file is registered; ``hook(current_bytes)`` is called after
    each change so a test can assert the disk bound without timing anything.
    """

    def __init__(self, directory: Path, hook: Callable[[int], None] | None = None) -> None:
        self.dir = Path(directory)
        shutil.rmtree(self.dir, ignore_errors=True)  # leftovers of a crashed round
        self.dir.mkdir(parents=True, exist_ok=True)
        self.hook = hook
        self._files: dict[Path, int] = {}
        self.current = 0
        self.peak = 0

    def _update(self) -> None:
        self.current = sum(self._files.values())
        self.peak = max(self.peak, self.current)
        if self.hook is not None:
            self.hook(self.current)

    def track(self, *paths: Path, counted: bool = True) -> None:
        """Register files; ``counted=False`` for hard links to data already on local disk."""
        for p in paths:
            if p.exists():
                self._files[p] = p.stat().st_size if counted else 0
        self._update()

    def release(self, *paths: Path) -> None:
        for p in paths:
            p.unlink(missing_ok=True)
            self._files.pop(p, None)
        self._update()

    def cleanup(self) -> None:
        self.release(*list(self._files))
        shutil.rmtree(self.dir, ignore_errors=True)
