"""/v1/topics: create, list, describe, reconfigure and delete topics."""

from __future__ import annotations

from typing import Annotated, Literal

from fastapi import APIRouter, Query, Response
from fastapi.responses import JSONResponse

from service.routes.deps import READ, WRITE, NodeDep, TopicPath
from service.schemas import Error, Topic, TopicConfigPatch, TopicCreate

router = APIRouter(prefix="/v1/topics", tags=["topics"],
                   responses={400: {"model": Error}, 401: {"model": Error}, 403: {"model": Error},
                              404: {"model": Error}, 409: {"model": Error}})


@router.post("", status_code=201, response_model=Topic, dependencies=WRITE)
def create_topic(body: TopicCreate, node: NodeDep) -> dict:
    return node.create_topic(body.name, body.partitions, body.config).as_dict()


@router.get("", response_model=list[Topic], dependencies=READ)
def list_topics(node: NodeDep) -> list[dict]:
    return [t.as_dict() for t in node.topics()]


@router.get("/{topic}", response_model=Topic, dependencies=READ)
def get_topic(topic: TopicPath, node: NodeDep) -> dict:
    return node.topic(topic).as_dict()


@router.patch("/{topic}/config", response_model=Topic, dependencies=WRITE)
def alter_config(topic: TopicPath, body: TopicConfigPatch, node: NodeDep) -> dict:
    return node.alter_config(topic, body.config).as_dict()


@router.delete("/{topic}", status_code=204, dependencies=WRITE,
               responses={200: {"description": "scope=local: what was deleted "
                                               "(`{topic, partitions, local_deleted, remote_deleted}`)"},
                          409: {"model": Error, "description": "this node does not lead every partition; "
                                                               "nothing was deleted"}})
def delete_topic(topic: TopicPath, node: NodeDep,
                 scope: Annotated[Literal["all", "local"], Query(
                     description="all: the remote data and metadata (fenced: this node must be the leader "
                                 "of every partition) and the local logs; local: only this node's local "
                                 "logs, the remote data stays with the leader")] = "all") -> Response:
    """Delete a topic (204). A node that is not the leader of every partition answers 409 and
    deletes nothing; ``scope=local`` drops only its own local copy (200 with what was deleted)."""
    result = node.delete_topic(topic, local_only=scope == "local")
    if scope == "local":
        return JSONResponse(result, status_code=200)
    return Response(status_code=204)
