"""Segment reductions: one operation over many streams' concatenated arrays.

Metrics over a fleet never loop over chunks in Python. Each stream's values sit in one
concatenated array, and ``starts``/``counts`` say where each stream's segment begins and how
long it is. The helpers here reduce every segment at once. They are public because the report
reduces its per-stream chart data the same way.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Any

import numpy as np
import numpy.typing as npt

__all__ = [
    "lindley",
    "segment_ids",
    "segment_percentiles",
    "segment_running_max",
    "segment_starts",
    "segment_sum",
]

FloatArray = npt.NDArray[np.float64]
IntArray = npt.NDArray[np.int64]


def segment_starts(counts: IntArray) -> IntArray:
    """Start offset of each segment in the concatenated array."""
    starts = np.zeros(len(counts), dtype=np.int64)
    if len(counts) > 1:
        np.cumsum(counts[:-1], out=starts[1:])
    return starts


def segment_ids(counts: IntArray) -> IntArray:
    """The segment index of every element, e.g. counts [2, 0, 3] -> [0, 0, 2, 2, 2]."""
    return np.repeat(np.arange(len(counts), dtype=np.int64), counts)


def segment_sum(values: npt.NDArray[np.generic], counts: IntArray) -> FloatArray:
    """Sum of each segment as float64 (0.0 for an empty one)."""
    sums = np.zeros(len(counts), dtype=np.float64)
    nonempty = counts > 0
    if len(values) and nonempty.any():
        # reduceat sums each segment on its own: no cancellation across a long run.
        sums[nonempty] = np.add.reduceat(
            values.astype(np.float64, copy=False), segment_starts(counts)[nonempty]
        )
    return sums


def segment_percentiles(
    values: npt.NDArray[np.generic], counts: IntArray, quantiles: Sequence[float]
) -> FloatArray:
    """Percentiles (0-100) of every segment, shape ``(len(counts), len(quantiles))``.

    Linear interpolation between closest ranks, the same as ``np.percentile``'s default, so
    the numbers match what anyone computing one stream by hand gets. Empty segments give NaN.
    """
    qs = np.asarray(quantiles, dtype=np.float64) / 100.0
    out = np.full((len(counts), len(qs)), np.nan)
    for members, rows in _rows_by_length(values, counts):
        length = rows.shape[1]
        pos = qs * (length - 1)
        lo = np.floor(pos).astype(np.int64)
        hi = np.minimum(lo + 1, length - 1)
        frac = pos - lo
        rows.partition(np.unique(np.concatenate([lo, hi])), axis=1)
        low, high = rows[:, lo].astype(np.float64), rows[:, hi].astype(np.float64)
        # numpy's own lerp (from each end by the nearer side), so results agree with
        # np.percentile to the last bit.
        diff = high - low
        out[members] = np.where(frac >= 0.5, high - diff * (1 - frac), low + diff * frac)
    return out


def lindley(steps: IntArray, counts: IntArray) -> tuple[IntArray, IntArray]:
    """Run ``level_i = max(0, level_{i-1} + steps_i)`` from 0 within every segment.

    Returns ``(before, after)``: each element's level before and after its step. This is the
    recursion behind a reader's buffer (Andes QoE) and carried slack (Etalon fluidity). With
    the segment's partial sums ``S`` it has the closed form
    ``level_i = S_i - min(0, min_{j<=i} S_j)``. Integer steps keep it exact.
    """
    ids = segment_ids(counts)
    starts = segment_starts(counts)
    nonempty = counts > 0
    partial = np.cumsum(steps, dtype=np.int64)
    offset = np.zeros(len(counts), dtype=np.int64)
    offset[nonempty] = partial[starts[nonempty]] - steps[starts[nonempty]]
    partial -= offset[ids]
    lowest = -segment_running_max(-partial, counts, ids=ids)
    after = partial - np.minimum(lowest, 0)
    before = np.empty_like(after)
    if len(after):
        before[1:] = after[:-1]
        before[starts[nonempty]] = 0
    return before, after


def segment_running_max(
    values: IntArray, counts: IntArray, *, ids: IntArray | None = None
) -> IntArray:
    """Running maximum within every segment (restarting at each segment's start).

    One ``np.maximum.accumulate`` over the whole array: each segment is lifted above
    everything before it, so no maximum leaks across a boundary, then lowered back. Exact in
    int64; falls back to per-length rows when the lift could overflow.
    """
    if len(values) == 0:
        return values.copy()
    spread = int(values.max()) - int(values.min()) + 1
    if spread * len(counts) < 2**62:
        lift = (segment_ids(counts) if ids is None else ids) * spread
        return np.maximum.accumulate(values + lift) - lift
    out = np.empty_like(values)
    for _, idx in _rows_by_length(values, counts, positions=True):
        out[idx] = np.maximum.accumulate(values[idx], axis=1)
    return out


def _rows_by_length(
    values: npt.NDArray[np.generic], counts: IntArray, *, positions: bool = False
) -> Iterator[tuple[IntArray, npt.NDArray[Any]]]:
    """Yield ``(members, rows)``: the segments of each length as one ``(k, length)`` matrix.

    Real runs have a few hundred distinct stream lengths, so a fleet of any size costs a few
    hundred numpy calls, each over a dense matrix (row-wise sorts and scans are fast).
    ``positions=True`` yields the element positions instead of a copy of the values.
    """
    starts = segment_starts(counts)
    lengths, inverse = np.unique(counts, return_inverse=True)
    order = np.argsort(inverse, kind="stable")
    bounds = np.searchsorted(inverse[order], np.arange(len(lengths) + 1))
    for g, length in enumerate(lengths.tolist()):
        if length == 0:
            continue
        members = order[bounds[g] : bounds[g + 1]]
        idx = starts[members][:, None] + np.arange(length)
        yield members, (idx if positions else values[idx])
