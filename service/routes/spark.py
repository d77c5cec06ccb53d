"""/v1/topics/{topic}/spark-clean: a Spark offload job submitted by the service."""

from __future__ import annotations

import time
from typing import Annotated, Any

from fastapi import APIRouter, Query
from fastapi.responses import JSONResponse

from service.routes.deps import WRITE, NodeDep, TopicPath
from service.schemas import Error, Job, JobAccepted

router = APIRouter(prefix="/v1/topics", tags=["cleaner"],
                   responses={400: {"model": Error}, 401: {"model": Error}, 404: {"model": Error},
                              503: {"model": Error}})


@router.post("/{topic}/spark-clean", dependencies=WRITE, status_code=200, response_model=Job,
             responses={202: {"model": JobAccepted}})
def spark_clean(topic: TopicPath, node: NodeDep,
                partitions: Annotated[list[int] | None, Query(description="default: every partition")] = None,
                wait: bool = True, timeout_s: Annotated[float, Query(gt=0, le=86_400)] = 3600.0) -> Any:
    """Clean the topic's partitions with one Spark job on the node's spark_master; the node keeps
    serving and adopts the result. wait=false answers 202 with the job id (GET /v1/jobs/{id})."""
    job = node.submit_spark_clean(topic, partitions)
    if not wait:
        return JSONResponse({"job_id": job.job_id}, status_code=202)
    deadline = time.monotonic() + timeout_s
    while not job.done.wait(0.2) and time.monotonic() < deadline:
        pass
    return job.as_dict()
