"""In-memory registry of asynchronous clean jobs (``POST .../clean?wait=false``, and waited ones past their bound).

A job runs on a small worker pool; its state moves pending -> running -> succeeded |
failed and is read back through ``GET /v1/jobs/{id}``. Finished jobs are kept up to
``max_finished`` (oldest dropped first); jobs do not survive a restart, which is fine
because a clean is idempotent and can simply be requested again. Thread-safe.

:meth:`JobRegistry.run_bounded` serves ``POST .../clean?wait=true``: the round runs on its own
thread and the request waits for it at most ``timeout_s``; a round that takes longer (a huge
partition, an object store answering slowly) goes on as a job and the request answers with its
id, so no request waits without a bound.
"""

from __future__ import annotations

import logging
import threading
import time
import uuid
from collections import OrderedDict
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

from log.errors import TiercompactError
from log.locks import RANK_LEAF, ordered_lock
from service.errors import JobNotFoundError, ServiceUnavailableError

logger = logging.getLogger(__name__)

PENDING, RUNNING, SUCCEEDED, FAILED = "pending", "running", "succeeded", "failed"


@dataclass
class Job:
    job_id: str
    topic: str
    partition: int
    state: str = PENDING
    stats: dict[str, Any] | None = None
    error: str | None = None
    done: threading.Event = field(default_factory=threading.Event, repr=False)
    #: "clean" (POST .../clean?wait=false) or "spark-clean" (a Spark offload job)
    kind: str = "clean"
    engine: str = "in-process"
    #: every partition of the job (a Spark job may clean several; ``partition`` is the first)
    partitions: list[int] = field(default_factory=list)
    #: who asked: "api" or "tiered-pool" (the background pool's offload)
    origin: str = "api"
    spark_application_id: str | None = None
    #: Spark jobs run so far (a job fenced by a leadership change is retried under the new epoch)
    attempts: int = 0
    created_ms: int = field(default_factory=lambda: int(time.time() * 1000))
    ended_ms: int | None = None

    def as_dict(self) -> dict[str, Any]:
        return {"job_id": self.job_id, "state": self.state, "topic": self.topic, "partition": self.partition,
                "stats": self.stats, "error": self.error, "kind": self.kind, "engine": self.engine,
                "partitions": self.partitions or [self.partition], "origin": self.origin,
                "spark_application_id": self.spark_application_id, "attempts": self.attempts,
                "created_ms": self.created_ms, "ended_ms": self.ended_ms}


def _settle(job: Job, stats: dict[str, Any] | None, error: Exception | None) -> None:
    """A job's end: its stats, or its error as a client reads it."""
    if error is None:
        job.stats, job.state = stats, SUCCEEDED
    elif isinstance(error, TiercompactError):
        job.error, job.state = f"{type(error).__name__}: {error}", FAILED
    else:
        logger.error("clean job %s failed", job.job_id, exc_info=error)
        job.error, job.state = f"internal error ({type(error).__name__}): {error}", FAILED
    job.ended_ms = int(time.time() * 1000)
    job.done.set()


