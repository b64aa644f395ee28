"""A run in numbers and words: the fleet's metrics, the worst streams, findings and notes.

:func:`summarise` is what ``bench`` and ``analyze`` print (as a table or JSON); it computes
and never renders. :func:`run_notes` is a run's self-check in words: the load it ran, the
client's lag, whether it kept up, and where the token counts came from.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np

from steadystream.attribution import EngineSamples, Explanation, explain
from steadystream.attribution.streams import outer_ranks, stream_numbers, vantage_rank
from steadystream.bench.disconnect import ReconnectSummary, reconnect_summary
from steadystream.bench.health import token_notes
from steadystream.bench.runner import RunResult
from steadystream.findings import Finding, find
from steadystream.glass.edges import EdgeComparison, compare_edges, rendered_view
from steadystream.metrics import (
    FleetMetrics,
    MetricConfig,
    StreamMetrics,
    StreamTable,
    fleet_metrics,
    stream_table,
    worst_streams,
)
from steadystream.timeline import Timeline

_TABLE_BATCH = 10_000  # streams per stream table made at once, concatenated after

__all__ = [
    "Summary",
    "has_stall",
    "one_view_note",
    "one_view_per_stream",
    "one_view_rows",
    "run_notes",
    "summarise",
    "summarise_table",
]


@dataclass
class Summary:
    """The fleet (and each group's), the worst streams, what was found, and notes."""

    config: MetricConfig
    fleet: FleetMetrics
    groups: dict[str, FleetMetrics]  # by label value, when asked
    by: str | None
    worst: list[StreamMetrics]
    findings: list[Finding]
    explanation: Explanation | None = None  # the cause of each stall, when there are stalls
    notes: list[str] = field(default_factory=list)
    edges: EdgeComparison | None = None  # a page's client and glass edges (docs/glass.md)
    reconnects: ReconnectSummary | None = None  # readers who dropped and came back


def summarise(
    timelines: Sequence[Timeline],
    config: MetricConfig,
    *,
    by: str | None = None,
    worst: int = 10,
    engine: EngineSamples | None = None,
    files: Sequence[int] | None = None,
    attribute: bool = True,
) -> Summary:
    """Summarise ``timelines``; with ``by``, also per value of that label. Stalls are
    attributed to causes (with ``engine``, the engine metrics scraped during the run)
    unless ``attribute`` is False (``analyze --no-explain``).
    ``files`` is the file each timeline came from, where they came from several (see
    :func:`one_view_per_stream`).

    A run with glass timelines is summarised by its glass edge (what was painted), with the
    page's two edges compared in ``edges`` (:mod:`steadystream.glass.edges`).
    """
    edges = compare_edges(timelines, config)
    shown, view_note = rendered_view(timelines)
    if view_note:
        files = None  # the glass edge alone: one vantage point, nothing to choose
    # A batch of streams at a time: the table's scratch arrays stay bounded (the rows are
    # each stream's own, so the tables concatenate exactly).
    table = StreamTable.concat(
        [
            stream_table(shown[first : first + _TABLE_BATCH], config)
            for first in range(0, max(len(shown), 1), _TABLE_BATCH)
        ]
    )
    # Attribution is the costly part of a large run's summary: only when there is a stall.
    explanation = (
        explain(shown, stall_threshold_ns=config.stall_threshold_ns, engine=engine, files=files)
        if attribute and has_stall(table, config)
        else None
    )
    summary = summarise_table(
        table, config, by=by, worst=worst, explanation=explanation, files=files
    )
    if view_note:
        summary.notes.insert(0, view_note)
    summary.edges = edges
    summary.reconnects = reconnect_summary(shown)
    return summary


def has_stall(table: StreamTable, config: MetricConfig) -> bool:
    """Whether any stream has a gap, or a wait for its first text event (reasoning or
    answer, as ``explain`` takes it), over the threshold."""
    threshold_s = config.stall_threshold_ns / 1e9
    first_text = np.fmin(table.column("ttft_s"), table.column("ttfr_s"))
    with np.errstate(invalid="ignore"):
        return bool(
            (table.column("max_gap_s") > threshold_s).any() or (first_text > threshold_s).any()
        )


def summarise_table(
    table: StreamTable,
    config: MetricConfig,
    *,
    by: str | None = None,
    worst: int = 10,
    explanation: Explanation | None = None,
    files: Sequence[int] | None = None,
) -> Summary:
    """Summarise a run's per-stream table (one file's, or many merged: ``analysis``);
    ``explanation`` is the stalls' attribution, which needs the timelines themselves.

    Streams recorded at several vantage points count once, as ``explain`` sees them
    (:func:`one_view_per_stream`); their other edges still inform the findings.
    """
    everything = table
    table, view_note = one_view_per_stream(table, files)
    fleet = fleet_metrics(table, config)
    groups: dict[str, FleetMetrics] = {}
    if by is not None:
        values = [labels.get(by, "") for labels in table.labels]
        for value in sorted(set(values)):
            members = [i for i, v in enumerate(values) if v == value]
            groups[value or "(none)"] = fleet_metrics(table.take(members), config)
    return Summary(
        config=config,
        fleet=fleet,
        groups=groups,
        by=by,
        worst=[table.row(i) for i in worst_streams(table, worst)],
        findings=find(table, fleet, config, explanation, edges=everything),
        explanation=explanation if explanation is not None and explanation.stalls else None,
        notes=[view_note] if view_note else [],
    )


def one_view_per_stream(
    table: StreamTable, files: Sequence[int] | None = None
) -> tuple[StreamTable, str | None]:
    """The rows of each stream at its vantage point nearest the reader, and a note saying so.

    A stream recorded at several vantage points (a gateway's two edges, a client beside
    them) would count once per edge; like ``explain``, the fleet takes the one nearest the
    reader (the subject, :func:`~steadystream.attribution.streams.group_views`). ``files`` is
    each row's file (all one without it), which tells two runs that reuse an id apart
    (:func:`~steadystream.attribution.streams.stream_numbers`). A stream seen at one vantage
    point only is kept, wherever it was seen.
    """
    kept = one_view_rows(table.stream_ids, table.wheres, files)
    note = one_view_note(table.wheres, kept)
    return (table, None) if note is None else (table.take(kept), note)


def one_view_note(wheres: Sequence[str], kept: Sequence[int]) -> str | None:
    """What keeping only the rows ``kept`` (:func:`one_view_rows`) of rows seen at ``wheres``
    left out, in words; None when it kept them all."""
    if len(kept) == len(wheres):
        return None
    kept_set = set(kept)
    left: dict[str, int] = {}
    for i, where in enumerate(wheres):
        if i not in kept_set:
            left[where] = left.get(where, 0) + 1
    seen_at = sorted({wheres[i] for i in kept})
    left_out = ", ".join(f"{count:,} {where}" for where, count in sorted(left.items()))
    return (
        f"{len(kept):,} streams as the {' and '.join(seen_at)} saw them; {left_out}"
        " timelines of the same streams left out"
    )


def one_view_rows(
    stream_ids: Sequence[str], wheres: Sequence[str], files: Sequence[int] | None = None
) -> list[int]:
    """Which rows (or timelines) :func:`one_view_per_stream` keeps, in their order."""
    streams = stream_numbers(stream_ids, wheres, files)
    ranks = [vantage_rank(where) for where in wheres]
    outer = outer_ranks(streams, ranks)
    return [i for i, (s, rank) in enumerate(zip(streams, ranks, strict=True)) if rank == outer[s]]


def run_notes(result: RunResult) -> list[str]:
    """The run's self-check, in words: schedule, client lag, kept up or not, token counts."""
    health = result.health()
    notes = [
        f"load: {result.schedule}; {len(result.timelines)} streams in {result.elapsed_s:.1f} s"
    ]
    notes += health.lines()
    problems = health.problems()
    if problems:
        notes.append("the client could not keep up with the asked load: " + "; ".join(problems))
    sources: dict[str, int] = {}
    for timeline in result.timelines:
        if not timeline.total_tokens:
            continue  # a stream that delivered no token has no count to explain
        source = timeline.token_source.value
        sources[source] = sources.get(source, 0) + 1
    notes += token_notes(sources)
    notes += result.notes
    if result.interrupted:
        notes.append("the run was interrupted: streams in flight were recorded as cancelled")
    return notes
