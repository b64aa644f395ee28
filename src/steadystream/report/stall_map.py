"""The stall map: streams by time, every gap coloured by its size (docs/report.md#stall-map).

A small run is drawn gap by gap, each gap a bar from the event before it to the event that
ended it. A large run is summarised twice over so the report stays small: it shows at most
``max_rows`` streams (the worst by their worst gap, then a seeded random sample of the rest),
and when those still hold too many gaps, time is cut into bins and each cell shows the worst
gap that covered it. :attr:`StallMap.summary` says what was left out, for the subtitle.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt

from steadystream.metrics import StreamTable, worst_streams
from steadystream.report._text import chart_labels
from steadystream.timeline import Timeline

__all__ = ["GapBars", "GapGrid", "StallMap", "stall_map"]

FloatArray = npt.NDArray[np.float64]
IntArray = npt.NDArray[np.int64]

_NS = 1e9
# Wall-clock time lines streams up as they ran (a stall that hits many streams at once is a
# vertical stripe), but only while the run is short next to its streams; past that each
# stream would be a sliver, and streams are drawn from their own request instead.
_WALL_SPAN_LIMIT = 20.0


@dataclass(frozen=True, slots=True)
class GapBars:
    """One bar per gap, and one per wait for the first token."""

    row: IntArray
    start_s: FloatArray
    length_s: FloatArray
    position: IntArray  # tokens delivered before the gap ended
    cause: list[str | None] | None
    wait_row: IntArray
    wait_start_s: FloatArray
    wait_length_s: FloatArray


@dataclass(frozen=True, slots=True)
class GapGrid:
    """Streams by time bins; each cell holds the worst gap covering it (NaN: none)."""

    edges_s: FloatArray
    worst_s: FloatArray  # shape (rows, bins)
    position: IntArray  # of that gap, -1 where none
    cause: list[list[str | None]] | None


@dataclass(frozen=True, slots=True)
class StallMap:
    # stream ids as a chart shows them (report._text.chart_labels), top to bottom: by start
    # (wall clock), else worst first
    rows: list[str]
    clock: str  # "wall": seconds since the run's first request; "request": since each request
    origin: float | None  # with the wall clock: the run's first request (unix seconds)
    streams: int  # in the run
    worst_kept: int  # rows chosen as the worst streams (0: every stream is shown)
    sampled: int  # rows drawn at random from the rest
    gaps: int  # gaps of the rows shown
    bars: GapBars | None
    grid: GapGrid | None

    @property
    def summary(self) -> str:
        """What the chart shows of the run, in words."""
        parts = []
        if self.worst_kept or self.sampled:
            parts.append(
                f"showing {len(self.rows):,} of {self.streams:,} streams: the {self.worst_kept:,}"
                f" with the largest worst gap and {self.sampled:,} drawn at random"
            )
        else:
            parts.append(f"all {self.streams:,} streams")
        if self.grid is not None:
            width = float(self.grid.edges_s[1] - self.grid.edges_s[0])
            parts.append(
                f"{self.gaps:,} gaps summarised in {width:.3g} s cells, each coloured by the worst"
                " gap that covered it"
            )
        else:
            parts.append(f"{self.gaps:,} gaps, one bar each")
        parts.append(
            "time since the run's first request"
            if self.clock == "wall"
            else "time since each stream's request"
        )
        return "; ".join(parts)


def stall_map(
    timelines: Sequence[Timeline],
    table: StreamTable,
    *,
    max_rows: int = 200,
    worst_rows: int = 50,
    max_bars: int = 10_000,
    bins: int = 300,
    seed: int = 0,
) -> StallMap:
    """The stall map of a run; ``table`` is its stream table (it picks the worst streams)."""
    chosen, worst_kept, sampled = _choose_rows(table, max_rows, worst_rows, seed)
    picked = [timelines[i] for i in chosen]
    clock, shift = _clock(picked)
    origin = (
        min(t.started_at for t in picked if t.started_at is not None) if clock == "wall" else None
    )
    order = np.argsort(shift, kind="stable")
    picked = [picked[i] for i in order]
    shift = shift[order]
    gaps = _Gaps.of(picked, shift)
    rows = chart_labels([t.stream_id for t in picked])
    few = len(gaps.row) <= max_bars
    return StallMap(
        rows=rows,
        clock=clock,
        origin=origin,
        streams=len(timelines),
        worst_kept=worst_kept,
        sampled=sampled,
        gaps=len(gaps.row),
        bars=gaps.bars() if few else None,
        grid=None if few else gaps.grid(len(rows), bins),
    )


def _choose_rows(
    table: StreamTable, max_rows: int, worst_rows: int, seed: int
) -> tuple[list[int], int, int]:
    n = len(table)
    if n <= max_rows:
        return list(range(n)), 0, 0
    worst = worst_streams(table, min(worst_rows, max_rows))
    rest = np.setdiff1d(np.arange(n), worst)
    draw = np.random.default_rng(seed).choice(rest, size=max_rows - len(worst), replace=False)
    return [*worst, *sorted(int(i) for i in draw)], len(worst), len(draw)


def _clock(picked: Sequence[Timeline]) -> tuple[str, FloatArray]:
    """Which clock the map uses, and each stream's offset on it (seconds)."""
    starts = [t.started_at for t in picked]
    if not picked or any(s is None for s in starts):
        return "request", np.zeros(len(picked))
    offsets = np.array(starts, dtype=np.float64)
    offsets -= offsets.min()
    lengths = np.array([t.times[-1] / _NS if len(t) else 0.0 for t in picked])
    longest_typical = max(float(np.median(lengths)), 1e-3)
    if float((offsets + lengths).max()) > _WALL_SPAN_LIMIT * longest_typical:
        return "request", np.zeros(len(picked))
    return "wall", offsets


