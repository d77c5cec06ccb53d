"""The node's lock hierarchy, and named, ranked locks that check it in tests.

Every lock in log/, remote/, metadata/, cleaner/ and service/ is created here, through
:func:`ordered_lock`, :func:`ordered_rlock` or :func:`ordered_condition`, with a *name*
(its lock class: all RemoteLogManager partition locks share one name) and a *rank*.

The hierarchy
=============

A thread may take a lock only while every lock it already holds has a strictly lower
rank (taking a lock it already holds again is fine for the reentrant kinds). Outermost
first::

    rank  name                         what it guards / who takes it
    ----  ---------------------------  ----------------------------------------------------
     100  remote.partition             RemoteLogManager, one per partition: copy, local and
                                       remote retention, deferred deletion, leadership.
                                       Calls down into the cleaner manager (the cleaner
                                       checkpoint gates local retention), the log registry,
                                       the local log and the metadata store.
     200  cleaner.manager              LogCleanerManager state (IN_PROGRESS/ABORTED/PAUSED),
                                       the uncleanable set and the checkpoint file. Its
                                       condition is waited on only with no other lock held.
                                       It never calls up: selection of tiered partitions
                                       snapshots the candidates under the lock, plans them
                                       (leader epoch, metadata) without it, then re-takes it
                                       to mark the winner IN_PROGRESS.
     300  log.registry                 LogManager: topics and the TopicPartition -> LocalLog
                                       map (create/alter/delete topic close and open logs).
     350  service.kafka.group_sync     GroupSync, one per partition: one acks=-1 fsync of the
                                       partition at a time (service/kafka/durability.py); held
                                       across the fsync, takes log.local briefly for the end.
     350  service.kafka.group_sync_fs  GroupSync, one per file system: one syncfs of it at a
                                       time; takes each synced log.local briefly for its end.
     380  log.roll_sync                LocalLog, one per partition: one background sync of what
                                       rolls left unsynced at a time (LocalLog.sync_rolled); held
                                       across the fsyncs, takes log.local briefly before and after.
     400  log.local                    LocalLog, one per partition: segments, roll, append,
                                       swap, epoch cache, producer state.
     500  metadata.partition           SqlRemoteLogMetadataManager, one per partition:
                                       a write and its cached size delta.
     510  metadata.connection          the single connection of an in-memory SQLite store
     520  metadata.write               SQLite's one-writer rule
     600  remote.read_cache.load       RemoteReadCache, one per chunk being downloaded
     650  remote.reader                RemoteSegmentReader's offset-index cache
     700  remote.store.client          the boto3 client of an S3ObjectStore
     800  remote.read_cache            RemoteReadCache's index (leaf)
     850  log.checkpoint_file          a checkpoint file's read/replace (leaf)
     860  log.scheduler                the delete scheduler's queue (leaf)
     900  leaf counters and registries RemoteLogManager counters, Node counters, the job
                                       registry, LogCleaner stats, the throttler, counting
                                       store, Spark task stores (leaves: never two at once)
     990  log.clock                    MockClock (taken under anything)

Two locks of one name (say two partitions' ``log.local``) are never held together. The
rule every component follows to stay inside the hierarchy: **never call out to another
component while holding your own lock** unless that component is below you in the table;
snapshot what you need under the lock, release it, then call.

Checking (tests, the soak)
==========================

With ``TIERCOMPACT_LOCK_CHECK=1`` in the environment when a lock is created (the test
suite's conftest sets it; so does the soak for its server process), every lock is an
instrumented one. Each acquire records the locks the thread holds and adds edges to a
global *acquired-after* graph of lock names. A lock taken out of rank order, an edge that
closes a cycle in the graph, a non-reentrant lock taken twice by one thread, or a
condition waited on while another lock is held is a *violation*: it is logged at ERROR as
``lock-order violation: ...`` with both lock names and the stacks (the current one and
where the opposite order was first seen), recorded in :func:`violations`, and raised as
:class:`LockOrderError` in the acquiring thread (so a test fails even when the order
happened not to deadlock this time).

Without the variable the factories return plain ``threading`` locks: no overhead.

Bounded waits (Kafka's ``request.timeout.ms``)
==============================================

A request never waits unboundedly for a lock that background I/O may hold: the service runs
each request's work inside :func:`request_scope` (a context variable, so AnyIO's worker
threads inherit it), and :class:`BoundedLock` (the ``remote.partition`` locks) then waits at
most its bound before raising :class:`~log.errors.PartitionBusyError`. Background threads
(outside any request scope) wait as long as it takes.
"""

from __future__ import annotations

import logging
import os
import threading
import traceback
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass, field
from typing import Any, Protocol, TypeVar

from log.errors import PartitionBusyError

T = TypeVar("T")

logger = logging.getLogger(__name__)

LOCK_CHECK_ENV = "TIERCOMPACT_LOCK_CHECK"

