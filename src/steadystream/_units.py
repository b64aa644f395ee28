"""Durations as people type them: ``400ms``, ``1.5s``, ``500us``, ``2m``."""

from __future__ import annotations

import math
import re

from steadystream._exceptions import SpecError

__all__ = ["format_duration", "parse_duration"]

_UNITS_NS = {
    "ns": 1,
    "us": 1_000,
    "µs": 1_000,
    "ms": 1_000_000,
    "s": 1_000_000_000,
    "m": 60_000_000_000,
    "min": 60_000_000_000,
    "h": 3_600_000_000_000,
}
_DURATION = re.compile(r"^\s*([0-9]*\.?[0-9]+(?:[eE][-+]?[0-9]+)?)\s*([a-zµ]*)\s*$")


def parse_duration(text: str, *, name: str = "duration") -> int:
    """Parse ``text`` into integer nanoseconds; a bare number means seconds.

    Raises :class:`SpecError` naming ``name`` and the value when it cannot be read.
    """
    match = _DURATION.match(text)
    if match is None:
        raise SpecError(
            f"{name}: cannot read {text!r} as a duration (examples: 400ms, 1.5s, 500us)"
        )
    number, unit = match.groups()
    unit = unit or "s"
    if unit not in _UNITS_NS:
        accepted = ", ".join(_UNITS_NS)
        raise SpecError(f"{name}: unknown unit {unit!r} in {text!r} (accepted: {accepted})")
    value = float(number) * _UNITS_NS[unit]
    if not math.isfinite(value):
        raise SpecError(f"{name}: {text!r} is not a finite duration")
    return round(value)


def format_duration(ns: int | float | None) -> str:
    """A short human form: ``850µs``, ``33.0ms``, ``2.00s``; ``—`` for None."""
    if ns is None or (isinstance(ns, float) and math.isnan(ns)):
        return "—"
    magnitude = abs(ns)
    if magnitude < 1_000:
        return f"{ns:.0f}ns"
    if magnitude < 1_000_000:
        return f"{ns / 1_000:.0f}µs"
    if magnitude < 1_000_000_000:
        return f"{ns / 1_000_000:.1f}ms"
    return f"{ns / 1_000_000_000:.2f}s"
