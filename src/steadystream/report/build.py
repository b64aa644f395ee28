"""Build a :class:`Report` from a run's timelines: metrics, cards, findings and charts."""

from __future__ import annotations

import datetime as dt
import os
from collections import Counter
from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING

import numpy as np

import steadystream.report.charts as charts
import steadystream.report.data as data
from steadystream._units import format_duration, format_seconds
from steadystream.attribution import EngineSamples, Explanation, explain
from steadystream.attribution.explain import check_files
from steadystream.bench.summary import one_view_note, one_view_rows
from steadystream.findings import PER_GAP_FIGURES, find, is_rechunked
from steadystream.glass.edges import compare_edges, rendered_view
from steadystream.metrics import (
    FleetMetrics,
    MetricConfig,
    StreamTable,
    fleet_metrics,
    stream_table,
    worst_streams,
)
from steadystream.report.cards import headline_cards
from steadystream.report.edges import edges_table
from steadystream.report.model import Chart, Report, ReportFinding, WhatIfTable
from steadystream.report.stall_causes import add_causes
from steadystream.report.stall_map import stall_map
from steadystream.timeline import Timeline

if TYPE_CHECKING:
    from steadystream.shaping.whatif import WhatIf

__all__ = ["CHART_IDS", "FINDING_CHARTS", "WORST_STREAMS", "build_report"]

CHART_IDS = ("itl-band", "gap-cdfs", "stall-map", "worst-streams", "chunks", "ttft")
"""Every report has these charts, in this order (the what-if table is a table, not a chart)."""

WORST_STREAMS = 10

FINDING_CHARTS = {
    "proxy-buffering": "worst-streams",
    "p99-hides-freezes": "gap-cdfs",
    "unstable-streams": "stall-map",
    "single-token-chunks": "chunks",
    "envelope-overhead": "chunks",
    "head-burst": "itl-band",
    "tokens-estimated": "run",
    "tokens-in-pieces": "chunks",
    "stall-cause": "stall-map",
}
"""The chart where each finding shows; a finding not listed points nowhere."""


def build_report(
    timelines: Iterable[Timeline],
    *,
    config: MetricConfig | None = None,
    baseline: Iterable[Timeline] | None = None,
    whatif: WhatIf | None = None,
    title: str = "Stream report",
    sources: Sequence[str] = (),
    baseline_sources: Sequence[str] = (),
    notes: Sequence[str] = (),
    engine: EngineSamples | None = None,
    files: Iterable[int] | None = None,
    baseline_files: Iterable[int] | None = None,
) -> Report:
    """The report of a run, compared with ``baseline`` when one is given.

    ``whatif`` is the result of :func:`steadystream.shaping.what_if` over the same run; the
    report shows it as a table.

    ``sources`` name where the timelines came from (file names) for the run description;
    ``notes`` are added to it as they are (for example, a file's cut-off last line).
    ``engine`` (metrics scraped during the run) sharpens the cause given to each stall.
    ``files`` (and ``baseline_files``) are the file each timeline came from, where they came
    from several: two files that reuse a stream id hold two streams
    (:func:`~steadystream.bench.summary.one_view_per_stream`).

    ``timelines`` and ``baseline`` may be any iterable (read once); ``sources``,
    ``baseline_sources`` and ``notes`` are lists of texts (one text alone is refused, not
    read letter by letter).
    """
    cfg = config or MetricConfig()
    # Read each iterable once: a generator would be used up by the first pass below and
    # leave an empty run to report.
    timelines = list(timelines)
    baseline = None if baseline is None else list(baseline)
    files = check_files(files, len(timelines))
    baseline_files = check_files(
        baseline_files, 0 if baseline is None else len(baseline), name="baseline_files"
    )
    sources = _texts(sources, "sources")
    baseline_sources = _texts(baseline_sources, "baseline_sources")
    notes = _texts(notes, "notes")
    edges = compare_edges(timelines, cfg)
    base_edges = None if baseline is None else compare_edges(baseline, cfg)
    timelines, view_note = rendered_view(timelines)
    if view_note is not None:
        notes = [*notes, f"Note: {view_note}."]
        files = None  # the glass edge alone: one vantage point, nothing to choose
    if baseline is not None:
        baseline, base_view_note = rendered_view(baseline)
        if base_view_note is not None:
            baseline_files = None
    # Every vantage point of a stream informs its stalls' causes and the proxy finding; the
    # cards and charts count each stream once, where it was seen nearest the reader (as
    # ``analyze`` and ``explain`` do).
    explanation = explain(
        timelines, stall_threshold_ns=cfg.stall_threshold_ns, engine=engine, files=files
    )
    every_view = stream_table(timelines, cfg)
    kept = one_view_rows(every_view.stream_ids, every_view.wheres, files)
    table, left_out = every_view, one_view_note(every_view.wheres, kept)
    if left_out is not None:
        table, timelines = every_view.take(kept), [timelines[i] for i in kept]
        notes = [*notes, f"Note: {left_out}."]
    fleet = fleet_metrics(table, cfg)
    if baseline is not None:
        ids, wheres = _ids_and_wheres(baseline)
        baseline = [baseline[i] for i in one_view_rows(ids, wheres, baseline_files)]
    base_table = None if baseline is None else stream_table(baseline, cfg)
    base_fleet = None if base_table is None else fleet_metrics(base_table, cfg)
    findings = [
        ReportFinding(f.code, f.message, f.streams, FINDING_CHARTS.get(f.code))
        for f in find(table, fleet, cfg, explanation, edges=every_view)
    ]
    run = _describe(timelines, fleet, cfg, sources, notes)
    if base_fleet is not None:
        named = f" from {', '.join(baseline_sources)}" if baseline_sources else ""
        run.append(
            f"Baseline: {base_fleet.streams:,} streams{named}; cards show the change from it"
            " and charts draw it dotted."
        )
    return Report(
        title=title,
        run=run,
        cards=headline_cards(
            fleet,
            base_fleet,
            uncompared=PER_GAP_FIGURES
            if base_table is not None and is_rechunked(table) != is_rechunked(base_table)
            else frozenset(),
        ),
        findings=findings,
        charts=_charts(timelines, table, fleet, cfg, baseline, base_table, explanation),
        fleet=fleet,
        baseline=base_fleet,
        whatif=None if whatif is None else _whatif_table(whatif),
        edges=None if edges is None else edges_table(edges, base_edges),
    )