# ranks (see the table in the module docstring)
RANK_RLM_PARTITION = 100
RANK_CLEANER_MANAGER = 200
RANK_LOG_REGISTRY = 300
RANK_LOG_FLUSH = 350
RANK_LOG_ROLL_SYNC = 380
RANK_LOCAL_LOG = 400
RANK_METADATA_PARTITION = 500
RANK_METADATA_CONNECTION = 510
RANK_METADATA_WRITE = 520
RANK_READ_CACHE_LOAD = 600
RANK_REMOTE_READER = 650
RANK_STORE_CLIENT = 700
RANK_READ_CACHE = 800
RANK_CHECKPOINT_FILE = 850
RANK_SCHEDULER = 860
RANK_LEAF = 900
RANK_CLOCK = 990


class LockOrderError(RuntimeError):
    """A lock was taken against the hierarchy (only raised when checking is on).

    A programming error, not a TiercompactError: nothing should catch and map it.
    """


class SupportsLock(Protocol):
    def acquire(self, blocking: bool = ..., timeout: float = ...) -> bool: ...

    def release(self) -> None: ...

    def __enter__(self) -> Any: ...

    def __exit__(self, *exc: object) -> Any: ...


@dataclass
class Violation:
    kind: str
    message: str
    thread: str
    stack: str
    other_stack: str = ""


@dataclass
class LockOrderChecker:
    """The global acquired-after graph plus the violations seen (one per process, or a
    private one for tests that create deliberate violations)."""

    edges: dict[str, dict[str, str]] = field(default_factory=dict)  # a -> {b: stack where a->b was first seen}
    found: list[Violation] = field(default_factory=list)
    _mutex: threading.Lock = field(default_factory=threading.Lock)
    _local: threading.local = field(default_factory=threading.local)

    def held(self) -> list[_OrderedBase]:
        h = getattr(self._local, "held", None)
        if h is None:
            h = self._local.held = []
        return h

    def _path(self, src: str, dst: str) -> list[str] | None:
        """A path src -> ... -> dst in the graph (caller holds _mutex)."""
        stack, seen = [(src, [src])], {src}
        while stack:
            node, path = stack.pop()
            if node == dst:
                return path
            for nxt in self.edges.get(node, {}):
                if nxt not in seen:
                    seen.add(nxt)
                    stack.append((nxt, [*path, nxt]))
        return None

    def before_acquire(self, lock: _OrderedBase) -> None:
        held = self.held()
        if any(h is lock for h in held):
            if lock.reentrant:
                return
            self._violate("self-deadlock", f"{lock} is not reentrant and this thread already holds it", lock)
        distinct: list[_OrderedBase] = []
        for h in held:
            if not any(h is d for d in distinct):
                distinct.append(h)
        here = ""
        for h in distinct:
            if h.rank is not None and lock.rank is not None and h.rank >= lock.rank:
                self._violate("rank", f"{lock} (rank {lock.rank}) taken while holding {h} (rank {h.rank}); "
                                      f"the hierarchy in log/locks.py allows only higher ranks", lock,
                              self._first_seen(lock.name, h.name))
            if h.name == lock.name:
                continue  # two locks of one class: the rank check above reports it
            with self._mutex:
                known = lock.name in self.edges.get(h.name, {})
                if known:
                    continue
                here = here or "".join(traceback.format_stack(limit=25)[:-2])
                cycle = self._path(lock.name, h.name)
                if cycle is None:
                    self.edges.setdefault(h.name, {})[lock.name] = here
                    continue
                other = self.edges.get(cycle[0], {}).get(cycle[1], "") if len(cycle) > 1 else ""
            self._violate("cycle", f"{lock} taken while holding {h}, but the opposite order "
                                   f"{' -> '.join(cycle)} was seen before", lock, other)

    def _first_seen(self, a: str, b: str) -> str:
        with self._mutex:
            return self.edges.get(a, {}).get(b, "")

    def before_wait(self, cond_lock: _OrderedBase) -> None:
        others = [h for h in self.held() if h is not cond_lock]
        if others:
            self._violate("wait", f"waiting on {cond_lock} while holding {others[-1]}: a thread that needs "
                                  f"{others[-1].name} to make progress would never wake this one", cond_lock)

    def _violate(self, kind: str, message: str, lock: _OrderedBase, other_stack: str = "") -> None:
        stack = "".join(traceback.format_stack(limit=25)[:-2])
        v = Violation(kind, message, threading.current_thread().name, stack, other_stack)
        with self._mutex:
            self.found.append(v)
        logger.error("lock-order violation (%s) in thread %s: %s\nthis stack:\n%s%s", kind, v.thread, message,
                     stack, f"\nthe other order was first seen at:\n{other_stack}" if other_stack else "")
        raise LockOrderError(f"lock-order violation ({kind}): {message}")


_CHECKER = LockOrderChecker()


def checking_enabled() -> bool:
    return os.environ.get(LOCK_CHECK_ENV, "") not in ("", "0")


def violations() -> list[Violation]:
    """Violations recorded by the process-wide checker (the test session fails on any)."""
    with _CHECKER._mutex:
        return list(_CHECKER.found)


