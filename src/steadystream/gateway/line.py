"""One stream's relay line: the upstream's body in, the client's bytes out, both edges recorded.

The line and its event cutter are in :mod:`steadystream.gateway._line_py` (the path of a
chunk is drawn there and in docs/gateway.md), compiled by Cython where the package was built
with a compiler (:mod:`steadystream._build`): :func:`line_build` is the build that runs,
chosen per stream.
"""

from __future__ import annotations

from types import ModuleType

import steadystream.gateway._line_py as _line_py
from steadystream._build import describe, twin
from steadystream.gateway._line_py import EventCutter, StreamLine

__all__ = ["EventCutter", "StreamLine", "describe_line", "line_build"]


def line_build() -> ModuleType:
    """The build of the line that runs: compiled where built and wanted, else Python."""
    return twin(_line_py)


def describe_line() -> str:
    """Which build relays, and why, for the gateway's start line."""
    return describe(_line_py)
