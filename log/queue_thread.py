"""A daemon thread that handles queued items one at a time, in order: the base of the node's file remover and cache dropper.

``drain()`` handles what is queued now in the caller's thread (tests with a mock clock);
``shutdown()`` stops the thread and drops what is still queued (each subclass says why that is
safe for its items).
"""

from __future__ import annotations

import queue
import threading
from typing import Generic, TypeVar

T = TypeVar("T")


class QueueThread(Generic[T]):
    """Subclasses name what an item is and how it is handled (:meth:`_handle`); the thread starts at construction."""

    def __init__(self, name: str) -> None:
        self._queue: queue.SimpleQueue[T | None] = queue.SimpleQueue()
        self._stopped = threading.Event()
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)
        self._thread.start()

    def _put(self, item: T) -> None:
        if not self._stopped.is_set():
            self._queue.put(item)

    def _handle(self, item: T, *, draining: bool) -> int:
        """Handle one item (on the thread, or in drain()'s caller when ``draining``); returns how many units of work
        it did (files removed, drops made), which drain() adds up."""
        raise NotImplementedError

    def drain(self) -> int:
        """Handle everything queued now in the caller's thread; returns the units of work done."""
        n = 0
        while True:
            try:
                item = self._queue.get_nowait()
            except queue.Empty:
                return n
            if item is None:
                self._queue.put(None)  # leave the stop for the thread
                return n
            n += self._handle(item, draining=True)

    def _run(self) -> None:
        while True:
            item = self._queue.get()
            if item is None or self._stopped.is_set():
                return
            self._handle(item, draining=False)

    def shutdown(self, timeout: float = 5.0) -> None:
        """Stop the thread (an item being handled may look at ``_stopped`` to stop early); queued items are dropped."""
        self._stopped.set()
        self._queue.put(None)
        self._thread.join(timeout=timeout)