@dataclass(frozen=True, slots=True)
class _Gaps:
    """The gaps of the chosen streams, concatenated, on the map's clock."""

    row: IntArray
    start_s: FloatArray
    end_s: FloatArray
    position: IntArray
    cause: list[str | None] | None
    first_token_s: FloatArray  # per row; NaN for a stream without a token
    shift_s: FloatArray

    @classmethod
    def of(cls, picked: Sequence[Timeline], shift: FloatArray) -> _Gaps:
        rows: list[IntArray] = []
        starts: list[FloatArray] = []
        ends: list[FloatArray] = []
        positions: list[IntArray] = []
        causes: list[str | None] = []
        first = np.full(len(picked), np.nan)
        known = any("cause" in t.annotations for t in picked)
        for r, timeline in enumerate(picked):
            mask = timeline.text_mask
            times = timeline.times[mask] / _NS + shift[r]
            if len(times) == 0:
                continue
            first[r] = times[0]
            delivered = np.cumsum(timeline.tokens[mask].astype(np.int64))
            rows.append(np.full(len(times) - 1, r, dtype=np.int64))
            starts.append(times[:-1])
            ends.append(times[1:])
            positions.append(delivered[:-1])
            if known:
                notes = timeline.annotations.get("cause")
                ended_by = np.flatnonzero(mask)[1:]
                causes += [notes[i] for i in ended_by] if notes else [None] * len(ended_by)

        return cls(
            row=_join(rows, np.int64),
            start_s=_join(starts, np.float64),
            end_s=_join(ends, np.float64),
            position=_join(positions, np.int64),
            cause=causes if known else None,
            first_token_s=first,
            shift_s=shift,
        )

    def bars(self) -> GapBars:
        waited = np.flatnonzero(~np.isnan(self.first_token_s))
        return GapBars(
            row=self.row,
            start_s=self.start_s,
            length_s=self.end_s - self.start_s,
            position=self.position,
            cause=self.cause,
            wait_row=waited.astype(np.int64),
            wait_start_s=self.shift_s[waited],
            wait_length_s=self.first_token_s[waited] - self.shift_s[waited],
        )

    def grid(self, rows: int, bins: int) -> GapGrid:
        top = float(self.end_s.max()) if len(self.end_s) else 1.0
        width = max(top / bins, 1e-6)
        edges = np.arange(bins + 1, dtype=np.float64) * width
        lo = np.minimum((self.start_s // width).astype(np.int64), bins - 1)
        hi = np.minimum((self.end_s // width).astype(np.int64), bins - 1)
        # A gap longer than a cell covers every cell it spans: a 2 s freeze is a red streak.
        span = hi - lo + 1
        gap = np.repeat(np.arange(len(lo)), span)
        step = np.arange(len(gap)) - np.repeat(np.cumsum(span) - span, span)
        cell = self.row[gap] * bins + lo[gap] + step
        size = (self.end_s - self.start_s)[gap]
        order = np.lexsort((size, cell))  # by cell, then size: each cell's worst gap last
        last = np.flatnonzero(np.diff(cell[order], append=-1) != 0)
        winner = gap[order[last]]
        where = cell[order[last]]
        worst = np.full(rows * bins, np.nan)
        worst[where] = size[order[last]]
        position = np.full(rows * bins, -1, dtype=np.int64)
        position[where] = self.position[winner]
        causes: list[list[str | None]] | None = None
        if self.cause is not None:
            flat: list[str | None] = [None] * (rows * bins)
            for w, g in zip(where.tolist(), winner.tolist(), strict=True):
                flat[w] = self.cause[g]
            causes = [flat[r * bins : (r + 1) * bins] for r in range(rows)]
        return GapGrid(edges, worst.reshape(rows, bins), position.reshape(rows, bins), causes)


def _join(parts: list[npt.NDArray[Any]], dtype: type[Any]) -> npt.NDArray[Any]:
    return np.concatenate(parts).astype(dtype) if parts else np.zeros(0, dtype=dtype)