def _texts(values: Sequence[str], name: str) -> list[str]:
    """``values`` as a list of texts; one text (or path) alone is a caller's slip, which
    would otherwise be read as its letters."""
    if isinstance(values, str | bytes | os.PathLike):
        raise TypeError(f"{name} must be a list of texts, not one {type(values).__name__}")
    return list(values)


def _ids_and_wheres(timelines: Sequence[Timeline]) -> tuple[list[str], list[str]]:
    return [t.stream_id for t in timelines], [t.where.value for t in timelines]


def _charts(
    timelines: Sequence[Timeline],
    table: StreamTable,
    fleet: FleetMetrics,
    cfg: MetricConfig,
    baseline: Sequence[Timeline] | None,
    base_table: StreamTable | None,
    explanation: Explanation,
) -> list[Chart]:
    threshold = fleet.stall_threshold_s
    threshold_text = format_duration(cfg.stall_threshold_ns)
    band = data.itl_band(timelines)
    base_band = None if baseline is None else data.itl_band(baseline)
    p99 = data.cdf(table.column("gap_p99_s"))
    worst = data.cdf(table.column("max_gap_s"))
    base_cdfs = None
    if base_table is not None:
        base_cdfs = (
            data.cdf(base_table.column("gap_p99_s")),
            data.cdf(base_table.column("max_gap_s")),
        )
    stalls = stall_map(timelines, table)
    stall_figure = charts.stall_map_figure(stalls, threshold)
    caused, uncoloured = add_causes(stall_figure, stalls, explanation)
    traces = [data.stream_trace(timelines[i]) for i in worst_streams(table, WORST_STREAMS)]
    per_chunk = data.histogram(table.column("tokens_per_chunk"))
    overhead = data.histogram(table.column("envelope_overhead"))
    ttft = data.ttft_bars(fleet)
    binned = f", positions in bins of {band.bin_width}" if band.bin_width > 1 else ""
    return [
        Chart(
            "itl-band",
            "Gaps by token position",
            f"p50, p95 and p99 of the gap ending at each token position, across streams;"
            f" {band.total_gaps:,} gaps{binned}",
            "A healthy fleet is a narrow, flat band. A p99 that pulls away from p50 mid-answer"
            " means streams freeze in the middle; a dip at the start is a head burst.",
            charts.band_figure(band, threshold, base_band),
        ),
        Chart(
            "gap-cdfs",
            "Per-stream p99 gap and worst gap",
            f"one point per stream: {p99.streams:,} streams with a gap",
            "Left of the dashed line is under the stall threshold. A per-stream p99 curve far"
            " left of the worst-gap curve means single freezes that p99 hides.",
            charts.cdf_figure(p99, worst, threshold, base_cdfs),
        ),
        Chart(
            "stall-map",
            "Stall map",
            stalls.summary,
            _stall_map_reading(stalls.grid is None, threshold_text, caused, uncoloured),
            stall_figure,
        ),
        Chart(
            "worst-streams",
            f"The {len(traces)} worst streams" if traces else "The worst streams",
            "the streams with the largest worst gap, tokens delivered over time",
            "A steady stream climbs in a straight line. A flat stretch is a freeze the reader"
            f" watched; those above {threshold_text} are drawn in red.",
            charts.worst_figure(traces, threshold),
        ),
        Chart(
            "chunks",
            "Tokens per chunk and envelope overhead",
            f"one value per stream: {per_chunk.values:,} streams with text,"
            f" {overhead.values:,} with wire bytes recorded",
            _chunks_reading(is_rechunked(table)),
            charts.chunks_figure(per_chunk, overhead),
        ),
        Chart(
            "ttft",
            "TTFT by model, route and tenant",
            _ttft_subtitle(ttft) + _ttfr_words(fleet),
            "TTFT is the first visible token (answer text or a tool call). Bars above the"
            " dashed target line miss it. A single group far above the others points at that"
            " model, route or tenant.",
            charts.ttft_figure(ttft, fleet.ttft_target_s),
        ),
    ]


