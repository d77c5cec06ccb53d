"""/v1/topics: create, list, describe, reconfigure and delete topics."""

from __future__ import annotations

from fastapi import APIRouter, Response

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


@router.delete("/{topic}", status_code=204, dependencies=WRITE)
def delete_topic(topic: TopicPath, node: NodeDep) -> Response:
    node.delete_topic(topic)
    return Response(status_code=204)
