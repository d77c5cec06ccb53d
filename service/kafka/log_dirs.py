"""DescribeLogDirs v1-v5: the node's data dir, the size of each partition it leads there, and the volume's space.

As Kafka's ReplicaManager.describeLogDirs: one result per log dir (a node has one, its data dir),
each partition's size is its local segments' bytes (remote segments are not counted, as Kafka's
``UnifiedLog.size``), its offset lag 0 (one copy: the log end is the high watermark), never a future
log; v4+ give the volume's total and usable bytes; ``topics`` null means every topic, and a topic
or partition this node does not hold is left out. Admin tools (kafka-log-dirs, UIs showing topic
sizes) sum the answers of every broker, so a node lists only the partitions it leads (Metadata
shows the leader as the only replica), not the stale copies of partitions another node leads.
"""

from __future__ import annotations

import shutil
from typing import Any

from kafka.protocol.admin import DescribeLogDirsRequest, DescribeLogDirsResponse

from service.kafka.errors import KAFKA_STORAGE_ERROR, NONE
from service.kafka.fetch import NotLeaderError, check_leader
from service.kafka.registry import RequestContext, kafka_api

_Result = DescribeLogDirsResponse.DescribeLogDirsResult
_Topic = _Result.DescribeLogDirsTopic
_Partition = _Topic.DescribeLogDirsPartition


def _wanted(request: Any) -> dict[str, set[int]] | None:
    if request.topics is None:
        return None
    out: dict[str, set[int]] = {}
    for t in request.topics:
        out.setdefault(t.topic, set()).update(t.partitions or ())
    return out


def _describe(ctx: RequestContext, request: Any) -> Any:
    node = ctx.node
    wanted = _wanted(request)
    by_topic: dict[str, list[Any]] = {}
    for tp, log in sorted(node.log_manager.all_logs().items()):
        if wanted is not None and tp.partition not in wanted.get(tp.topic, ()):
            continue
        try:
            check_leader(ctx, tp)
        except NotLeaderError:
            continue
        by_topic.setdefault(tp.topic, []).append(_Partition(
            partition_index=tp.partition, partition_size=log.size_in_bytes(), offset_lag=0, is_future_key=False))
    path = str(node.data_dir.resolve())
    try:
        usage = shutil.disk_usage(path)
        code, total, usable = NONE, usage.total, usage.free
    except OSError:
        code, total, usable = KAFKA_STORAGE_ERROR, -1, -1
    result = _Result(error_code=code, log_dir=path,
                     topics=[_Topic(name=name, partitions=parts) for name, parts in by_topic.items()],
                     total_bytes=total, usable_bytes=usable, is_cordoned=False)
    return DescribeLogDirsResponse(throttle_time_ms=0, error_code=NONE, results=[result])


@kafka_api(DescribeLogDirsRequest, min_version=1, max_version=5)
async def handle_describe_log_dirs(ctx: RequestContext, request: Any) -> Any:
    return await ctx.run(_describe, ctx, request)
