"""Imports flow one way: no module of steadystream imports, however indirectly, itself.

Every import counts: at module level, under ``TYPE_CHECKING`` and inside functions, and
``from package import name`` counts the package's ``__init__`` too (it runs first). A cycle
is a concept split in two (STYLE.md, "Imports flow one way").
"""

from __future__ import annotations

import ast
import graphlib
from pathlib import Path

import steadystream

SOURCE = Path(steadystream.__file__).resolve().parent
PACKAGE = "steadystream"


def _modules() -> dict[str, Path]:
    found = {}
    for path in SOURCE.rglob("*.py"):
        parts = [PACKAGE, *path.relative_to(SOURCE).with_suffix("").parts]
        if parts[-1] == "__init__":
            parts.pop()
        found[".".join(parts)] = path
    return found


def _imported(node: ast.AST, package: str) -> list[str]:
    if isinstance(node, ast.Import):
        return [alias.name for alias in node.names]
    if isinstance(node, ast.ImportFrom):
        base = node.module or ""
        if node.level:
            kept = package.split(".")[: len(package.split(".")) - node.level + 1]
            base = ".".join([*kept, base] if base else kept)
        return [base, *(f"{base}.{alias.name}" for alias in node.names)]
    return []


def import_graph() -> dict[str, set[str]]:
    """Each module of the package and the modules of the package it imports."""
    modules = _modules()

    def owner(name: str) -> str | None:
        while name and name not in modules:
            name = name.rpartition(".")[0]
        return name or None

    graph: dict[str, set[str]] = {}
    for module, path in modules.items():
        package = module if path.name == "__init__.py" else module.rpartition(".")[0]
        targets = {
            owner(name)
            for node in ast.walk(ast.parse(path.read_text(encoding="utf-8")))
            for name in _imported(node, package)
        }
        graph[module] = {t for t in targets if t is not None and t != module}
    return graph


def test_the_graph_sees_every_kind_of_import() -> None:
    graph = import_graph()
    assert len(graph) > 100
    # A function-level import (analyze's lazy one) and a package imported through.
    assert "steadystream.cli._render" in graph["steadystream.cli.analyze"]
    assert "steadystream.metrics" in graph["steadystream.findings"]


def test_no_import_cycles() -> None:
    try:
        graphlib.TopologicalSorter(import_graph()).prepare()
    except graphlib.CycleError as exc:
        cycle = " -> ".join(exc.args[1])
        raise AssertionError(f"import cycle: {cycle}") from None
