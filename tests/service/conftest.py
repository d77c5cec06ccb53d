"""Fixtures for the service tests: a node on the embedded defaults in a temp dir, and a client."""

from __future__ import annotations

import warnings
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

with warnings.catch_warnings():
    warnings.simplefilter("ignore")  # starlette's testclient warns about its httpx dependency
    from fastapi.testclient import TestClient

from service.app import create_app
from service.config import load_config
from service.node import Node

TOKEN = "s3cret-token-123"


def make_node(tmp_path: Path, **options: Any) -> Node:
    return Node(load_config({"data_dir": tmp_path / "data", **options}, env={}))


@pytest.fixture
def node(tmp_path: Path) -> Iterator[Node]:
    n = make_node(tmp_path)
    yield n
    n.shutdown()


@pytest.fixture
def client(node: Node) -> Iterator[TestClient]:
    with TestClient(create_app(node)) as c:
        yield c


@pytest.fixture
def secured(tmp_path: Path) -> Iterator[TestClient]:
    n = make_node(tmp_path, token=TOKEN)
    with TestClient(create_app(n)) as c:
        yield c
    n.shutdown()