class JobRegistry:
    def __init__(self, workers: int = 2, max_finished: int = 1000) -> None:
        self._pool = ThreadPoolExecutor(max_workers=workers, thread_name_prefix="tiercompact-job")
        self._jobs: OrderedDict[str, Job] = OrderedDict()
        self._lock = ordered_lock("service.jobs", RANK_LEAF)
        self._max_finished = max_finished
        self._closed = False

    def submit(self, topic: str, partition: int, fn: Callable[[], dict[str, Any]]) -> Job:
        job = Job(uuid.uuid4().hex, topic, partition)
        with self._lock:
            if self._closed:
                raise ServiceUnavailableError("the node is shutting down; retry the clean after it restarts")
            self._jobs[job.job_id] = job
            self._trim()
        self._pool.submit(self._run, job, fn)
        return job

    def track(self, job: Job) -> Job:
        """Register a job another component runs (the Spark offload); it reports through
        :meth:`finish`."""
        with self._lock:
            if self._closed:
                raise ServiceUnavailableError("the node is shutting down; retry after it restarts")
            self._jobs[job.job_id] = job
            self._trim()
        return job

    @staticmethod
    def finish(job: Job, *, stats: dict[str, Any] | None = None, error: str | None = None) -> None:
        job.stats, job.error = stats, error
        job.state = FAILED if error is not None else SUCCEEDED
        job.ended_ms = int(time.time() * 1000)
        job.done.set()

    def list(self, *, kind: str | None = None, state: str | None = None, limit: int = 100) -> list[Job]:
        """Jobs, newest first."""
        with self._lock:
            jobs = list(self._jobs.values())
        jobs = [j for j in reversed(jobs) if (kind is None or j.kind == kind) and (state is None or j.state == state)]
        return jobs[:limit]

    def _run(self, job: Job, fn: Callable[[], dict[str, Any]]) -> None:
        job.state = RUNNING
        try:
            stats = fn()
        except Exception as e:  # noqa: BLE001 - a job must always finish with a state a client can read
            _settle(job, None, e)
        else:
            _settle(job, stats, None)

    def run_bounded(self, topic: str, partition: int, fn: Callable[[], dict[str, Any]],
                    timeout_s: float) -> tuple[dict[str, Any] | None, Job | None]:
        """Run ``fn`` on its own thread and wait for it up to ``timeout_s``: ``(result, None)`` when it ended in time
        (its exception is raised here, as if it had run on the caller's thread), else ``(None, job)``: a job, in the
        registry from now on, that finishes when ``fn`` does."""
        with self._lock:
            if self._closed:
                raise ServiceUnavailableError("the node is shutting down; retry the clean after it restarts")
        job = Job(uuid.uuid4().hex, topic, partition, state=RUNNING)
        outcome: list[Any] = []
        ended = threading.Event()
        handover = threading.Lock()  # the caller's give-up and the thread's end, in one order
        tracked = [False]

        def run() -> None:
            try:
                result: tuple[Any, BaseException | None] = (fn(), None)
            except BaseException as e:  # noqa: BLE001 - handed to the caller or to the job
                result = (None, e)
            with handover:
                outcome.append(result)
                ended.set()
                if tracked[0]:
                    err = result[1]
                    _settle(job, result[0], err if isinstance(err, Exception) or err is None
                            else RuntimeError(f"interrupted: {err!r}"))

        threading.Thread(target=run, name=f"tiercompact-clean-{topic}-{partition}", daemon=True).start()
        ended.wait(timeout_s)
        with handover:
            if not outcome:  # past the bound: the round goes on as a job
                tracked[0] = True
                self.track(job)
                return None, job
        stats, err = outcome[0]
        if err is not None:
            raise err
        return stats, None

    def _trim(self) -> None:
        finished = [j for j in self._jobs.values() if j.state in (SUCCEEDED, FAILED)]
        for j in finished[: max(0, len(finished) - self._max_finished)]:
            del self._jobs[j.job_id]

    def get(self, job_id: str) -> Job:
        with self._lock:
            job = self._jobs.get(job_id)
        if job is None:
            raise JobNotFoundError(f"no clean job {job_id!r}; jobs are kept in memory and lost on restart")
        return job

    def shutdown(self, timeout: float | None = None) -> bool:
        """Stop accepting jobs, drop queued ones and wait up to ``timeout`` seconds for running
        ones (the node aborts their rounds first). Returns whether every job finished."""
        with self._lock:
            self._closed = True
            running = [j for j in self._jobs.values() if j.state in (PENDING, RUNNING)]
        self._pool.shutdown(wait=False, cancel_futures=True)
        deadline = None if timeout is None else time.monotonic() + timeout
        finished = True
        for job in running:
            wait = None if deadline is None else max(deadline - time.monotonic(), 0.0)
            if job.state == RUNNING and not job.done.wait(wait):
                logger.warning("clean job %s still running at shutdown; abandoning it", job.job_id)
                finished = False
        with self._lock:
            for job in self._jobs.values():
                if job.state == PENDING:
                    job.state, job.error = FAILED, "cancelled: the node shut down before the job started"
                    job.done.set()
        return finished
