"""The lock hierarchy of log/locks.py: the checker itself, and the node's real lock paths.

The checker tests use a private LockOrderChecker, so their deliberate violations do not
fail the session (tests/conftest.py fails the run on any violation of the global one).
"""

from __future__ import annotations

import logging
import threading
import time

import pytest

from log import locks
from log.locks import LockOrderChecker, LockOrderError, ordered_condition, ordered_lock, ordered_rlock


def _in_thread(fn: object) -> BaseException | None:
    """Run ``fn`` in a real thread; the exception it raised, if any."""
    box: list[BaseException] = []

    def run() -> None:
        try:
            fn()  # type: ignore[operator]
        except BaseException as e:  # noqa: BLE001 - handed back to the test
            box.append(e)

    t = threading.Thread(target=run)
    t.start()
    t.join(10)
    assert not t.is_alive()
    return box[0] if box else None


def test_opposite_order_in_two_threads_is_a_violation(caplog: pytest.LogCaptureFixture) -> None:
    c = LockOrderChecker()
    a = ordered_lock("test.a", None, checker=c)
    b = ordered_lock("test.b", None, checker=c)

    def a_then_b() -> None:
        with a, b:
            pass

    def b_then_a() -> None:
        with b, a:
            pass

    assert _in_thread(a_then_b) is None
    with caplog.at_level(logging.ERROR, logger="log.locks"):
        err = _in_thread(b_then_a)
    assert isinstance(err, LockOrderError)
    assert [v.kind for v in c.found] == ["cycle"]
    msg = c.found[0].message
    assert "test.a" in msg and "test.b" in msg
    logged = [r for r in caplog.records if "lock-order violation" in r.getMessage()]
    assert len(logged) == 1
    text = logged[0].getMessage()
    assert "a_then_b" in text and "b_then_a" in text  # both stacks: where each order was taken
    # the violating thread did not keep the lock it was refused, nor the one it held
    assert a.acquire(blocking=False) and b.acquire(blocking=False)
    a.release()
    b.release()


def test_cycle_through_a_third_lock_is_found() -> None:
    c = LockOrderChecker()
    a, b, d = (ordered_lock(f"test.{n}", None, checker=c) for n in "abd")
    with a, b:
        pass
    with b, d:
        pass
    with pytest.raises(LockOrderError, match=r"test\.a -> test\.b -> test\.d"), d, a:
        pass


def test_rank_violation_is_reported_before_any_cycle_exists() -> None:
    c = LockOrderChecker()
    outer = ordered_lock("test.outer", 100, checker=c)
    inner = ordered_lock("test.inner", 200, checker=c)
    with pytest.raises(LockOrderError, match="rank"), inner, outer:
        pass
    assert [v.kind for v in c.found] == ["rank"]
    with outer, inner:  # the allowed order still works
        pass


def test_two_locks_of_one_class_are_a_violation() -> None:
    c = LockOrderChecker()
    p0 = ordered_rlock("test.partition", 100, label="t-0", checker=c)
    p1 = ordered_rlock("test.partition", 100, label="t-1", checker=c)
    with pytest.raises(LockOrderError, match=r"test\.partition\[t-1\]"), p0, p1:
        pass


def test_reentrant_lock_may_be_retaken_but_a_plain_one_may_not() -> None:
    c = LockOrderChecker()
    r = ordered_rlock("test.r", 1, checker=c)
    with r, r:
        pass
    plain = ordered_lock("test.plain", 2, checker=c)
    with pytest.raises(LockOrderError, match="not reentrant"), plain, plain:
        pass
    assert not c.found[0].kind == "cycle"


def test_condition_wait_releases_and_restores_the_held_count() -> None:
    c = LockOrderChecker()
    lock = ordered_rlock("test.cond", 1, checker=c)
    cond = ordered_condition("test.cond", 1, lock, checker=c)
    ready: list[bool] = []

    def notifier() -> None:
        with cond:  # only possible while the waiter has released both levels of its hold
            ready.append(True)
            cond.notify_all()

    with lock, cond:
        t = threading.Thread(target=notifier)
        t.start()
        assert cond.wait_for(lambda: bool(ready), timeout=10)
        assert c.held().count(lock) == 2
    t.join(10)
    assert c.held() == [] and c.found == []


def test_waiting_on_a_condition_while_holding_another_lock_is_a_violation() -> None:
    c = LockOrderChecker()
    outer = ordered_lock("test.outer", 1, checker=c)
    cond = ordered_condition("test.cond", 2, checker=c)
    with pytest.raises(LockOrderError, match="waiting on"), outer, cond:
        cond.wait(timeout=0.01)


