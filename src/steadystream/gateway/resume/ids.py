"""SSE ``id:`` lines on the events the gateway sends: the one place they are written.

The stamping and the tee that keeps the stamped events are in
:mod:`steadystream.gateway.resume._tee_py` (the rules are told there), compiled by Cython where
the package was built with a compiler (:mod:`steadystream._build`); :func:`tee_build` is the
build that runs, chosen per stream.
"""

from __future__ import annotations

from types import ModuleType

import steadystream.gateway.resume._tee_py as _tee_py
from steadystream._build import twin
from steadystream.gateway.resume._tee_py import StreamTee, stamp_events

__all__ = ["StreamTee", "stamp_events", "tee_build"]


def tee_build() -> ModuleType:
    """The build of the tee that runs: compiled where built and wanted, else Python."""
    return twin(_tee_py)
