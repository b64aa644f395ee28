"""The compiled twins of the relay's hot path; everything else is in pyproject.toml.

Each module ``x_py.py`` listed in ``TWINS`` is compiled by Cython, with the types of
``x_c.pxd`` beside it, into the extension ``x_c`` (steadystream._build picks it at run time):
one Python source, two builds, as aiohttp builds its websocket reader. The source is copied
to ``build/cython`` under the twin's name first, since Cython names a module after its file.
Where Cython or a C compiler is missing the package installs without the twins, and the
same code runs as Python; an install never fails for want of a compiler.
"""

import os
import shutil
import sys
from pathlib import Path

import setuptools
from setuptools import Extension, setup

# pyproject.toml names the license as PEP 639 has it (``license = "Apache-2.0"``), which
# setuptools reads from version 77 on; older ones refuse the file with a schema error that
# does not say what to do. The build requirement asks for 77, but ``pip install
# --no-build-isolation`` builds with whatever setuptools is installed: say so here, before
# setuptools reads the file. (The older table form, ``{text = ...}``, is deprecated by
# setuptools 77 and due to be refused from 2027.)
_NEEDED = 77
try:
    _found = int(setuptools.__version__.split(".")[0])
except ValueError:  # a version we cannot read: let setuptools speak for itself
    _found = _NEEDED
if _found < _NEEDED:
    sys.exit(
        f"steadystream needs setuptools>={_NEEDED} to build (pyproject.toml's license is a"
        f" PEP 639 string); this build has setuptools {setuptools.__version__}. Run"
        f" `pip install 'setuptools>={_NEEDED}'` first (pip's --no-build-isolation builds with"
        " the setuptools already installed), or install without --no-build-isolation."
    )

TWINS = [
    "steadystream.protocol._sse",
    "steadystream.protocol._chat",
    "steadystream.stamped._connection",
    "steadystream.gateway._line",
    "steadystream.gateway.resume._tee",
]
_HERE = Path(__file__).resolve().parent


def compiled_twins() -> list[Extension]:
    """The twins' extensions, or none where Cython is not installed (then said so)."""
    if os.environ.get("STEADYSTREAM_NATIVE", "1") == "0":
        return []
    try:
        from Cython.Build import cythonize
    except ImportError:
        print("steadystream: Cython not found; installing the Python build only", file=sys.stderr)
        return []
    build = _HERE / "build" / "cython"
    sources = []
    for name in TWINS:
        parts = name.split(".")
        folder = build.joinpath(*parts[:-1])
        folder.mkdir(parents=True, exist_ok=True)
        for depth in range(1, len(parts)):  # packages, so Cython names the module in full
            build.joinpath(*parts[:depth], "__init__.py").touch()
        origin = _HERE.joinpath("src", *parts[:-1])
        source = folder / f"{parts[-1]}_c.py"
        _copy_if_changed(origin / f"{parts[-1]}_py.py", source)
        _copy_if_changed(origin / f"{parts[-1]}_c.pxd", folder / f"{parts[-1]}_c.pxd")
        sources.append(str(source.relative_to(_HERE)))
    extensions = cythonize(
        sources,
        compiler_directives={
            "language_level": 3,
            "annotation_typing": False,  # the types are the .pxd's: hints stay hints
            "freethreading_compatible": True,
        },
        quiet=True,
    )
    for extension in extensions:
        extension.optional = True  # no compiler: the Python build, not a failed install
        extension.extra_compile_args = ["-O2"]
    return extensions


def _copy_if_changed(origin: Path, copy: Path) -> None:
    if not copy.exists() or copy.read_bytes() != origin.read_bytes():
        shutil.copyfile(origin, copy)


setup(ext_modules=compiled_twins())