def _chunks_reading(rechunked: bool) -> str:
    """How to read the chunks chart; a run that went through a re-chunking pacer is not told
    to get one (its chunks are that pacer's pieces, not the server's)."""
    overhead = " Overhead is wire bytes per byte of text."
    if rechunked:
        return (
            "This run's tokens came in pieces: a re-chunking pacer (or a proxy) on the way cut"
            " and regrouped them, so these chunks are its, not the server's. Read the server's"
            " chunking from a recording before it (the gateway's upstream edge)." + overhead
        )
    return (
        "One token per chunk costs a whole SSE and JSON envelope per token; a re-chunking"
        " pacer coalesces them." + overhead
    )


def _stall_map_reading(bars: bool, threshold: str, caused: int = 0, uncoloured: int = 0) -> str:
    if bars:
        what = "each bar a gap, coloured by its size"
        wait = " Grey is the wait for the first token."
    else:
        what = "each cell coloured by the worst gap that covered it"
        wait = ""
    return (
        f"Each row is a stream, {what}: red is above {threshold}. Red stacked in one column"
        " is a stall that hit many streams at once; red scattered across rows is per-stream"
        f" trouble.{wait}"
        + (
            f" The {caused:,} {'longest ' if uncoloured else ''}stalls shown carry a narrow"
            " bar in their cause's colour (legend); hover for the evidence (steadystream"
            " explain)."
            + (f" The {uncoloured:,} shorter ones are not coloured." if uncoloured else "")
            if caused
            else ""
        )
    )


def _whatif_table(result: WhatIf) -> WhatIfTable:
    from steadystream.report.whatif import whatif_table

    return whatif_table(result)


def _ttft_subtitle(ttft: data.TtftBars) -> str:
    if ttft.groups == ["all streams"]:
        return "no stream carries a model, route or tenant label: the whole run"
    shown = f"{len(ttft.groups)} groups"
    if ttft.left_out:
        shown += f"; {ttft.left_out} smaller groups left out"
    return shown


def _ttfr_words(fleet: FleetMetrics) -> str:
    """The wait for the first reasoning token, where streams reasoned (apart from TTFT)."""
    if not fleet.reasoning_streams:
        return ""
    return (
        f"; {fleet.reasoning_streams:,} of {fleet.streams:,} streams reasoned: time to"
        f" first reasoning token (TTFR) p50 {format_seconds(fleet.ttfr_p50_s)},"
        f" p99 {format_seconds(fleet.ttfr_p99_s)}"
    )


def _describe(
    timelines: Sequence[Timeline],
    fleet: FleetMetrics,
    cfg: MetricConfig,
    sources: Sequence[str],
    notes: Sequence[str],
) -> list[str]:
    wheres = Counter(t.where.value for t in timelines)
    seen = ", ".join(f"{where} ({count:,})" for where, count in wheres.most_common())
    named = f" from {', '.join(sources)}" if sources else ""
    lines = [
        f"{fleet.streams:,} streams{named}, {fleet.output_tokens:,} output tokens;"
        f" recorded at: {seen or 'nothing'}."
    ]
    starts = [t.started_at for t in timelines if t.started_at is not None]
    if starts:
        ends = [t.started_at + _duration_s(t) for t in timelines if t.started_at is not None]
        lines.append(f"Started {_utc(min(starts))}, spanning {max(ends) - min(starts):,.1f} s.")
    outcomes = ", ".join(f"{k} {v:,}" for k, v in sorted(fleet.outcomes.items()))
    sources_used = ", ".join(f"{k} {v:,}" for k, v in sorted(fleet.token_sources.items()))
    lines.append(f"Outcomes: {outcomes or '—'}. Token counts: {sources_used or '—'}.")
    lines.append(
        f"Stall threshold {format_duration(cfg.stall_threshold_ns)}, TTFT target"
        f" {format_duration(cfg.ttft_target_ns)}, jitter flag {cfg.jitter_flag:g}"
        " (definitions: docs/metrics.md)."
    )
    lines.append(f"{cfg.describe_models()}.")
    lines.extend(notes)
    return lines


def _utc(unix_s: float) -> str:
    """A wall-clock start as a UTC date, or as the number a file gave outside the calendar."""
    try:
        return f"{dt.datetime.fromtimestamp(unix_s, tz=dt.UTC):%Y-%m-%d %H:%M:%S} UTC"
    except (OverflowError, ValueError, OSError):  # (year 10000 on, or before year 1)
        return f"at unix time {unix_s:g} s (not a date)"


def _duration_s(timeline: Timeline) -> float:
    """How long a stream lasted, from its request to its end (seconds)."""
    if timeline.end_ns is not None:
        return timeline.end_ns / 1e9
    return float(np.max(timeline.times)) / 1e9 if len(timeline) else 0.0
