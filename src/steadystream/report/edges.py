"""The report's edges table: a page's client and glass edges side by side (docs/glass.md).

One row per metric, a column per edge, and the baseline's two columns when there is one;
the note says in words what the renderer changed at the glass against the baseline: the
p99-of-p99 gap and the TTFT at which it came, both as painted.
"""

from __future__ import annotations

from steadystream._units import format_seconds
from steadystream.glass.edges import EdgeComparison
from steadystream.metrics import FLEET_CATALOGUE, FleetMetrics
from steadystream.report.model import WhatIfTable

__all__ = ["edges_table"]


_ROWS = ("ttft_p50_s", "p99_of_p99_s", "p99_of_worst_gap_s", "goodput", "qoe_mean", "fluidity_mean")
_s = format_seconds
_share = FLEET_CATALOGUE["goodput"].show  # a share, as the catalogue shows one


def _fleet_rows(fleet: FleetMetrics) -> list[str]:
    return [FLEET_CATALOGUE[name].show(getattr(fleet, name)) for name in _ROWS]


_METRICS = [
    *(FLEET_CATALOGUE[name].label for name in _ROWS),
    "frames with more than one token",
    "arrival to paint, p50",
    "arrival to paint, p99",
]


def _added(edges: EdgeComparison) -> tuple[list[str], list[str]]:
    """The browser-added rows: empty for the client column, filled for the glass one."""
    return ["", "", ""], [
        f"{edges.multi_token_frames} of {edges.frames} ({_share(edges.multi_token_frame_share)})",
        _s(edges.paint_delay_p50_s),
        _s(edges.paint_delay_p99_s),
    ]


def edges_table(edges: EdgeComparison, baseline: EdgeComparison | None) -> WhatIfTable:
    name = edges.labels.get("renderer", "this run")
    columns = ["metric", f"client ({name})", f"glass ({name})"]
    client_added, glass_added = _added(edges)
    cells = [
        _fleet_rows(edges.client) + client_added,
        _fleet_rows(edges.glass) + glass_added,
    ]
    note = (
        f"{edges.streams} streams as the page's reader got them (client) and as they were"
        " painted (glass, one event per animation frame)."
    )
    if baseline is not None:
        base_name = baseline.labels.get("renderer", "baseline")
        columns += [f"client ({base_name})", f"glass ({base_name})"]
        base_client_added, base_glass_added = _added(baseline)
        cells += [
            _fleet_rows(baseline.client) + base_client_added,
            _fleet_rows(baseline.glass) + base_glass_added,
        ]
        note += " " + _verdict(edges, baseline, name, base_name)
    rows = [[metric, *(column[i] for column in cells)] for i, metric in enumerate(_METRICS)]
    return WhatIfTable(columns=columns, rows=rows, note=note)


def _verdict(edges: EdgeComparison, baseline: EdgeComparison, name: str, base_name: str) -> str:
    now, before = edges.glass.p99_of_p99_s, baseline.glass.p99_of_p99_s
    ttft, base_ttft = edges.glass.ttft_p50_s, baseline.glass.ttft_p50_s
    if now is None or before is None or ttft is None or base_ttft is None:
        return "Too few gaps at the glass to compare the two."
    change = (now - before) / before if before else 0.0
    direction = "lower" if now < before else "higher"
    return (
        f"At the glass, {name}'s p99-of-p99 gap is {_s(now)} against {base_name}'s {_s(before)}:"
        f" {abs(change):.0%} {direction} ({_s(abs(now - before))}), at a painted TTFT p50 of"
        f" {_s(ttft)} against {_s(base_ttft)} ({'+' if ttft >= base_ttft else '−'}"
        f"{_s(abs(ttft - base_ttft))})."
    )
