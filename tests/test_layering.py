"""The import graph follows the design card: service -> coordinator -> cleaner -> remote -> metadata -> log.

A module may import its own package and the packages below it, never above. Web and
metrics libraries stay in service/, pyspark stays in cleaner/spark/.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
LAYERS = ["log", "metadata", "remote", "cleaner", "coordinator", "service"]  # bottom -> top
SERVICE_ONLY = {"fastapi", "uvicorn", "prometheus_client", "starlette", "pydantic"}
SPARK_ONLY = {"pyspark"}


def _modules() -> list[Path]:
    return sorted(p for pkg in LAYERS for p in (ROOT / pkg).rglob("*.py"))


def _imports(path: Path) -> list[str]:
    tree = ast.parse(path.read_text(), filename=str(path))
    names: list[str] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names.extend(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                raise AssertionError(f"{path}: relative import; use absolute imports")
            if node.module:
                names.append(node.module)
    return names


def test_there_are_modules() -> None:
    assert len(_modules()) >= 5


@pytest.mark.parametrize("path", _modules(), ids=lambda p: str(p.relative_to(ROOT)))
def test_imports_point_down(path: Path) -> None:
    rel = path.relative_to(ROOT)
    pkg = rel.parts[0]
    level = LAYERS.index(pkg)
    for name in _imports(path):
        top = name.split(".")[0]
        if top in LAYERS:
            assert LAYERS.index(top) <= level, f"{rel} imports {name}: {top} is above {pkg}"
        if top in SERVICE_ONLY:
            assert pkg == "service", f"{rel} imports {name}: only service/ may"
        if top in SPARK_ONLY:
            assert rel.parts[:2] == ("cleaner", "spark"), f"{rel} imports {name}: only cleaner/spark/ may"
