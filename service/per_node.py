"""One object per node, made on first use and dropped with the node (a weak-keyed cache behind a lock)."""

from __future__ import annotations

import threading
import weakref
from collections.abc import Callable
from typing import Any, TypeVar

T = TypeVar("T")


def per_node(factory: Callable[[Any], T]) -> Callable[[Any], T]:
    """A function returning the node's ``factory(node)``, made once per node (thread-safe)."""
    made: weakref.WeakKeyDictionary[Any, T] = weakref.WeakKeyDictionary()
    lock = threading.Lock()

    def of(node: Any) -> T:
        with lock:
            obj = made.get(node)
            if obj is None:
                obj = made[node] = factory(node)
            return obj

    return of
