"""A package's private modules are its own: no ``steadystream.A._x`` imported from outside A.

What another package needs is public in its package (a name on its face, or a public module),
or moves to the package that owns it. The modules directly under ``steadystream`` that start
with ``_`` (``_clock``, ``_build``, ...) are the whole package's shared infrastructure: every
module is inside ``steadystream``, so the rule lets any of them import those. Every import
counts, as for import cycles (tests/support/imports.py): relative, type-only and lazy ones too.
"""

from __future__ import annotations

import ast
from pathlib import Path

from tests.support.imports import imported, module_named, modules, package_of

SRC = Path(__file__).parents[1] / "src"


def owner_of_private(module: str) -> str | None:
    """The package whose private module ``module`` is (or is inside), or None if it is public.

    ``pkg.metrics._segments`` belongs to ``pkg.metrics``; ``pkg._clock`` to ``pkg``;
    dunder modules (``__about__``, ``__main__``) are public.
    """
    parts = module.split(".")
    for depth, part in enumerate(parts[1:], start=1):
        if part.startswith("_") and not (part.startswith("__") and part.endswith("__")):
            return ".".join(parts[:depth])
    return None


def private_imports_across_packages(root: Path) -> list[str]:
    """``file:line imports X, private to P`` for each import of a private module of package P
    by a module outside P."""
    known = modules(root)
    found = set()
    for name, path in known.items():
        if path.suffix != ".py":
            continue
        tree = ast.parse(path.read_text(encoding="utf-8"))
        for line, target in imported(tree, package_of(name, path)):
            resolved = module_named(target, known)
            owner = None if resolved is None else owner_of_private(resolved)
            if owner is not None and name != owner and not name.startswith(f"{owner}."):
                where = path.relative_to(root.parent).as_posix()
                found.add((where, line, f"imports {resolved}, private to {owner}"))
    return [f"{where}:{line} {what}" for where, line, what in sorted(found)]


def test_no_private_module_is_imported_from_another_package() -> None:
    found = private_imports_across_packages(SRC)
    assert not found, (
        "private modules imported from another package (make what is shared public in its"
        " package):\n" + "\n".join(found)
    )


def test_every_kind_of_import_of_a_private_module_is_found(tmp_path: Path) -> None:
    root = tmp_path / "src"
    files = {
        "__init__.py": "",
        "_clock.py": "",  # the package's own infrastructure: anyone inside may import it
        "user.py": "from pkg._clock import now\nimport pkg.a\n",
        "a/__init__.py": "from pkg.a._x import X\n",  # its own package's face
        "a/_x.py": "from ._y import Y\nX = 1\n",  # inside the package: allowed
        "a/_y.py": "Y = 1\n",
        "a/public.py": "def _helper(): ...\n",
        "a/inner/__init__.py": "",
        "a/inner/deep.py": "from .._x import X\n",  # a subpackage of the owner: allowed
        "b/__init__.py": "",
        "b/absolute.py": "from pkg.a._x import X\n",
        "b/relative.py": "from ..a import _y\n",
        "b/typed.py": (
            "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    import pkg.a._x\n"
        ),
        "b/lazy.py": "def f():\n    import importlib\n    importlib.import_module('pkg.a._y')\n",
        # names, not modules: the face of a, and a private function of a public module
        "b/fine.py": "from pkg.a import X\nfrom pkg.a.public import _helper\n",
        "b/__main__.py": "from pkg.a import public\n",
    }
    for name, text in files.items():
        path = root / "pkg" / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")
    assert private_imports_across_packages(root) == [
        "src/pkg/b/absolute.py:1 imports pkg.a._x, private to pkg.a",
        "src/pkg/b/lazy.py:3 imports pkg.a._y, private to pkg.a",
        "src/pkg/b/relative.py:1 imports pkg.a._y, private to pkg.a",
        "src/pkg/b/typed.py:3 imports pkg.a._x, private to pkg.a",
    ]
