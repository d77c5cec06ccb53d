"""Shared route dependencies."""

from __future__ import annotations

from typing import Annotated

from fastapi import Depends, Path, Request

from service.auth import require_read, require_write
from service.node import Node


async def get_node(request: Request) -> Node:
    # async: it only looks the node up, so FastAPI need not send it to the threadpool
    node: Node = request.app.state.node
    return node


NodeDep = Annotated[Node, Depends(get_node)]
PartitionPath = Annotated[int, Path(ge=0, le=2**31 - 1, description="Partition number.")]
TopicPath = Annotated[str, Path(description="Topic name.")]
WRITE = [Depends(require_write)]
READ = [Depends(require_read)]
