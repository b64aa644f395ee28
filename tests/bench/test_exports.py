"""The bench package's public face, and a command line that starts without loading it."""

from __future__ import annotations

import subprocess
import sys

import steadystream.bench as bench


def test_all_names_exist_and_are_sorted() -> None:
    assert all(hasattr(bench, name) for name in bench.__all__)
    assert list(bench.__all__) == sorted(bench.__all__, key=lambda n: (not n.isupper(), n))


def test_command_modules_import_no_heavy_parts() -> None:
    # bench's options come from steadystream.bench.config; the package's other names (and
    # the HTTP client under them) load on first use.
    heavy = ("aiohttp", "rich", "steadystream.bench.session", "steadystream.bench._public")
    code = (
        "import sys; import steadystream.cli.bench, steadystream.cli.gate; "
        f"print(sorted(m for m in {heavy!r} if m in sys.modules))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"
