"""/v1/topics/{topic}/partitions/{p}/compactions: the partition's round reports.

Every cleaning round (local, tiered, Spark; completed, failed, aborted or fenced) leaves a
report in the metadata store; this lists them newest first, ``limit`` at a time, ``before``
a round id to page back (the ``round_id`` of the last item of the previous page).
"""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Query

from service.routes.deps import READ, NodeDep, PartitionPath, TopicPath
from service.schemas import CompactionRound, Error, in_range, range_schema

MAX_LIMIT = 1000

router = APIRouter(prefix="/v1/topics/{topic}/partitions/{partition}", tags=["partitions"],
                   responses={400: {"model": Error}, 401: {"model": Error}, 403: {"model": Error},
                              404: {"model": Error}})


@router.get("/compactions", response_model=list[CompactionRound], dependencies=READ)
def list_compactions(topic: TopicPath, partition: PartitionPath, node: NodeDep,
                     limit: Annotated[int, Query(description=f"Most rounds to return (1..{MAX_LIMIT}).",
                                                 json_schema_extra=range_schema(1, MAX_LIMIT)),
                                      in_range(1, MAX_LIMIT, "page size")] = 20,
                     before: Annotated[str | None, Query(max_length=64, description="Only rounds recorded before "
                                                         "this round id (paging).")] = None) -> list[dict]:
    """The partition's compaction rounds, newest first."""
    tp = node.log(topic, partition).topic_partition  # 404 for an unknown topic or partition
    return [r.as_dict() for r in node.metadata.list_compaction_reports(tp, limit=limit, before=before)]