class _OrderedBase:
    reentrant = False

    def __init__(self, inner: Any, name: str, rank: int | None, label: str | None,
                 checker: LockOrderChecker) -> None:
        self._inner = inner
        self.name = name
        self.rank = rank
        self.label = label
        self._checker = checker

    def __repr__(self) -> str:
        return f"<{self.name}{'[' + self.label + ']' if self.label else ''}>"

    def acquire(self, blocking: bool = True, timeout: float = -1) -> bool:
        if blocking:
            self._checker.before_acquire(self)
        ok: bool = self._inner.acquire(blocking, timeout)
        if ok:
            self._checker.held().append(self)
        return ok

    def release(self) -> None:
        self._inner.release()
        held = self._checker.held()
        for i in range(len(held) - 1, -1, -1):
            if held[i] is self:
                del held[i]
                break

    def __enter__(self) -> bool:
        return self.acquire()

    def __exit__(self, *exc: object) -> None:
        self.release()

    def locked(self) -> bool:
        return bool(self._inner.locked()) if hasattr(self._inner, "locked") else False

    # threading.Condition's hooks
    def _is_owned(self) -> bool:
        return any(h is self for h in self._checker.held())

    def _release_save(self) -> Any:
        self._checker.before_wait(self)
        held = self._checker.held()
        count = sum(1 for h in held if h is self)
        held[:] = [h for h in held if h is not self]
        state = self._inner._release_save() if self.reentrant else self._inner.release()
        return (state, count)

    def _acquire_restore(self, saved: Any) -> None:
        state, count = saved
        if self.reentrant:
            self._inner._acquire_restore(state)
        else:
            self._inner.acquire()
        self._checker.held().extend([self] * count)


class _OrderedLock(_OrderedBase):
    reentrant = False


class _OrderedRLock(_OrderedBase):
    reentrant = True


def ordered_lock(name: str, rank: int | None, *, label: str | None = None,
                 checker: LockOrderChecker | None = None) -> Any:
    """A ``threading.Lock`` at ``rank`` in the hierarchy (instrumented when checking is on,
    or when a private ``checker`` is given)."""
    if checker is None and not checking_enabled():
        return threading.Lock()
    return _OrderedLock(threading.Lock(), name, rank, label, checker or _CHECKER)


def ordered_rlock(name: str, rank: int | None, *, label: str | None = None,
                  checker: LockOrderChecker | None = None) -> Any:
    """A ``threading.RLock`` at ``rank`` in the hierarchy (see :func:`ordered_lock`)."""
    if checker is None and not checking_enabled():
        return threading.RLock()
    return _OrderedRLock(threading.RLock(), name, rank, label, checker or _CHECKER)


def ordered_condition(name: str, rank: int | None, lock: Any = None, *, label: str | None = None,
                      checker: LockOrderChecker | None = None) -> threading.Condition:
    """A ``threading.Condition`` over ``lock`` (an ordered lock), or over a new ordered RLock."""
    if lock is None:
        lock = ordered_rlock(name, rank, label=label, checker=checker)
    return threading.Condition(lock)


_IN_REQUEST: ContextVar[bool] = ContextVar("tiercompact_in_request", default=False)


def in_request() -> bool:
    """Whether the current thread (context) does a request's work (see :func:`request_scope`)."""
    return _IN_REQUEST.get()


@contextmanager
def request_scope() -> Iterator[None]:
    """Mark the work inside as a request's: its waits on a :class:`BoundedLock` are bounded."""
    token = _IN_REQUEST.set(True)
    try:
        yield
    finally:
        _IN_REQUEST.reset(token)


def run_as_request(fn: Callable[..., T], *args: Any) -> T:
    """``fn(*args)`` inside :func:`request_scope` (for executors that do not copy the context)."""
    with request_scope():
        return fn(*args)


class BoundedLock:
    """A context manager over a lock: inside :func:`request_scope` it waits at most
    ``timeout_s`` and then raises :class:`~log.errors.PartitionBusyError` naming ``what``;
    elsewhere (background threads) it waits as long as it takes."""

    __slots__ = ("lock", "timeout_s", "what")

    def __init__(self, lock: Any, timeout_s: float, what: str) -> None:
        self.lock = lock
        self.timeout_s = timeout_s
        self.what = what

    def __enter__(self) -> BoundedLock:
        if _IN_REQUEST.get() and self.timeout_s >= 0:
            if not self.lock.acquire(True, self.timeout_s):
                raise PartitionBusyError(
                    f"{self.what} is busy with background work on the object store (a copy, retention or a "
                    f"deletion) and stayed so for the request timeout ({self.timeout_s * 1000:.0f} ms, "
                    f"request_timeout_ms); nothing was done: retry", retry_after_s=max(1, round(self.timeout_s)))
        else:
            self.lock.acquire()
        return self

    def __exit__(self, *exc: object) -> None:
        self.lock.release()
