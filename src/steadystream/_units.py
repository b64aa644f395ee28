"""Durations and shares as people type and read them: the one place numbers get their form.

``400ms``, ``1.5s``, ``500us``, ``2m`` are read by :func:`parse_duration`, ``64KiB``,
``4MB`` by :func:`parse_size`; every duration,
share and plain number the CLI, the report, the gate and the demo show is written by the
formatters here (as rich keeps every size in ``filesize.py``), so the same value reads the
same everywhere. Undefined values (None, NaN) are shown as ``—``, never as 0.
"""

from __future__ import annotations

import math
import re

from steadystream._exceptions import SpecError

__all__ = [
    "MAX_DURATION_NS",
    "UNDEFINED",
    "format_count",
    "format_duration",
    "format_number",
    "format_seconds",
    "format_share",
    "parse_duration",
    "parse_size",
]

UNDEFINED = "—"
"""How a value that could not be computed is shown."""

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
_SIZE_UNITS = {
    "": 1,
    "B": 1,
    "KB": 1000,
    "KiB": 1024,
    "MB": 1000**2,
    "MiB": 1024**2,
    "GB": 1000**3,
    "GiB": 1024**3,
}
MAX_DURATION_NS = 2**63 - 1
"""The longest duration read: durations are held as signed 64-bit nanoseconds (numpy,
Arrow, the timeline files), and one past this would overflow there (about 292 years)."""

_SIZE = re.compile(r"^\s*([0-9]+)\s*([A-Za-z]*)\s*$")
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
    ns = round(value)
    if ns > MAX_DURATION_NS:
        raise SpecError(
            f"{name}: {text!r} is longer than the longest duration held"
            f" ({MAX_DURATION_NS}ns, about 292 years)"
        )
    return ns


def parse_size(text: str, *, name: str = "size") -> int:
    """Parse ``text`` (``4096``, ``64KiB``, ``4MB``, ``1MiB``) into bytes.

    Raises :class:`SpecError` naming ``name`` and the value when it cannot be read.
    """
    match = _SIZE.match(text)
    if match is None:
        raise SpecError(f"{name}: cannot read {text!r} as a size (examples: 4096, 64KiB, 4MB)")
    number, unit = match.groups()
    if unit not in _SIZE_UNITS:
        accepted = ", ".join(u for u in _SIZE_UNITS if u)
        raise SpecError(f"{name}: unknown unit {unit!r} in {text!r} (accepted: {accepted})")
    # (int() of a number past 4,300 digits is a ValueError of its own: never made)
    size = int(number) * _SIZE_UNITS[unit] if len(number.lstrip("0")) <= 20 else _MAX_SIZE + 1
    if size > _MAX_SIZE:
        raise SpecError(f"{name}: {_shown(text)} is larger than the largest size held (2**63-1)")
    return size


_MAX_SIZE = 2**63 - 1


def _shown(text: str) -> str:
    return repr(text) if len(text) <= 40 else f"{text[:40]!r}... ({len(text):,} characters)"


def format_duration(ns: int | float | None) -> str:
    """A short human form: ``850µs``, ``33.0ms``, ``2.00s``; ``—`` for None."""
    if _undefined(ns):
        return UNDEFINED
    assert ns is not None
    magnitude = abs(ns)
    if magnitude < 1_000:
        return f"{ns:.0f}ns"
    if magnitude < 1_000_000:
        return f"{ns / 1_000:.0f}µs"
    if magnitude < 1_000_000_000:
        return f"{ns / 1_000_000:.1f}ms"
    return f"{ns / 1_000_000_000:.2f}s"


def format_seconds(seconds: float | None, *, narrow: bool = False) -> str:
    """A duration given in seconds; ``narrow`` for tight columns: ``0``, ``4.2ms``, ``85ms``.

    The wide form is :func:`format_duration`'s (``33.0ms``, ``2.00s``); the narrow one drops
    the decimal above 10 ms, where it is noise at a glance.
    """
    if _undefined(seconds):
        return UNDEFINED
    assert seconds is not None
    if not narrow:
        return format_duration(seconds * 1e9)
    magnitude = abs(seconds)
    if magnitude == 0:
        return "0"
    if magnitude < 1e-3:
        return f"{seconds * 1e6:.0f}µs"
    if magnitude < 10e-3:
        return f"{seconds * 1e3:.1f}ms"
    if magnitude < 1:
        return f"{seconds * 1e3:.0f}ms"
    return f"{seconds:.2f}s"


def format_share(share: float | None, *, narrow: bool = False) -> str:
    """A share of 0-1 as a percentage: ``87.5%``, or ``88%`` when ``narrow``."""
    if _undefined(share):
        return UNDEFINED
    return f"{share:.0%}" if narrow else f"{share:.1%}"


def format_count(value: float | None) -> str:
    """A whole number with thousands separated: ``1,250``."""
    if _undefined(value):
        return UNDEFINED
    return f"{value:,.0f}"


def format_number(value: float | None, digits: int = 2) -> str:
    """A plain number (a ratio, a score, a count) with ``digits`` decimals."""
    if _undefined(value):
        return UNDEFINED
    return f"{value:.{digits}f}"


def _undefined(value: float | None) -> bool:
    return value is None or (isinstance(value, float) and math.isnan(value))
