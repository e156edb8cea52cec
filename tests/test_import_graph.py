"""The package's modules import one another in one direction: no import circle, so a reader
can follow a module to what it uses and never come back to where they started."""

from __future__ import annotations

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parent.parent / "webhook"


def _module(path: Path) -> str:
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _family(one: str, other: str) -> bool:
    return one.startswith(other + ".") or other.startswith(one + ".")


def import_graph() -> dict[str, set[str]]:
    """Each module of the package and the modules of the package it imports, wherever in it
    (a function's or a TYPE_CHECKING block's import is a dependency a reader follows too).
    A package and its own modules are one unit: a registry in `formats/__init__.py` naming
    the formats, each importing the base class from it, is no circle to follow."""
    modules = {_module(path): path for path in PACKAGE.rglob("*.py")}
    graph: dict[str, set[str]] = {}
    for name, path in modules.items():
        found: set[str] = set()
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                for alias in node.names:
                    child = f"{node.module}.{alias.name}"
                    found.add(child if child in modules else node.module)
            elif isinstance(node, ast.Import):
                found.update(alias.name for alias in node.names)
        graph[name] = {module for module in found if module in modules and module != name
                       and not _family(name, module)}
    return graph


def circles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected groups of more than one module (Tarjan's algorithm)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found: list[list[str]] = []

    def visit(module: str) -> None:
        index[module] = low[module] = len(index)
        stack.append(module)
        for other in sorted(graph[module]):
            if other not in index:
                visit(other)
                low[module] = min(low[module], low[other])
            elif other in stack:
                low[module] = min(low[module], index[other])
        if low[module] == index[module]:
            group = []
            while True:
                member = stack.pop()
                group.append(member)
                if member == module:
                    break
            if len(group) > 1:
                found.append(sorted(group))

    for module in sorted(graph):
        if module not in index:
            visit(module)
    return found


def test_the_graph_is_read():
    graph = import_graph()
    assert "webhook.engine.claims" in graph["webhook.engine.evaluate"]
    assert "webhook.engine.workload" in graph["webhook.engine.claims"]


def test_circles_are_found():
    assert circles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]


def test_no_import_circle():
    assert circles(import_graph()) == []
