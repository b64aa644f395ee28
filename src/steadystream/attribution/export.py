"""Stall time by cause as counters, for Prometheus and OpenTelemetry (docs/attribution.md#export).

Pure: :func:`stall_totals` turns an :class:`Explanation` into one row per label attribution
may give (:data:`ATTRIBUTABLE`, the causes catalogue and ``unknown``: a bounded label set,
nothing from the input), and :class:`StallCollector` serves them as Prometheus metric
families. Writing the file and opening the OTLP exporter are the CLI's work.

- ``steadystream_stall_seconds_total{cause}``: stall time from the shares (a stall split
  between two causes adds to both);
- ``steadystream_stalls_total{cause}``: stalls counted once each, by their largest share.

Every label is present, at zero when no stall had it, so a rate over the series needs no
``absent()``.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Final

from prometheus_client.metrics_core import CounterMetricFamily, Metric
from prometheus_client.registry import Collector

from steadystream.attribution.causes import ATTRIBUTABLE
from steadystream.attribution.explain import Explanation

__all__ = [
    "CAUSE_ATTRIBUTE",
    "STALL_TIME_METRIC",
    "CauseTotal",
    "StallCollector",
    "stall_totals",
]

STALL_TIME_METRIC: Final = "steadystream.stall.time"
"""The OpenTelemetry counter of stall time (s), by :data:`CAUSE_ATTRIBUTE`."""
CAUSE_ATTRIBUTE: Final = "steadystream.stall.cause"
"""Its attribute: one of :data:`ATTRIBUTABLE`."""


@dataclass(frozen=True, slots=True)
class CauseTotal:
    """One cause's stall time (from the shares) and stalls (by largest share)."""

    cause: str
    seconds: float
    stalls: int


def stall_totals(explanation: Explanation) -> list[CauseTotal]:
    """A row per label attribution may give, in the catalogue's order, zeros included."""
    seconds = dict.fromkeys(ATTRIBUTABLE, 0.0)
    stalls = dict.fromkeys(ATTRIBUTABLE, 0)
    for stall in explanation.stalls:
        _check(stall.cause)
        stalls[stall.cause] += 1
        for share in stall.parts:
            _check(share.cause)
            seconds[share.cause] += share.fraction * stall.duration_s
    return [CauseTotal(cause, seconds[cause], stalls[cause]) for cause in ATTRIBUTABLE]


def _check(cause: str) -> None:
    # the rules name only catalogued causes; a label outside them would grow the series
    if cause not in ATTRIBUTABLE:
        raise ValueError(f"stall cause {cause!r} is not one of {', '.join(ATTRIBUTABLE)}")


class StallCollector(Collector):
    """The totals as Prometheus counters (register it in a registry of its own)."""

    def __init__(self, totals: list[CauseTotal]) -> None:
        self._totals = totals

    def collect(self) -> Iterator[Metric]:
        seconds = CounterMetricFamily(
            "steadystream_stall_seconds",
            "Stall time by cause, from each stall's shares (steadystream explain).",
            labels=["cause"],
            unit="seconds",
        )
        stalls = CounterMetricFamily(
            "steadystream_stalls",
            "Stalls by the cause of their largest share (steadystream explain).",
            labels=["cause"],
        )
        for total in self._totals:
            seconds.add_metric([total.cause], total.seconds)
            stalls.add_metric([total.cause], total.stalls)
        yield seconds
        yield stalls
