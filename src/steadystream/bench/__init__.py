"""The load generator: schedules, a faithful streaming client, runs, a release gate, sweeps.

Split as load tools are (docs/bench.md): *when* to send (:mod:`~steadystream.bench.schedule`),
*what* to send (:mod:`~steadystream.bench.workload`), *send* and record
(:mod:`~steadystream.bench.client`), *drive* a run (:mod:`~steadystream.bench.runner`,
:class:`Bench`; the whole command as one call: :class:`BenchConfig` and :func:`run_bench`),
*judge* it (:mod:`~steadystream.bench.gate`, :mod:`~steadystream.bench.sweep`),
and check the measurement itself (:mod:`~steadystream.bench.lag`,
:mod:`~steadystream.bench.health`, :mod:`~steadystream.bench.fidelity`). Nothing here prints:
progress goes to a :class:`RunProgress`, and the CLI renders it.

The package's names load on first use: ``steadystream bench --help`` reads the options
(:mod:`~steadystream.bench.config`) without importing the HTTP client.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # type checkers see the names where _public imports them
    from steadystream.bench._public import *  # noqa: F403
    from steadystream.bench._public import __all__ as __all__


def __getattr__(name: str) -> Any:
    # PEP 562: the first use of a public name (or of __all__) imports them all.
    if name.startswith("_") and name != "__all__":
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    public = importlib.import_module("steadystream.bench._public")
    if name != "__all__" and name not in public.__all__:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(public, name)
