"""Every Python snippet in the README and docs imports from the public API only, and runs.

Each ```python block is taken as written and run in a scratch folder that holds what the
docs assume a reader has: ``run.jsonl`` (and ``baseline.jsonl``, ``runs/``), a server where a
snippet names one (the lab's address stands in for ``127.0.0.1:8000``), Ray for the Ray
snippets, Chromium for images. A few names a snippet only gestures at are given to it:
``timelines`` and ``timeline`` (a run's), ``upstream_events`` (an upstream's events) and
``send_to_client``, ``url``. Top-level ``await`` runs as in an asyncio REPL.
"""

from __future__ import annotations

import ast
import asyncio
import re
import shutil
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any, NamedTuple

import pytest

from steadystream import Event, LabServer, read_timelines

ROOT = Path(__file__).resolve().parents[1]
SAMPLE = ROOT / "examples" / "sample-run.jsonl"
_BLOCK = re.compile(r"^```python\n(.*?)^```", re.M | re.S)


class Snippet(NamedTuple):
    where: str
    code: str


def _snippets() -> list[Snippet]:
    found = []
    for path in [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]:
        text = path.read_text()
        for match in _BLOCK.finditer(text):
            line = text.count("\n", 0, match.start()) + 1
            found.append(Snippet(f"{path.relative_to(ROOT)}:{line}", match.group(1)))
    return found


SNIPPETS = _snippets()


def test_the_docs_have_snippets_to_check() -> None:
    assert len(SNIPPETS) >= 10


@pytest.mark.parametrize("snippet", SNIPPETS, ids=[s.where for s in SNIPPETS])
def test_a_snippet_imports_from_the_public_api_only(snippet: Snippet) -> None:
    tree = ast.parse(snippet.code)
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("steadystream"):
            assert node.module == "steadystream", f"{snippet.where}: from {node.module} import"
        elif isinstance(node, ast.Import):
            for alias in node.names:
                assert alias.name.split(".")[0] != "steadystream" or alias.name == "steadystream"


@pytest.fixture(scope="module")
def lab() -> Iterator[LabServer]:
    with LabServer("steady", seed=3) as server:
        yield server


async def _upstream_events() -> AsyncIterator[Event]:
    run = read_timelines(SAMPLE).timelines
    for event in run[0].events()[:20]:
        yield event


async def _send_to_client(event: Event) -> None:
    return None


@pytest.mark.integration
@pytest.mark.parametrize("snippet", SNIPPETS, ids=[s.where for s in SNIPPETS])
def test_a_snippet_runs(
    snippet: Snippet,
    lab: LabServer,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    request: pytest.FixtureRequest,
) -> None:
    monkeypatch.chdir(tmp_path)
    shutil.copy(SAMPLE, tmp_path / "run.jsonl")
    shutil.copy(SAMPLE, tmp_path / "baseline.jsonl")
    (tmp_path / "runs").mkdir()
    shutil.copy(SAMPLE, tmp_path / "runs" / "run.jsonl")
    code = snippet.code.replace("http://127.0.0.1:8000/v1", lab.base_url)
    if "ray=True" in code or "RayBench" in code:
        request.getfixturevalue("ray_local")
    if "write_images" in code:
        request.getfixturevalue("chromium")
    run = read_timelines(SAMPLE).timelines
    namespace: dict[str, Any] = {
        "__name__": "__snippet__",
        "timelines": run,
        "timeline": run[0],
        "upstream_events": _upstream_events(),
        "send_to_client": _send_to_client,
        "url": lab.base_url,
    }
    compiled = compile(code, snippet.where, "exec", flags=ast.PyCF_ALLOW_TOP_LEVEL_AWAIT)
    result = eval(compiled, namespace)  # a coroutine where the snippet awaits at top level
    if asyncio.iscoroutine(result):
        asyncio.run(result)
