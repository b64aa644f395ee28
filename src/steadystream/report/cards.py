"""Headline cards: the run's key numbers, each with its baseline and the change.

A change is judged by the metric's direction: lower is better for latencies, stalls and the
unstable share, higher for ITL goodput. A change within 1% of the larger of the two values
counts as the same, so run-to-run noise is not painted as a regression.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from steadystream._units import format_duration
from steadystream.metrics import FleetMetrics

__all__ = ["SAME_WITHIN", "Card", "headline_cards"]

SAME_WITHIN = 0.01

Kind = Literal["duration", "share", "rate"]
Verdict = Literal["better", "worse", "same"]


@dataclass(frozen=True, slots=True)
class Card:
    """One headline number; ``key`` is its :class:`FleetMetrics` field."""

    key: str
    label: str
    note: str  # what exactly it is, in a few words
    value: float | None
    baseline: float | None
    kind: Kind
    lower_is_better: bool
    chart: str  # the id of the chart that shows it

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
        return "better" if (change < 0) == self.lower_is_better else "worse"

    @property
    def shown(self) -> str:
        return _show(self.value, self.kind)

    @property
    def baseline_shown(self) -> str:
        return _show(self.baseline, self.kind)

    @property
    def change_shown(self) -> str:
        """The change in the card's unit, with the relative change where it means something."""
        change = self.change
        if change is None or self.baseline is None:
            return "—"
        if change == 0:
            return "no change"
        sign = "+" if change > 0 else "−"
        if self.kind == "share":
            return f"{sign}{abs(change) * 100:.1f} pts"
        amount = (
            format_duration(abs(change) * 1e9) if self.kind == "duration" else f"{abs(change):.2f}"
        )
        relative = change / abs(self.baseline) if self.baseline else 0.0
        if abs(relative) < 0.005:
            return f"{sign}{amount}"
        return f"{sign}{amount} ({sign}{abs(relative):.0%})"


def headline_cards(fleet: FleetMetrics, baseline: FleetMetrics | None = None) -> list[Card]:
    """The cards of a report, in reading order."""
    threshold = format_duration(fleet.stall_threshold_s * 1e9)
    target = format_duration(fleet.ttft_target_s * 1e9)

    def card(
        key: str,
        label: str,
        note: str,
        kind: Kind,
        chart: str,
        *,
        lower_is_better: bool = True,
    ) -> Card:
        value = getattr(fleet, key)
        before = None if baseline is None else getattr(baseline, key)
        return Card(key, label, note, value, before, kind, lower_is_better, chart)

    return [
        card("ttft_p50_s", "TTFT p50", "time to first token, median stream", "duration", "ttft"),
        card("ttft_p95_s", "TTFT p95", "time to first token, 95th percentile", "duration", "ttft"),
        card(
            "p50_of_p99_s",
            "p99 gap, p50",
            "each stream's p99 gap; the median stream",
            "duration",
            "gap-cdfs",
        ),
        card(
            "p99_of_p99_s",
            "p99 gap, p99",
            "each stream's p99 gap; 99th percentile across streams (p99-of-p99)",
            "duration",
            "gap-cdfs",
        ),
        card(
            "p99_of_worst_gap_s",
            "worst gap, p99",
            "each stream's longest freeze; 99th percentile across streams",
            "duration",
            "gap-cdfs",
        ),
        card(
            "goodput",
            "ITL goodput",
            f"streams with TTFT ≤ {target} and no gap above {threshold}",
            "share",
            "gap-cdfs",
            lower_is_better=False,
        ),
        card(
            "unstable_share",
            "unstable streams",
            "share of streams whose p99/p50 gap ratio is above the jitter flag",
            "share",
            "stall-map",
        ),
        card(
            "stalls_per_1k_tokens",
            "stalls / 1,000 tokens",
            f"gaps above {threshold} per 1,000 output tokens",
            "rate",
            "stall-map",
        ),
    ]


def _show(value: float | None, kind: Kind) -> str:
    if value is None:
        return "—"
    if kind == "duration":
        return format_duration(value * 1e9)
    if kind == "share":
        return f"{value:.1%}"
    return f"{value:.2f}"
