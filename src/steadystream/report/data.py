"""Chart data: what each chart of the report plots, computed from timelines and metrics.

Pure numpy, no plotting and no I/O. Every function here keeps its output bounded whatever
the size of the run (a few hundred points per curve), so a report of 100,000 streams stays
small enough to open: large runs are summarised, never plotted point by point.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from steadystream._types import TEXT_KINDS
from steadystream.metrics import LABEL_DIMENSIONS, FleetMetrics
from steadystream.metrics.segments import segment_percentiles, segment_starts, segment_sum
from steadystream.timeline import Timeline

__all__ = [
    "BAND_PERCENTILES",
    "Cdf",
    "Histogram",
    "ItlBand",
    "StreamTrace",
    "TtftBars",
    "cdf",
    "histogram",
    "itl_band",
    "stream_trace",
    "ttft_bars",
]

FloatArray = npt.NDArray[np.float64]
IntArray = npt.NDArray[np.int64]

BAND_PERCENTILES = (50.0, 95.0, 99.0)
_NS = 1e9

_IS_TEXT_KIND = np.zeros(256, dtype=bool)
_IS_TEXT_KIND[[int(k) for k in TEXT_KINDS]] = True


# -- the ITL band -----------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class ItlBand:
    """Gap percentiles across streams by token position (docs/report.md#itl-band).

    ``position[i]`` is the first token position of bin ``i``: a gap's position is the number
    of tokens delivered before it ended. ``bin_width`` positions share a bin in long streams.
    """

    position: IntArray
    bin_width: int
    p50_s: FloatArray
    p95_s: FloatArray
    p99_s: FloatArray
    gaps: IntArray  # how many gaps fell in each bin
    total_gaps: int


def itl_band(timelines: Sequence[Timeline], max_bins: int = 300) -> ItlBand:
    """The gaps of every stream, indexed by token position, with percentiles per position.

    Vectorised over the whole run: text events are concatenated once, every gap gets its
    position from a running token count, and gaps are grouped by position bin with one
    stable sort. Positions are binned (``bin_width`` > 1) when streams are longer than
    ``max_bins`` tokens, so the curve has at most ``max_bins`` points.
    """
    gaps_ns, positions = _gaps_with_positions(timelines)
    if len(gaps_ns) == 0:
        empty = np.zeros(0)
        return ItlBand(
            np.zeros(0, dtype=np.int64), 1, empty, empty, empty, empty.astype(np.int64), 0
        )
    width = max(1, -(-int(positions.max()) // max_bins))
    bins = (positions - 1) // width
    order = np.argsort(bins, kind="stable")
    counts = np.bincount(bins, minlength=int(bins.max()) + 1).astype(np.int64)
    pct = segment_percentiles(gaps_ns[order], counts, BAND_PERCENTILES) / _NS
    filled = counts > 0
    return ItlBand(
        position=(np.flatnonzero(filled) * width + 1).astype(np.int64),
        bin_width=width,
        p50_s=pct[filled, 0],
        p95_s=pct[filled, 1],
        p99_s=pct[filled, 2],
        gaps=counts[filled],
        total_gaps=len(gaps_ns),
    )


def _gaps_with_positions(timelines: Sequence[Timeline]) -> tuple[IntArray, IntArray]:
    """Every gap between text events (ns) and the tokens delivered before each ended."""
    if not timelines:
        return np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.int64)
    event_counts = np.fromiter((len(t) for t in timelines), np.int64, len(timelines))
    kinds = np.concatenate([t.kinds for t in timelines])
    tokens = np.concatenate([t.tokens for t in timelines]).astype(np.int64)
    text_bytes = np.concatenate([t.text_bytes for t in timelines])
    # the same text events as the metrics use (Timeline.text_mask)
    text = _IS_TEXT_KIND[kinds] & ((tokens > 0) | (text_bytes > 0))
    times = np.concatenate([t.times for t in timelines])[text]
    tokens = tokens[text]
    counts = segment_sum(text, event_counts).astype(np.int64)
    starts = segment_starts(counts)
    has_text = counts > 0
    first = np.zeros(len(times), dtype=bool)
    first[starts[has_text]] = True
    # Tokens delivered within the stream up to and including each event: a running total
    # over the run, less what the streams before it delivered.
    running = np.cumsum(tokens)
    before = np.zeros(len(counts), dtype=np.int64)
    before[has_text] = running[starts[has_text]] - tokens[starts[has_text]]
    within = running - np.repeat(before, counts)
    gaps = np.diff(times, prepend=0)[~first]
    # A gap ends at event j + 1; the tokens before it are those up to event j.
    previous = np.flatnonzero(~first) - 1
    return gaps, within[previous]


# -- distributions ----------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Cdf:
    """An empirical CDF: ``share`` of streams at or below each value."""

    values: FloatArray
    share: FloatArray
    streams: int  # streams with a defined value


def cdf(values: FloatArray, max_points: int = 500) -> Cdf:
    """The CDF of the defined values; above ``max_points`` values, ``max_points`` quantiles.

    The quantiles are values that occur in the data (``inverted_cdf``), so the curve is a
    thinned copy of the exact step function, with its maximum kept.
    """
    defined = np.sort(values[~np.isnan(values)])
    n = len(defined)
    if n <= max_points:
        return Cdf(defined, np.arange(1, n + 1) / n if n else np.zeros(0), n)
    share = np.linspace(1.0 / max_points, 1.0, max_points)
    return Cdf(np.quantile(defined, share, method="inverted_cdf"), share, n)


@dataclass(frozen=True, slots=True)
class Histogram:
    edges: FloatArray  # len(counts) + 1
    counts: IntArray
    values: int  # defined values counted


def histogram(values: FloatArray, bins: int = 40) -> Histogram:
    """Counts of the defined values in ``bins`` equal bins (one bin when all are equal)."""
    defined = values[~np.isnan(values)]
    if len(defined) == 0:
        return Histogram(np.zeros(0), np.zeros(0, dtype=np.int64), 0)
    low, high = float(defined.min()), float(defined.max())
    if low == high:
        pad = max(abs(low) * 0.05, 0.05)
        low, high, bins = low - pad, high + pad, 1
    counts, edges = np.histogram(defined, bins=bins, range=(low, high))
    return Histogram(edges, counts.astype(np.int64), len(defined))


# -- one stream -------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class StreamTrace:
    """Tokens delivered over time for one stream, from the request (0 s, 0 tokens) on."""

    stream_id: str
    times_s: FloatArray
    tokens: IntArray  # cumulative
    gap_s: FloatArray  # the gap that ended at each point (NaN for the first two)
    causes: list[str | None] | None  # the cause of that gap, when the timeline knows it
    points: int  # text events in the stream (the trace may keep fewer)


def stream_trace(timeline: Timeline, max_points: int = 2000) -> StreamTrace:
    """A stream's cumulative tokens at each text event, thinned to ``max_points`` events.

    Thinning keeps the events that end the largest gaps, and the one before each, so every
    flat stretch of the curve (a stall) survives; the rest of the curve is a straight climb
    that loses nothing visible when sampled evenly.
    """
    mask = timeline.text_mask
    index = np.flatnonzero(mask)
    times = timeline.times[mask]
    cumulative = np.cumsum(timeline.tokens[mask].astype(np.int64))
    gaps = np.full(len(times), np.nan)
    gaps[1:] = np.diff(times)
    keep = np.arange(len(times))
    if len(times) > max_points:
        largest = np.argsort(-np.nan_to_num(gaps, nan=-1.0), kind="stable")[: max_points // 2]
        even = np.linspace(0, len(times) - 1, max_points // 2).round().astype(np.int64)
        keep = np.unique(np.concatenate([largest, np.maximum(largest - 1, 0), even]))
    notes = timeline.annotations.get("cause")
    causes = [None, *(notes[int(index[i])] for i in keep)] if notes is not None else None
    return StreamTrace(
        stream_id=timeline.stream_id,
        times_s=np.concatenate([[0.0], times[keep] / _NS]),
        tokens=np.concatenate([[0], cumulative[keep]]).astype(np.int64),
        gap_s=np.concatenate([[np.nan], gaps[keep] / _NS]),
        causes=causes,
        points=len(times),
    )


# -- TTFT by label ----------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class TtftBars:
    """TTFT percentiles per ``dimension=value`` group, largest groups first."""

    groups: list[str]
    streams: list[int]
    p50_s: list[float | None]
    p95_s: list[float | None]
    p99_s: list[float | None]
    left_out: int  # groups not shown (beyond ``max_groups``)


def ttft_bars(fleet: FleetMetrics, max_groups: int = 30) -> TtftBars:
    """TTFT by model, route and tenant; the whole run as one group when nothing is labelled."""
    rows: list[tuple[str, int, float | None, float | None, float | None]] = []
    for dimension in LABEL_DIMENSIONS:
        for value, group in fleet.ttft_by.get(dimension, {}).items():
            rows.append(
                (f"{dimension}={value}", group.streams, group.p50_s, group.p95_s, group.p99_s)
            )
    if not rows:
        rows.append(
            ("all streams", fleet.streams, fleet.ttft_p50_s, fleet.ttft_p95_s, fleet.ttft_p99_s)
        )
    left_out = max(0, len(rows) - max_groups)
    if left_out:
        # Keep the dimensions in order, but only their most used values.
        kept = set(sorted(range(len(rows)), key=lambda i: -rows[i][1])[:max_groups])
        rows = [row for i, row in enumerate(rows) if i in kept]
    return TtftBars(
        groups=[r[0] for r in rows],
        streams=[r[1] for r in rows],
        p50_s=[r[2] for r in rows],
        p95_s=[r[3] for r in rows],
        p99_s=[r[4] for r in rows],
        left_out=left_out,
    )
