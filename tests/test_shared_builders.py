"""Tests share builders through tests/support/: a test module imports no conftest and no other
test module, and a conftest defines fixtures only (pytest finds those by itself)."""

from __future__ import annotations

import ast
from pathlib import Path

from tests.support.imports import imported, module_named, modules, package_of

TESTS = Path(__file__).parent


def _is_fixture(node: ast.expr) -> bool:
    target = node.func if isinstance(node, ast.Call) else node
    return isinstance(target, ast.Attribute) and target.attr == "fixture"


def misplaced_builders(root: Path) -> list[str]:
    """``file:line what`` for each import of a conftest or a test module, and each public name
    a conftest defines that is not a fixture."""
    # named as imported: tests.gateway.conftest, with ``root`` (tests/) the top package
    known = {".".join(filter(None, [root.name, n])): path for n, path in modules(root).items()}
    found = set()
    for name, path in known.items():
        if path.suffix != ".py":
            continue
        where = path.relative_to(root.parent).as_posix()
        tree = ast.parse(path.read_text(encoding="utf-8"))
        for line, target in imported(tree, package_of(name, path)):
            resolved = module_named(target, known)
            last = (resolved or "").rpartition(".")[2]
            if resolved != name and (last == "conftest" or last.startswith("test_")):
                found.add((where, line, f"imports {resolved}"))
        if path.name != "conftest.py":
            continue
        for node in tree.body:
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
                fixture = any(_is_fixture(d) for d in node.decorator_list)
                if not fixture and not node.name.startswith("_"):
                    found.add((where, node.lineno, f"defines {node.name}, not a fixture"))
            elif isinstance(node, ast.Assign | ast.AnnAssign):
                targets = node.targets if isinstance(node, ast.Assign) else [node.target]
                for each in targets:
                    if isinstance(each, ast.Name) and not each.id.startswith("_"):
                        found.add((where, node.lineno, f"defines {each.id}, not a fixture"))
    return [f"{where}:{line} {what}" for where, line, what in sorted(found)]


def test_builders_are_shared_through_tests_support() -> None:
    found = misplaced_builders(TESTS)
    assert not found, "builders shared outside tests/support/:\n" + "\n".join(found)


def test_imports_of_conftests_and_test_modules_and_builders_in_a_conftest_are_found(
    tmp_path: Path,
) -> None:
    root = tmp_path / "tests"
    files = {
        "__init__.py": "",
        "conftest.py": (
            "import pytest\n"
            "LIMIT = 3\n"  # a builder's constant
            "def make(): ...\n"  # a builder
            "def _helper(): ...\n"  # the conftest's own
            "@pytest.fixture\ndef made(): ...\n"
            "@pytest.fixture(scope='session')\ndef kept(): ...\n"
        ),
        "support/__init__.py": "",
        "support/streams.py": "def make(): ...\n",
        "a/__init__.py": "",
        "a/conftest.py": "from tests.support.streams import make\n",  # a conftest may use them
        "a/test_one.py": "from tests.support.streams import make\nfrom .conftest import x\n",
        "a/test_two.py": "def f():\n    from tests.a.test_one import y\n",
        "test_top.py": "from tests import conftest\n",
    }
    for name, text in files.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")
    assert misplaced_builders(root) == [
        "tests/a/test_one.py:2 imports tests.a.conftest",
        "tests/a/test_two.py:2 imports tests.a.test_one",
        "tests/conftest.py:2 defines LIMIT, not a fixture",
        "tests/conftest.py:3 defines make, not a fixture",
        "tests/test_top.py:1 imports tests.conftest",
    ]
