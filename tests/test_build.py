"""Building the package with too old a setuptools says what to install.

``pip install --no-build-isolation`` builds with the setuptools already installed, not the one
pyproject.toml asks for; before 77 it refused pyproject.toml's PEP 639 ``license`` with a
schema error that named no cure. setup.py runs before setuptools reads that file: it is run
here against a stand-in setuptools of each version (no build, no network, well under a second).
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent

_STAND_IN = """\
__version__ = {version!r}


class Extension:
    def __init__(self, *args, **kwargs):
        pass


def setup(**kwargs):
    print("setup called")
"""


def needed_setuptools() -> int:
    """The major version pyproject.toml's build requirement asks for."""
    requires = tomllib.loads((ROOT / "pyproject.toml").read_text())["build-system"]["requires"]
    found = [re.fullmatch(r"setuptools>=(\d+)", r) for r in requires]
    (match,) = [m for m in found if m is not None]
    return int(match[1])


def run_setup(tmp_path: Path, version: str) -> subprocess.CompletedProcess[str]:
    package = tmp_path / version / "setuptools"
    package.mkdir(parents=True)
    (package / "__init__.py").write_text(_STAND_IN.format(version=version))
    code = (
        f"import sys, runpy; sys.path.insert(0, {str(package.parent)!r}); "
        f"runpy.run_path({str(ROOT / 'setup.py')!r}, run_name='__main__')"
    )
    return subprocess.run(
        [sys.executable, "-c", code],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
        # No compiled twins: the stand-in has no extension machinery for Cython to use.
        env={**os.environ, "STEADYSTREAM_NATIVE": "0"},
    )


def test_an_older_setuptools_is_told_what_to_install(tmp_path: Path) -> None:
    needed = needed_setuptools()
    result = run_setup(tmp_path, f"{needed - 12}.5.0")
    assert result.returncode != 0
    assert "setup called" not in result.stdout
    assert f"pip install 'setuptools>={needed}'" in result.stderr
    assert f"setuptools {needed - 12}.5.0" in result.stderr
    assert "--no-build-isolation" in result.stderr


@pytest.mark.parametrize("version", ["{needed}.0.0", "{later}.2.1", "{later}.0.0.post1", "main"])
def test_a_new_enough_setuptools_builds(tmp_path: Path, version: str) -> None:
    needed = needed_setuptools()
    result = run_setup(tmp_path, version.format(needed=needed, later=needed + 7))
    assert result.returncode == 0, result.stderr
    assert result.stdout == "setup called\n"
