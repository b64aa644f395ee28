"""Plotly figures of the report, one function per chart, from the data in ``data``.

Figures take chart data and return a ``plotly.graph_objects.Figure``; they compute nothing
about streams themselves. Gaps are drawn in milliseconds (the unit people think in for a
pause) on log axes, so a 20 ms cadence and a 2 s freeze both stay readable. Large arrays go
in as float32: plotly writes numpy arrays as packed binary, half the size of float64.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import numpy.typing as npt
import plotly.graph_objects as go
from plotly.subplots import make_subplots

from steadystream._units import format_duration
from steadystream.report._text import chart_labels, chart_text
from steadystream.report.data import Cdf, Histogram, ItlBand, StreamTrace, TtftBars
from steadystream.report.stall_map import GapBars, GapGrid, StallMap

__all__ = [
    "band_figure",
    "cdf_figure",
    "chunks_figure",
    "gap_colorscale",
    "gap_colours",
    "stall_map_figure",
    "ttft_figure",
    "worst_figure",
]

Figure = Any  # plotly ships no type information

P50, P95, P99 = "#1f5f99", "#6aa7d8", "#d6453d"
WORST, BASELINE, WAIT = "#b2182b", "#8c8c8c", "#c9c9c9"
_FONT = {"family": "system-ui, -apple-system, 'Segoe UI', Roboto, sans-serif", "size": 13}
_ROW_PX, _MAX_MAP_PX, _LABELLED_ROWS = 16, 1100, 60


def gap_colorscale() -> list[list[Any]]:
    """Pale for a normal cadence, yellow towards the threshold, red above it.

    The scale runs from 0 to twice the stall threshold, so its middle is the threshold.
    """
    return [
        [0.0, "#e3f1dc"],
        [0.1, "#b8deb0"],
        [0.3, "#fee08b"],
        [0.5, "#f46d43"],
        [0.75, "#d73027"],
        [1.0, "#7f0021"],
    ]


def gap_colours(gap_ms: npt.NDArray[np.float32], top: float) -> list[str]:
    """Each gap's colour on :func:`gap_colorscale` (0 to ``top`` ms), as plotly would pick it.

    Bars get their colours as strings: plotly.js 4 warns once per bar ("Invalid color
    specifier") when a bar's colour is a number mapped through a colour scale.
    """
    stops = gap_colorscale()
    where = [float(stop) for stop, _ in stops]
    rgb = np.array([[int(c[i : i + 2], 16) for i in (1, 3, 5)] for _, c in stops], dtype=float)
    at = np.clip(np.nan_to_num(np.asarray(gap_ms, dtype=np.float64) / top), 0.0, 1.0)
    channels = np.rint([np.interp(at, where, rgb[:, k]) for k in range(3)]).astype(np.int64)
    return [f"#{r:02x}{g:02x}{b:02x}" for r, g, b in channels.T.tolist()]


def _ms(values_s: npt.ArrayLike) -> npt.NDArray[np.float32]:
    return (np.asarray(values_s, dtype=np.float64) * 1000).astype(np.float32)


def _base(fig: Figure, height: int, *, legend: bool = True) -> Figure:
    fig.update_layout(
        template="plotly_white",
        font=_FONT,
        height=height,
        margin={"l": 70, "r": 30, "t": 30, "b": 60},
        showlegend=legend,
        legend={
            "orientation": "h",
            "yanchor": "bottom",
            "y": 1.02,
            "x": 0,
            "traceorder": "normal",
        },
        hoverlabel={"namelength": -1},
    )
    return fig


def _empty(fig: Figure, text: str) -> Figure:
    fig.add_annotation(
        text=text, x=0.5, y=0.5, xref="paper", yref="paper", showarrow=False, font={"size": 15}
    )
    fig.update_xaxes(visible=False)
    fig.update_yaxes(visible=False)
    return fig


def _log_ms_axis(values_ms: Sequence[npt.NDArray[np.float32]]) -> dict[str, Any]:
    """A log axis in ms with ticks at 1-2-5 steps, labelled in ms or s as people say them."""
    parts = [v[np.isfinite(v) & (v > 0)] for v in values_ms]
    finite = np.concatenate(parts) if parts else np.zeros(0)
    low = float(finite.min()) if len(finite) else 1.0
    high = float(finite.max()) if len(finite) else 1000.0
    ticks = [m * 10**e for e in range(-3, 6) for m in (1, 2, 5) if low / 2 <= m * 10**e <= high * 2]
    text = [f"{t / 1000:g} s" if t >= 1000 else f"{t:g} ms" for t in ticks]
    return {"type": "log", "tickvals": ticks, "ticktext": text}


def _threshold_line(fig: Figure, threshold_s: float, *, vertical: bool) -> None:
    """The stall threshold across a log gap axis, labelled."""
    label = f"stall threshold {format_duration(threshold_s * 1e9)}"
    ms = threshold_s * 1000
    style = {"line_dash": "dash", "line_color": WORST, "line_width": 1}
    # Shapes take data values on a log axis, but annotations take their log10.
    at = float(np.log10(ms))
    text = {"text": label, "showarrow": False, "font": {"color": WORST, "size": 12}}
    if vertical:
        fig.add_vline(x=ms, **style)
        fig.add_annotation(x=at, y=0.02, yref="paper", xanchor="left", xshift=4, **text)
    else:
        fig.add_hline(y=ms, **style)
        fig.add_annotation(x=1, xref="paper", y=at, xanchor="right", yanchor="bottom", **text)


def band_figure(band: ItlBand, threshold_s: float, baseline: ItlBand | None = None) -> Figure:
    """p50/p95/p99 of gaps by token position: a narrow flat band is a healthy fleet."""
    fig = _base(go.Figure(), 420)
    if band.total_gaps == 0:
        return _empty(fig, "no gaps: no stream delivered more than one chunk")
    x = band.position
    hover = "token %{x}: %{y:.1f} ms<br>%{customdata:,} gaps<extra>%{fullData.name}</extra>"
    for name, values, colour, fill in (
        ("p50", band.p50_s, P50, None),
        ("p95", band.p95_s, P95, "rgba(106,167,216,0.25)"),
        ("p99", band.p99_s, P99, "rgba(214,69,61,0.15)"),
    ):
        fig.add_trace(
            go.Scatter(
                x=x,
                y=_ms(values),
                name=f"{name} across streams",
                mode="lines",
                line={"color": colour, "width": 2 if name != "p95" else 1},
                fill="tonexty" if fill else None,
                fillcolor=fill,
                customdata=band.gaps,
                hovertemplate=hover,
            )
        )
    if baseline is not None and baseline.total_gaps:
        for name, values in (("p50", baseline.p50_s), ("p99", baseline.p99_s)):
            fig.add_trace(
                go.Scatter(
                    x=baseline.position,
                    y=_ms(values),
                    name=f"baseline {name}",
                    mode="lines",
                    line={"color": BASELINE, "dash": "dot", "width": 1.5},
                    customdata=baseline.gaps,
                    hovertemplate=hover,
                )
            )
    _threshold_line(fig, threshold_s, vertical=False)
    binned = f" (bins of {band.bin_width} positions)" if band.bin_width > 1 else ""
    fig.update_xaxes(title_text=f"token position: tokens delivered before the gap{binned}")
    shown = [_ms(band.p50_s), _ms(band.p99_s), _ms(np.array([threshold_s]))]
    if baseline is not None:
        shown += [_ms(baseline.p50_s), _ms(baseline.p99_s)]
    fig.update_yaxes(title_text="gap (log scale)", **_log_ms_axis(shown))
    return fig


def cdf_figure(
    p99: Cdf,
    worst: Cdf,
    threshold_s: float,
    baseline: tuple[Cdf, Cdf] | None = None,
) -> Figure:
    """CDFs of each stream's p99 gap and worst gap, the stall threshold marked."""
    fig = _base(go.Figure(), 420)
    if p99.streams == 0 and worst.streams == 0:
        return _empty(fig, "no gaps: no stream delivered more than one chunk")
    curves: list[tuple[str, Cdf, str, str]] = [
        ("per-stream p99 gap", p99, P50, "solid"),
        ("per-stream worst gap", worst, WORST, "solid"),
    ]
    if baseline is not None:
        curves += [
            ("baseline p99 gap", baseline[0], P50, "dot"),
            ("baseline worst gap", baseline[1], WORST, "dot"),
        ]
    for name, curve, colour, dash in curves:
        fig.add_trace(
            go.Scatter(
                x=_ms(curve.values),
                y=curve.share.astype(np.float32),
                name=name,
                mode="lines",
                line={"color": colour, "dash": dash, "width": 2 if dash == "solid" else 1.5},
                line_shape="hv",
                hovertemplate="%{y:.1%} of streams at or under %{x:.1f} ms"
                "<extra>%{fullData.name}</extra>",
            )
        )
    _threshold_line(fig, threshold_s, vertical=True)
    shown = [_ms(c.values) for _, c, _, _ in curves] + [_ms(np.array([threshold_s]))]
    fig.update_xaxes(title_text="gap (log scale)", **_log_ms_axis(shown))
    fig.update_yaxes(title_text="share of streams", tickformat=".0%", range=[0, 1.02])
    return fig


def stall_map_figure(stall_map: StallMap, threshold_s: float) -> Figure:
    """Streams by time, every gap coloured by its size; red is above the stall threshold."""
    rows = len(stall_map.rows)
    height = int(min(_MAX_MAP_PX, max(260, rows * _ROW_PX + 120)))
    fig = _base(go.Figure(), height)
    if stall_map.gaps == 0:
        return _empty(fig, "no gaps: no stream delivered more than one chunk")
    top = 2 * threshold_s * 1000
    colorbar = {
        "title": {"text": "gap (ms)"},
        "tickvals": [0, top / 4, top / 2, top],
        "ticktext": ["0", f"{top / 4:.0f}", f"{top / 2:.0f} (threshold)", f"≥ {top:.0f}"],
    }
    if stall_map.bars is not None:
        _map_bars(fig, stall_map.rows, stall_map.bars, top, colorbar)
    elif stall_map.grid is not None:
        _map_grid(fig, stall_map.rows, stall_map.grid, top, colorbar)
    clock = "since the run's first request" if stall_map.clock == "wall" else "since its request"
    fig.update_xaxes(title_text=f"time {clock} (s)")
    fig.update_yaxes(
        type="category",
        categoryorder="array",
        categoryarray=stall_map.rows,
        autorange="reversed",
        showticklabels=rows <= _LABELLED_ROWS,
        title_text="stream" if rows <= _LABELLED_ROWS else f"{rows} streams",
    )
    fig.update_layout(margin={"l": 140 if rows <= _LABELLED_ROWS else 60})
    return fig


def _map_bars(
    fig: Figure, labels: Sequence[str], bars: GapBars, top: float, colorbar: dict[str, Any]
) -> None:
    rows = [labels[r] for r in bars.wait_row.tolist()]
    fig.add_trace(
        go.Bar(
            y=rows,
            x=bars.wait_length_s.astype(np.float32),
            base=bars.wait_start_s.astype(np.float32),
            orientation="h",
            name="waiting for the first token",
            marker={"color": WAIT},
            hovertemplate="%{y}: first token after %{x:.3f} s<extra></extra>",
        )
    )
    gap_ms = _ms(bars.length_s)
    cause = bars.cause if bars.cause is not None else [None] * len(gap_ms)
    custom = [
        [round(float(g), 1), p, _cause(c)]
        for g, p, c in zip(gap_ms.tolist(), bars.position.tolist(), cause, strict=True)
    ]
    hover = "%{y}<br>gap %{customdata[0]} ms, after token %{customdata[1]}"
    if bars.cause is not None:
        hover += "<br>cause: %{customdata[2]}"
    fig.add_trace(
        go.Bar(
            y=[labels[r] for r in bars.row.tolist()],
            x=bars.length_s.astype(np.float32),
            base=bars.start_s.astype(np.float32),
            orientation="h",
            name="gaps",
            marker={"color": gap_colours(gap_ms, top), "line": {"width": 0}},
            customdata=custom,
            hovertemplate=hover + "<extra></extra>",
        )
    )
    # The bars' colours are strings, so the colour bar comes from a trace that draws nothing.
    fig.add_trace(
        go.Scatter(
            x=[None],
            y=[None],
            mode="markers",
            marker={
                "color": [0.0],
                "colorscale": gap_colorscale(),
                "cmin": 0,
                "cmax": top,
                "colorbar": colorbar,
                "showscale": True,
            },
            hoverinfo="skip",
            showlegend=False,
        )
    )
    fig.update_layout(barmode="overlay", bargap=0.2, showlegend=False)


def _map_grid(
    fig: Figure, labels: Sequence[str], grid: GapGrid, top: float, colorbar: dict[str, Any]
) -> None:
    centres = ((grid.edges_s[:-1] + grid.edges_s[1:]) / 2).astype(np.float32)
    positions = grid.position.tolist()
    if grid.cause is not None:
        custom: list[list[Any]] = [
            [[p, _cause(c)] for p, c in zip(prow, crow, strict=True)]
            for prow, crow in zip(positions, grid.cause, strict=True)
        ]
        hover = "%{y}, %{x:.2f} s<br>worst gap %{z:.0f} ms, after token %{customdata[0]}"
        hover += "<br>cause: %{customdata[1]}"
    else:
        custom = positions
        hover = "%{y}, %{x:.2f} s<br>worst gap %{z:.0f} ms, after token %{customdata}"
    fig.add_trace(
        go.Heatmap(
            z=np.minimum(_ms(grid.worst_s), top),
            x=centres,
            y=list(labels),
            colorscale=gap_colorscale(),
            zmin=0,
            zmax=top,
            colorbar=colorbar,
            customdata=custom,
            hoverongaps=False,
            hovertemplate=hover + "<extra></extra>",
        )
    )
    fig.update_layout(showlegend=False)


def _cause(cause: str | None) -> str:
    """A gap's cause for its hover text (a timeline's annotation: any text)."""
    return "—" if cause is None else chart_text(cause)


def worst_figure(traces: Sequence[StreamTrace], threshold_s: float) -> Figure:
    """Tokens delivered over time for the worst streams: a stall is a flat stretch, in red."""
    fig = _base(go.Figure(), 460)
    if not traces:
        return _empty(fig, "no stream has a gap")
    stall_x: list[float | None] = []
    stall_y: list[float | None] = []
    for trace in traces:
        gap_ms = _ms(trace.gap_s)
        causes = trace.causes or [None] * len(gap_ms)
        fig.add_trace(
            go.Scatter(
                x=trace.times_s.astype(np.float32),
                y=trace.tokens,
                name=chart_text(trace.stream_id),
                mode="lines",
                line_shape="hv",
                line={"width": 1.5},
                customdata=[
                    ["—" if np.isnan(g) else f"{g:.1f} ms", _cause(c)]
                    for g, c in zip(gap_ms.tolist(), causes, strict=True)
                ],
                hovertemplate="%{fullData.name}<br>%{x:.3f} s: %{y} tokens"
                "<br>gap before: %{customdata[0]}"
                + ("<br>cause: %{customdata[1]}" if trace.causes else "")
                + "<extra></extra>",
            )
        )
        stalled = np.flatnonzero(trace.gap_s > threshold_s)
        for i in stalled.tolist():
            previous = float(trace.tokens[i - 1])
            stall_x += [float(trace.times_s[i - 1]), float(trace.times_s[i]), None]
            stall_y += [previous, previous, None]
    if stall_x:
        fig.add_trace(
            go.Scatter(
                x=stall_x,
                y=stall_y,
                name=f"gaps above {format_duration(threshold_s * 1e9)}",
                mode="lines",
                line={"color": WORST, "width": 5},
                opacity=0.6,
                hoverinfo="skip",
            )
        )
    fig.update_xaxes(title_text="time since the request (s)")
    fig.update_yaxes(title_text="tokens delivered")
    return fig


def chunks_figure(tokens_per_chunk: Histogram, overhead: Histogram) -> Figure:
    """Per-stream tokens per chunk, and wire bytes per content byte."""
    fig = make_subplots(
        rows=1,
        cols=2,
        subplot_titles=("tokens per chunk", "wire bytes per content byte"),
        horizontal_spacing=0.12,
    )
    _base(fig, 380, legend=False)
    for col, hist, colour, empty in (
        (1, tokens_per_chunk, P50, "no chunk carried text"),
        (2, overhead, "#7b5ea7", "wire bytes were not recorded"),
    ):
        if hist.values == 0:
            fig.add_annotation(
                text=empty, showarrow=False, row=1, col=col, x=0.5, y=0.5, xref="x domain"
            )
            continue
        centres = (hist.edges[:-1] + hist.edges[1:]) / 2
        fig.add_trace(
            go.Bar(
                x=centres,
                y=hist.counts,
                width=np.diff(hist.edges) * 0.95,
                marker={"color": colour},
                hovertemplate="%{x:.2f}: %{y:,} streams<extra></extra>",
            ),
            row=1,
            col=col,
        )
        fig.update_yaxes(title_text="streams", row=1, col=col)
    fig.update_xaxes(title_text="mean tokens per chunk, per stream", row=1, col=1)
    fig.update_xaxes(title_text="bytes on the wire per byte of text, per stream", row=1, col=2)
    return fig


def ttft_figure(bars: TtftBars, target_s: float) -> Figure:
    """TTFT percentiles by model, route and tenant, against the TTFT target."""
    fig = _base(go.Figure(), 400)
    groups = chart_labels(bars.groups)  # (label values come from the run)
    for name, values, colour in (
        ("p50", bars.p50_s, P50),
        ("p95", bars.p95_s, P95),
        ("p99", bars.p99_s, P99),
    ):
        fig.add_trace(
            go.Bar(
                x=groups,
                y=[None if v is None else v * 1000 for v in values],
                name=f"TTFT {name}",
                marker={"color": colour},
                customdata=bars.streams,
                hovertemplate="%{x}: %{y:.0f} ms (%{customdata:,} streams)"
                "<extra>%{fullData.name}</extra>",
            )
        )
    fig.add_hline(
        y=target_s * 1000,
        line_dash="dash",
        line_color=WORST,
        line_width=1,
        annotation_text=f"TTFT target {format_duration(target_s * 1e9)}",
    )
    fig.update_layout(barmode="group")
    fig.update_yaxes(title_text="TTFT (ms)")
    return fig
