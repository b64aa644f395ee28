"""Imports flow one way: no cycles among the modules of ``src/steadystream``.

Every import counts, wherever it is written: at module level, under ``TYPE_CHECKING``, inside
a function, and ``importlib.import_module`` with a literal name. ``from package import name``
counts as importing the package's ``__init__`` (and the submodule, when ``name`` is one), so
a package whose ``__init__`` imports a submodule that imports names back through the package
is a cycle too. A lazy or type-only import hides a cycle from the interpreter, not from a
reader: the two modules are still one concept split in two.
"""

from __future__ import annotations

import ast
from pathlib import Path

from tests.support.imports import imported, module_named, modules, package_of

SRC = Path(__file__).parents[1] / "src"


def import_graph(root: Path) -> dict[str, set[str]]:
    """Module -> the modules of ``root`` it imports (a name inside a module is that module)."""
    known = modules(root)
    graph: dict[str, set[str]] = {name: set() for name in known}
    for name, path in known.items():
        if path.suffix != ".py":
            continue  # (an extension: no imports of the project)
        tree = ast.parse(path.read_text(encoding="utf-8"))
        for _, target in imported(tree, package_of(name, path)):
            resolved = module_named(target, known)
            if resolved is not None and resolved != name:
                graph[name].add(resolved)
    return graph


def cycles(graph: dict[str, set[str]]) -> list[frozenset[str]]:
    """The strongly connected components with more than one module (Tarjan, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[frozenset[str]] = []
    for start in sorted(graph):
        if start in index:
            continue
        work = [(start, iter(sorted(graph[start])))]
        index[start] = low[start] = len(index)
        stack.append(start)
        on_stack.add(start)
        while work:
            node, targets = work[-1]
            for target in targets:
                if target not in index:
                    index[target] = low[target] = len(index)
                    stack.append(target)
                    on_stack.add(target)
                    work.append((target, iter(sorted(graph[target]))))
                    break
                if target in on_stack:
                    low[node] = min(low[node], index[target])
            else:
                work.pop()
                if work:
                    parent = work[-1][0]
                    low[parent] = min(low[parent], low[node])
                if low[node] == index[node]:
                    component = set()
                    while True:
                        member = stack.pop()
                        on_stack.discard(member)
                        component.add(member)
                        if member == node:
                            break
                    if len(component) > 1:
                        found.append(frozenset(component))
    return found


def _shown(cycle: frozenset[str]) -> str:
    return ", ".join(sorted(cycle))


def test_no_import_cycles() -> None:
    found = sorted(_shown(cycle) for cycle in cycles(import_graph(SRC)))
    assert not found, "import cycles (a concept split in two):\n" + "\n".join(found)


def test_every_kind_of_import_counts(tmp_path: Path) -> None:
    package = tmp_path / "pkg"
    package.mkdir()
    files = {
        "__init__.py": "from pkg.a import A\n",
        "a.py": "from pkg import b\nA = 1\n",  # through the package's __init__
        "b.py": (
            "from typing import TYPE_CHECKING\n"
            "if TYPE_CHECKING:\n    from .c import C\n"  # relative, type-only
        ),
        "c.py": "def f():\n    import pkg.d\nC = 1\n",  # inside a function
        "d.py": "import importlib\nimportlib.import_module('pkg.e')\n",
        "e.py": "from pkg.b import *\n",
        "alone.py": "import os\nimport pkg.a\n",
        "native.py": "import importlib\nimportlib.import_module('pkg._ext')\n",
        "_ext.c": "#include <Python.h>\n",  # an extension module: a leaf
    }
    for name, text in files.items():
        (package / name).write_text(text, encoding="utf-8")
    graph = import_graph(tmp_path)
    assert graph["pkg"] == {"pkg.a"}
    assert graph["pkg.a"] == {"pkg", "pkg.b"}
    assert graph["pkg.b"] == {"pkg.c"}
    assert graph["pkg.d"] == {"pkg.e"}
    assert graph["pkg.alone"] == {"pkg.a"}
    assert graph["pkg.native"] == {"pkg._ext"}  # the extension, not the package
    assert graph["pkg._ext"] == set()
    assert set(cycles(graph)) == {
        frozenset({"pkg", "pkg.a"}),
        frozenset({"pkg.b", "pkg.c", "pkg.d", "pkg.e"}),
    }