def test_factories_give_plain_locks_without_the_variable(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(locks.LOCK_CHECK_ENV, raising=False)
    assert type(ordered_lock("x", 1)) is type(threading.Lock())
    assert type(ordered_rlock("x", 1)) is type(threading.RLock())
    monkeypatch.setenv(locks.LOCK_CHECK_ENV, "1")
    assert isinstance(ordered_lock("x", 1), locks._OrderedLock)


def test_the_suite_runs_with_checking_on() -> None:
    assert locks.checking_enabled()


# ---- the node's real lock paths ------------------------------------------------------------------

def test_tiered_cleaner_selection_and_tiering_on_the_same_partitions_do_not_deadlock(tmp_path) -> None:
    """A freeze: the tiered cleaner's selection held the cleaner manager's lock and
    waited for the RemoteLogManager's partition lock (the plan needs the leader epoch), while
    tiering held the partition lock and waited for the manager's lock (local retention of a
    compacted topic is gated on the cleaner checkpoint). Run both, plus rounds, produce/roll
    and the admin reads, on the same partitions in real threads; with the lock checker on, the
    old selection path is reported at its first call, and without it the threads hang."""
    from log.local_log import RecordSpec
    from log.types import TopicPartition
    from service.config import load_config
    from service.node import Node

    before = len(locks.violations())
    node = Node(load_config({"data_dir": tmp_path / "data", "cleaner_threads": 0}, env={}))
    tps = [TopicPartition(t, 0) for t in ("orders", "users")]
    for tp in tps:
        node.create_topic(tp.topic, 1, {"cleanup.policy": "compact", "remote.storage.enable": True,
                                        "segment.bytes": 4096, "min.cleanable.dirty.ratio": 0.01,
                                        "local.retention.ms": 0})
    stop = threading.Event()
    errors: list[BaseException] = []
    rounds = {"selected": 0, "cleaned": 0, "tiered": 0}

    def produce_and_roll(tp: TopicPartition, r: int) -> None:
        log = node.log_manager.get_log(tp)
        log.append_records([RecordSpec(f"k{i}".encode(), f"v{r}".encode()) for i in range(20)])
        log.roll()

    for tp in tps:
        for r in range(3):
            produce_and_roll(tp, r)

    def guarded(fn):  # type: ignore[no-untyped-def]
        def run() -> None:
            try:
                fn()
            except BaseException as e:  # noqa: BLE001 - reported by the test
                errors.append(e)
                stop.set()
        return run

    @guarded
    def tiered_cleaner() -> None:
        manager = node.cleaner.manager
        cleaner = node.cleaner.new_tiered_cleaner(node.cleaner._new_map())
        due = False
        i = 0
        # 150 selections, and on until one real round cleaned (a loaded machine may have nothing dirty at first)
        while i < 150 or (rounds["cleaned"] == 0 and i < 3000):
            i += 1
            if stop.is_set():
                return
            due = due or i % 5 == 0
            ltc = manager.grab_filthiest_compacted_log(tiered=True)
            if ltc is None:
                if i >= 150:
                    time.sleep(0.01)
                continue
            rounds["selected"] += 1
            if due:  # a real round now and then (download, rewrite, upload, publish)
                due = False
                if node.cleaner.run_round(cleaner, ltc) is not None:
                    rounds["cleaned"] += 1
            else:
                manager.done_cleaning(ltc.topic_partition, None)

    @guarded
    def tiering() -> None:
        for i in range(150):
            if stop.is_set():
                return
            tp = tps[i % 2]
            if i % 3 == 0:
                node.remote.tier(tp)
                rounds["tiered"] += 1
            else:
                node.remote.apply_local_retention(tp)

    @guarded
    def producer() -> None:
        for r in range(3, 40):
            if stop.is_set():
                return
            produce_and_roll(tps[r % 2], r)

    @guarded
    def admin() -> None:
        for i in range(60):
            if stop.is_set():
                return
            node.partition_info(tps[i % 2].topic, 0)
            node.metrics()
            node.cleaner_status()

    threads = [threading.Thread(target=f, name=f"scenario-{f.__name__}")
               for f in (tiered_cleaner, tiering, producer, admin)]
    try:
        for t in threads:
            t.start()
        for t in threads:
            t.join(120)
        hung = [t.name for t in threads if t.is_alive()]
        assert not hung, f"threads still running after 120 s (deadlock): {hung}"
        assert not errors, errors
        assert locks.violations()[before:] == []
        assert rounds["selected"] > 0 and rounds["cleaned"] > 0 and rounds["tiered"] > 0, rounds
    finally:
        stop.set()
        if not any(t.is_alive() for t in threads):
            node.shutdown()


def test_a_violation_swallowed_by_a_thread_fails_the_test_session(tmp_path) -> None:
    """tests/conftest.py's session-end check: the test itself passes, the run does not."""
    import subprocess
    import sys
    from pathlib import Path

    root = Path(__file__).resolve().parents[1]
    (tmp_path / "test_swallowed.py").write_text(
        "import threading\n"
        "from log.locks import ordered_lock\n"
        "def test_passes_but_a_thread_violates():\n"
        "    a, b = ordered_lock('demo.a', 1), ordered_lock('demo.b', 2)\n"
        "    def bad():\n"
        "        try:\n"
        "            with b, a:\n"
        "                pass\n"
        "        except Exception:\n"
        "            pass  # swallowed, as a background loop would\n"
        "    t = threading.Thread(target=bad)\n"
        "    t.start()\n"
        "    t.join()\n")
    proc = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "tests.conftest", "-p", "no:cacheprovider",
                           str(tmp_path / "test_swallowed.py")], cwd=root, capture_output=True, text=True,
                          timeout=120)
    assert "1 passed" in proc.stdout
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert "lock-order violation" in proc.stdout and "demo.a" in proc.stdout
