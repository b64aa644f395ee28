"""What a report holds, before it is rendered: cards, findings, charts and tables."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from steadystream.metrics import FleetMetrics
from steadystream.report.cards import Card

__all__ = ["Chart", "Report", "ReportFinding", "WhatIfTable"]


@dataclass(frozen=True, slots=True)
class Chart:
    """One chart: ``id`` is its anchor in the page (``#stall-map``) and its image file name."""

    id: str
    title: str
    subtitle: str  # what the chart shows of the run, and what was summarised
    how_to_read: str
    figure: Any  # a plotly Figure


@dataclass(frozen=True, slots=True)
class ReportFinding:
    """A finding of :func:`steadystream.findings.find`, pointed at the chart that shows it."""

    code: str
    message: str
    streams: int
    chart: str | None


@dataclass(frozen=True, slots=True)
class WhatIfTable:
    """The what-if comparison: one row per pacer spec (and the recorded run first)."""

    columns: list[str]
    rows: list[list[str]]
    note: str


@dataclass(frozen=True, slots=True)
class Report:
    title: str
    run: list[str]  # lines that describe the run and how it was measured
    cards: list[Card]
    findings: list[ReportFinding]
    charts: list[Chart]
    fleet: FleetMetrics
    baseline: FleetMetrics | None = None
    whatif: WhatIfTable | None = None
    edges: WhatIfTable | None = None  # a page's client and glass edges side by side (same shape)

    def chart(self, chart_id: str) -> Chart:
        for chart in self.charts:
            if chart.id == chart_id:
                return chart
        known = ", ".join(c.id for c in self.charts)
        raise KeyError(f"no chart {chart_id!r}; this report has {known}")
