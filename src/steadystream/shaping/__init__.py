"""Pacing: release policies that turn a ragged token stream into a calm one.

A pacer is a pure policy (no clock, no I/O). The same pacer runs live, on an injected clock
(:func:`pace`), and offline over a recorded timeline (:func:`simulate`), with the same
release times. A spec string selects and configures one: ``leaky:interval=33ms,capacity=8``.
docs/pacing.md describes every pacer, its defaults, and what it hides and costs.
"""

from steadystream.shaping.adaptive import Adaptive
from steadystream.shaping.base import (
    DEFAULT_HIGH_WATERMARK,
    DEFAULT_LOW_WATERMARK,
    DEFAULT_TAIL_NS,
    Pacer,
    Param,
)
from steadystream.shaping.flush import Flush
from steadystream.shaping.leaky import Leaky
from steadystream.shaping.live import pace
from steadystream.shaping.passthrough import Passthrough
from steadystream.shaping.phrase import Phrase
from steadystream.shaping.reading import Reading
from steadystream.shaping.rechunk import Rechunk
from steadystream.shaping.simulate import SimulationRun, simulate, simulate_run
from steadystream.shaping.spec import PACERS, describe, format_spec, parse_spec
from steadystream.shaping.whatif import PacerOutcome, Scorecard, WhatIf, what_if

__all__ = [
    "DEFAULT_HIGH_WATERMARK",
    "DEFAULT_LOW_WATERMARK",
    "DEFAULT_TAIL_NS",
    "PACERS",
    "Adaptive",
    "Flush",
    "Leaky",
    "Pacer",
    "PacerOutcome",
    "Param",
    "Passthrough",
    "Phrase",
    "Reading",
    "Rechunk",
    "Scorecard",
    "SimulationRun",
    "WhatIf",
    "describe",
    "format_spec",
    "pace",
    "parse_spec",
    "simulate",
    "simulate_run",
    "what_if",
]
