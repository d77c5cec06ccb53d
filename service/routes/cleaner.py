"""/v1/cleaner and /v1/jobs: the cleaner's state and asynchronous clean jobs."""

from __future__ import annotations

from typing import Any, Literal

from fastapi import APIRouter, Query

from log.errors import TiercompactError
from service.routes.deps import READ, NodeDep
from service.schemas import CleanerStatus, Error, Job

router = APIRouter(prefix="/v1", tags=["cleaner"], responses={401: {"model": Error}, 404: {"model": Error}})


@router.get("/cleaner", response_model=CleanerStatus, dependencies=READ)
def cleaner_status(node: NodeDep) -> dict[str, Any]:
    """Both cleaner pools as configured and as running: the local pool (cleaner_threads) and
    the tiered pool (tiered_cleaner_threads), plus uncleanable partitions and recent runs."""
    status = node.cleaner_status()
    cfg = node.config
    threads = list(node.cleaner.threads)
    pools = {}
    for name, configured, tiered in (("local", cfg.cleaner_threads, False),
                                     ("tiered", cfg.tiered_cleaner_threads if node.tiered_cleaning else 0, True)):
        mine = [t for t in threads if t.tiered is tiered]
        pools[name] = {"configured": configured, "live": sum(1 for t in mine if t.is_alive()),
                       "dead": sum(1 for t in mine if t.dead)}
    try:
        at_risk = node.erasures.at_risk()
    except TiercompactError:
        at_risk = []  # the metadata store is down: the cleaner's own state still answers
    status["erasures_at_risk"] = at_risk
    status["partitions_at_risk"] = sorted({f"{e['topic']}-{p}" for e in at_risk for p in e["partitions"]})
    return {**status, "threads": pools["local"]["configured"], "tiered_threads": pools["tiered"]["configured"],
            "live_threads": pools["local"]["live"] + pools["tiered"]["live"],
            "background_cleaning": cfg.cleaner_threads > 0, "pools": pools}


@router.get("/jobs", response_model=list[Job], dependencies=READ)
def list_jobs(node: NodeDep, kind: Literal["clean", "spark-clean"] | None = None,
              state: Literal["pending", "running", "succeeded", "failed"] | None = None,
              limit: int = Query(100, ge=1, le=1000)) -> list[dict[str, Any]]:
    """Clean jobs and Spark offload jobs (their state, partitions and Spark application id), newest
    first; kept in memory (lost on restart)."""
    return [j.as_dict() for j in node.jobs.list(kind=kind, state=state, limit=limit)]


@router.get("/jobs/{job_id}", response_model=Job, dependencies=READ)
def get_job(job_id: str, node: NodeDep) -> dict[str, Any]:
    return node.jobs.get(job_id).as_dict()
