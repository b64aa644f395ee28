"""The stall map's causes: every attributed stall drawn over its gap in its causes' colours
(a stall split among causes as one bar per share, end to end), with the evidence on hover
(docs/report.md#stall-map, docs/attribution.md)."""

from __future__ import annotations

from plotly.graph_objects import Bar, Figure

from steadystream.attribution import ATTRIBUTABLE, Explanation
from steadystream.report._text import chart_text
from steadystream.report.stall_map import StallMap

__all__ = ["CAUSE_COLOURS", "MAX_STALLS", "add_causes"]

MAX_STALLS = 2_000
"""The most stalls the map draws in their causes' colours (the longest, where there are more)."""

# One hue per cause, told apart in print and by most colour-blind readers (Okabe-Ito order).
CAUSE_COLOURS = dict(
    zip(
        ATTRIBUTABLE,
        (
            "#E69F00",  # queueing
            "#56B4E9",  # prefill-interference
            "#D55E00",  # kv-preemption
            "#CC79A7",  # spec-decode-rejection
            "#F0E442",  # head-burst
            "#0072B2",  # network-buffering
            "#009E73",  # connection-hiccup
            "#000000",  # injected-fault
            "#999999",  # unknown
        ),
        strict=True,
    )
)


def add_causes(
    fig: Figure, stall_map: StallMap, explanation: Explanation, *, max_stalls: int = MAX_STALLS
) -> tuple[int, int]:
    """Overlay the stalls of the rows shown, one legend entry per cause: the ``max_stalls``
    longest where there are more. Returns how many it drew, and how many it left out for
    that bound."""
    rows = set(stall_map.rows)
    by_cause: dict[str, list[tuple[str, float, float, str]]] = {}
    # A stall of a stream not shown (sampled out, or shown under a vantage-point suffix) is
    # left out; the rows are labelled as chart_text labels the stall's stream.
    in_rows = [
        (stall, label)
        for stall in explanation.stalls
        if (label := chart_text(stall.stream_id)) in rows
    ]
    left_out = max(0, len(in_rows) - max_stalls)
    if left_out:  # one bar and one hover text each: the page stays small
        longest = sorted(range(len(in_rows)), key=lambda i: -in_rows[i][0].duration_s)
        in_rows = [in_rows[i] for i in sorted(longest[:max_stalls])]
    shown = 0
    for stall, label in in_rows:
        if stall_map.clock == "wall":
            if stall.started_at is None or stall_map.origin is None:
                continue
            start = stall.started_at - stall_map.origin
        else:
            start = stall.start_ns / 1e9
        causes = ", ".join(
            f"<b>{p.cause}</b> {p.fraction:.0%} ({p.confidence:.0%} sure)" for p in stall.parts
        )
        hover = (
            f"{label}: {stall.duration_s * 1000:.0f} ms stall"
            f"{' before the first token' if stall.first_token else ''}<br>"
            f"{causes}<br>" + "<br>".join(chart_text(line, 200) for line in _wrap(stall.evidence))
        )
        # A stall split among causes: one bar per share, end to end, each in its colour.
        shown += 1
        for part in stall.parts:
            length = stall.duration_s * part.fraction
            by_cause.setdefault(part.cause, []).append((label, start, length, hover))
            start += length
    if not by_cause:
        return 0, left_out
    fig.update_traces(showlegend=False)
    for cause in ATTRIBUTABLE:
        stalls = by_cause.get(cause)
        if not stalls:
            continue
        fig.add_trace(
            Bar(
                y=[s[0] for s in stalls],
                base=[s[1] for s in stalls],
                x=[s[2] for s in stalls],
                orientation="h",
                name=cause,
                width=0.45,  # narrower than a gap bar: the gap's own colour shows around it
                marker={"color": CAUSE_COLOURS[cause], "line": {"width": 0}},
                hovertext=[s[3] for s in stalls],
                hoverinfo="text",
                showlegend=True,
            )
        )
    fig.update_layout(showlegend=True, legend={"title": {"text": "stall cause"}})
    return shown, left_out


def _wrap(text: str, width: int = 90) -> list[str]:
    lines: list[str] = []
    for part in text.split("; "):
        while len(part) > width:
            cut = part.rfind(" ", 0, width)
            cut = width if cut <= 0 else cut
            lines.append(part[:cut])
            part = part[cut:].lstrip()
        lines.append(part)
    return lines
