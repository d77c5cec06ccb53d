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


# ---- no import circle inside a package ----------------------------------------------------
#: circles being removed on other branches; the merge that removes one deletes its entry here
KNOWN_CIRCLES: set[frozenset[str]] = set()


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _is_type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING")


def _runtime_imports(tree: ast.Module) -> list[ast.Import | ast.ImportFrom]:
    """Every import that runs: at module level or inside a function (a deferred import still
    ties the two modules together), not one under ``if TYPE_CHECKING:``."""
    typing_only: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and _is_type_checking(node.test):
            typing_only.update(id(n) for stmt in node.body for n in ast.walk(stmt))
    return [n for n in ast.walk(tree) if isinstance(n, (ast.Import, ast.ImportFrom)) and id(n) not in typing_only]


def _import_graph() -> dict[str, set[str]]:
    """Module -> the project modules it imports. ``from pkg import name`` depends on
    ``pkg.name`` when that is a module (a compiled extension is no project module), else on
    ``pkg`` itself."""
    mods = {_module_name(p): p for p in _modules()}
    graph: dict[str, set[str]] = {}
    for name, path in mods.items():
        deps: set[str] = set()
        for imp in _runtime_imports(ast.parse(path.read_text(), filename=str(path))):
            if isinstance(imp, ast.Import):
                deps.update(a.name for a in imp.names if a.name in mods)
            elif imp.module:
                pkg_dir = ROOT.joinpath(*imp.module.split("."))
                for a in imp.names:
                    full = f"{imp.module}.{a.name}"
                    if full in mods:
                        deps.add(full)
                    elif pkg_dir.is_dir() and any(pkg_dir.glob(f"{a.name}.*")):
                        continue  # a compiled extension module
                    elif imp.module in mods:
                        deps.add(imp.module)
        deps.discard(name)
        graph[name] = deps
    return graph


def _circles(graph: dict[str, set[str]]) -> list[frozenset[str]]:
    """The strongly connected components with more than one module (Tarjan, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    out: list[frozenset[str]] = []
    for root in sorted(graph):
        if root in index:
            continue
        work = [(root, iter(sorted(graph[root])))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        while work:
            v, it = work[-1]
            w = next(it, None)
            if w is not None:
                if w not in index:
                    index[w] = low[w] = len(index)
                    stack.append(w)
                    on_stack.add(w)
                    work.append((w, iter(sorted(graph[w]))))
                elif w in on_stack:
                    low[v] = min(low[v], index[w])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[v])
            if low[v] == index[v]:
                comp: set[str] = set()
                while True:
                    w = stack.pop()
                    on_stack.discard(w)
                    comp.add(w)
                    if w == v:
                        break
                if len(comp) > 1:
                    out.append(frozenset(comp))
    return out


def test_circle_finder_finds_circles() -> None:
    graph = {"a.x": {"a.y"}, "a.y": {"a.z"}, "a.z": {"a.x", "a.w"}, "a.w": set(), "b.v": {"b.v"}}
    assert _circles(graph) == [frozenset({"a.x", "a.y", "a.z"})]


def test_no_import_circle() -> None:
    found = set(_circles(_import_graph()))
    new = sorted(sorted(c) for c in found - KNOWN_CIRCLES)
    assert not new, f"import circles (a module imports, directly or through others, a module that imports it): {new}"
    gone = sorted(sorted(c) for c in KNOWN_CIRCLES - found)
    assert not gone, f"these circles are gone: remove them from KNOWN_CIRCLES: {gone}"
