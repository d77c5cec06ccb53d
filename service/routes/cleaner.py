"""/v1/cleaner and /v1/jobs: the cleaner's state and asynchronous clean jobs."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter

from service.routes.deps import READ, NodeDep
from service.schemas import CleanerStatus, Error, Job

router = APIRouter(prefix="/v1", tags=["cleaner"], responses={401: {"model": Error}, 404: {"model": Error}})


@router.get("/cleaner", response_model=CleanerStatus, dependencies=READ)
def cleaner_status(node: NodeDep) -> dict[str, Any]:
    return node.cleaner_status()


@router.get("/jobs/{job_id}", response_model=Job, dependencies=READ)
def get_job(job_id: str, node: NodeDep) -> dict[str, Any]:
    return node.jobs.get(job_id).as_dict()
