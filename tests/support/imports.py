"""What the modules of a source tree import, read with ``ast`` (no module is imported).

Every import counts, wherever it is written: at module level, under ``TYPE_CHECKING``, inside
a function, and ``importlib.import_module`` with a literal name. ``from package import name``
counts as importing the package (and the submodule, when ``name`` is one).
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path


def modules(root: Path) -> dict[str, Path]:
    """Dotted module name -> file, for every module under ``root``.

    A C extension (its ``.c`` source: ``stamped/_lane.c``) is a module too, one that imports
    nothing of the project; without it, an import of it would read as one of its package.
    """
    found = {}
    for path in [*root.rglob("*.py"), *root.rglob("*.c")]:
        parts = list(path.relative_to(root).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        found[".".join(parts)] = path
    return found


def package_of(name: str, path: Path) -> str:
    """The package a relative import in module ``name`` (file ``path``) starts from."""
    return name if path.name == "__init__.py" else name.rpartition(".")[0]


def imported(tree: ast.AST, package: str) -> Iterator[tuple[int, str]]:
    """(line, dotted name) of every import in ``tree``, relative ones resolved against
    ``package``."""
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            yield from ((node.lineno, alias.name) for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parent = package.split(".")[: len(package.split(".")) - (node.level - 1)]
                base = ".".join([*parent, base] if base else parent)
            yield node.lineno, base
            yield from ((node.lineno, f"{base}.{alias.name}") for alias in node.names)
        elif isinstance(node, ast.Call) and node.args:
            func, first = node.func, node.args[0]
            name = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", "")
            literal = isinstance(first, ast.Constant) and isinstance(first.value, str)
            if name == "import_module" and literal:
                yield node.lineno, first.value


def module_named(name: str, known: dict[str, Path]) -> str | None:
    """The module of ``known`` that ``name`` names (a name inside a module is that module)."""
    while name and name not in known:
        name = name.rpartition(".")[0]
    return name or None
