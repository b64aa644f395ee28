"""Headline cards: the run's key numbers, each with its baseline and the change.

A change is judged by the metric's direction in the catalogue (``metrics.FLEET_CATALOGUE``):
lower is better for latencies, stalls and the unstable share, higher for ITL goodput. A change
within 1% of the larger of the two values counts as the same, so run-to-run noise is not
painted as a regression.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from steadystream._units import format_duration
from steadystream.metrics import FLEET_CATALOGUE, FleetMetrics, MetricInfo

__all__ = ["SAME_WITHIN", "Card", "headline_cards"]

SAME_WITHIN = 0.01

Verdict = Literal["better", "worse", "same"]

# The cards in reading order, each with the id of the chart that shows it.
_CARDS = (
    ("ttft_p50_s", "ttft"),
    ("ttft_p95_s", "ttft"),
    ("p50_of_p99_s", "gap-cdfs"),
    ("p99_of_p99_s", "gap-cdfs"),
    ("p99_of_worst_gap_s", "gap-cdfs"),
    ("goodput", "gap-cdfs"),
    ("unstable_share", "stall-map"),
    ("stalls_per_1k_tokens", "stall-map"),
)
# After the TTFT cards where the run or its baseline reasoned: the wait for the first
# reasoning token, apart from TTFT (the answer's first token).
_REASONING_CARDS = (("ttfr_p50_s", "ttft"), ("ttfr_p99_s", "ttft"))


@dataclass(frozen=True, slots=True)
class Card:
    """One headline number: its catalogue entry, the run's value and the baseline's."""

    info: MetricInfo
    note: str  # what exactly it is, in a few words, with the run's settings written in
    value: float | None
    baseline: float | None
    chart: str  # the id of the chart that shows it

    @property
    def key(self) -> str:
        """The :class:`FleetMetrics` field."""
        return self.info.name

    @property
    def label(self) -> str:
        return self.info.header

    @property
    def change(self) -> float | None:
        if self.value is None or self.baseline is None:
            return None
        return self.value - self.baseline

    @property
    def verdict(self) -> Verdict | None:
        change = self.change
        if change is None or self.value is None or self.baseline is None:
            return None
        scale = max(abs(self.value), abs(self.baseline))
        if abs(change) <= SAME_WITHIN * scale:
            return "same"
        if self.info.better is None:
            return None  # neither way is better: a change, not a verdict
        return "better" if (change < 0) == (self.info.better == "lower") else "worse"

    @property
    def shown(self) -> str:
        return self.info.show(self.value)

    @property
    def baseline_shown(self) -> str:
        return self.info.show(self.baseline)

    @property
    def change_shown(self) -> str:
        """The change in the card's unit, with the relative change where it means something."""
        change = self.change
        if change is None or self.baseline is None:
            return "—"
        if change == 0:
            return "no change"
        sign = "+" if change > 0 else "−"
        if self.info.unit == "share":
            return f"{sign}{abs(change) * 100:.1f} pts"
        amount = (
            format_duration(abs(change) * 1e9)
            if self.info.unit == "seconds"
            else f"{abs(change):.2f}"
        )
        relative = change / abs(self.baseline) if self.baseline else 0.0
        if abs(relative) < 0.005:
            return f"{sign}{amount}"
        return f"{sign}{amount} ({sign}{abs(relative):.0%})"


def headline_cards(
    fleet: FleetMetrics,
    baseline: FleetMetrics | None = None,
    *,
    uncompared: frozenset[str] = frozenset(),
) -> list[Card]:
    """The cards of a report, in reading order; TTFR's only where a stream reasoned. The
    cards named in ``uncompared`` show no change from the baseline (the two runs' figures
    do not measure the same thing: one was re-chunked on the way, the other not)."""
    threshold = format_duration(fleet.stall_threshold_s * 1e9)
    target = format_duration(fleet.ttft_target_s * 1e9)
    shown = list(_CARDS)
    if fleet.reasoning_streams or (baseline is not None and baseline.reasoning_streams):
        after_ttft = shown.index(("ttft_p95_s", "ttft")) + 1
        shown[after_ttft:after_ttft] = _REASONING_CARDS
    cards = []
    for key, chart in shown:
        info = FLEET_CATALOGUE[key]
        note = info.describe(threshold=threshold, target=target)
        before = None if baseline is None or key in uncompared else getattr(baseline, key)
        if baseline is not None and key in uncompared:
            note += "; not compared with the baseline: one run's chunks were re-cut on the way"
        cards.append(Card(info, note, getattr(fleet, key), before, chart))
    return cards
