"""Which build of the relay's hot path runs here: compiled by Cython, or its Python source.

The modules every upstream read goes through (the SSE cut, the stamped connection's reads,
a stream's line) are written once, in Python, as ``x_py`` modules. Where the package was
built with a compiler (setup.py), each has a compiled twin ``x_c``: the same source compiled
by Cython, with its types declared beside it in ``x_c.pxd`` (aiohttp's way with its
websocket reader). :func:`twin` picks the compiled one where it was built and is wanted;
elsewhere, and with ``STEADYSTREAM_NATIVE=0``, the Python source runs. Both give the same
bytes and records: every relay test runs on both (tests/conftest.py ``build``).
"""

from __future__ import annotations

import importlib
import os
from types import ModuleType

__all__ = ["builds", "compiled_wanted", "describe", "twin"]

_SWITCH = "STEADYSTREAM_NATIVE"


def compiled_wanted() -> bool:
    """False when ``STEADYSTREAM_NATIVE=0`` asks for the Python build."""
    return os.environ.get(_SWITCH, "1").strip() not in ("0", "false", "no", "off")


# Each source's compiled twin, or None, once looked up: twin() runs for every stream (its
# line, tee, connection, decoder and dialect), and an import, even of a module imported
# already, takes the import system's lock and walk each time.
_found: dict[str, ModuleType | None] = {}


def _compiled(source: ModuleType) -> ModuleType | None:
    name = source.__name__
    try:
        return _found[name]
    except KeyError:
        pass
    if not name.endswith("_py"):
        raise ValueError(f"{name} is not the Python source of a compiled twin (*_py)")
    try:
        module: ModuleType | None = importlib.import_module(f"{name[:-3]}_c")
    except ImportError:
        module = None
    # A twin is compiled or it is not there (setup.py generates its source at build time).
    if module is not None and (module.__file__ or "").endswith(".py"):
        module = None
    _found[name] = module
    return module


def twin(source: ModuleType) -> ModuleType:
    """The module to run for ``source`` (an ``x_py`` module): its compiled twin ``x_c``
    where it was built and is wanted, else ``source`` itself."""
    if not compiled_wanted():
        return source
    compiled = _compiled(source)
    return compiled if compiled is not None else source


def builds(source: ModuleType) -> list[ModuleType]:
    """Every build of ``source`` here, the Python one first (for tests)."""
    compiled = _compiled(source)
    return [source] if compiled is None else [source, compiled]


def describe(source: ModuleType) -> str:
    """Which build of ``source`` runs, and why, in a few words for a start line."""
    if twin(source) is not source:
        return "the compiled build"
    if not compiled_wanted():
        return f"the Python build ({_SWITCH}=0)"
    return "the Python build (no compiled build here: installed without a C compiler)"
