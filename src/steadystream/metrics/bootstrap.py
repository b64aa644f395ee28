"""Bootstrap draws of fleet metrics: how far each number could move with other streams.

A fleet metric of N streams is one draw: another N streams from the same server would give
another number. The bootstrap (Efron) says how far: draw N streams with replacement from the
N recorded, many times, compute the metric of each draw, and read the spread of the values
(the percentile interval: its middle 95 %). Streams are what is resampled, because streams
are what is independent; the gaps within one stream are not.

A draw is a row of counts, how often each recorded stream is in it, so every metric of
every draw is computed at once from the per-stream table, with no table rebuilt per draw:
percentiles by weighted ranks, means and sums by matrix products. Each statistic follows its
metric's definition in :func:`~steadystream.metrics.fleet_metrics` (docs/metrics.md#fleet);
``tests/test_bootstrap.py`` checks that the two agree on every metric of the catalogue.

Few streams give wide intervals, and the tail percentiles of few streams the widest: the
p99 of 12 streams is their worst one, and a draw can only repeat or leave it out. That is
the point: the interval says how little 12 streams can tell.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from numbers import Integral

import numpy as np
import numpy.typing as npt

from steadystream.metrics._config import MetricConfig
from steadystream.metrics._fleet import good_streams
from steadystream.metrics._per_stream import StreamTable
from steadystream.metrics.segments import segment_ids

__all__ = ["LEVEL", "RESAMPLES", "fleet_draws", "fleet_statistic", "percentile_interval"]

FloatArray = npt.NDArray[np.float64]
Counts = npt.NDArray[np.int64]  # (draws, streams): how often each recorded stream is drawn
Statistic = Callable[[Counts], FloatArray]  # one value per draw, NaN where undefined

RESAMPLES = 1000
"""Draws per run: the 2.5 % and 97.5 % points each rest on 25 draws."""
LEVEL = 0.95
"""The share of draws an interval spans."""

_CELLS = 4_000_000  # counts held at once (one block of draws): about 32 MB

# How each fleet metric reduces the per-stream table (as fleet_metrics does).
_PERCENTILE_OF = {
    "p50_of_p99_s": ("gap_p99_s", 50),
    "p90_of_p99_s": ("gap_p99_s", 90),
    "p99_of_p99_s": ("gap_p99_s", 99),
    "p50_of_worst_gap_s": ("max_gap_s", 50),
    "p90_of_worst_gap_s": ("max_gap_s", 90),
    "p99_of_worst_gap_s": ("max_gap_s", 99),
    "ttft_p50_s": ("ttft_s", 50),
    "ttft_p90_s": ("ttft_s", 90),
    "ttft_p95_s": ("ttft_s", 95),
    "ttft_p99_s": ("ttft_s", 99),
    "ttfr_p50_s": ("ttfr_s", 50),
    "ttfr_p99_s": ("ttfr_s", 99),
    "tpot_p50_s": ("tpot_s", 50),
    "e2el_p50_s": ("e2el_s", 50),
    "head_burst_p50": ("head_burst", 50),
}
_MEAN_OF = {
    "unstable_share": "unstable",
    "qoe_mean": "qoe",
    "fluidity_mean": "fluidity",
    "tokens_per_chunk_mean": "tokens_per_chunk",
    "envelope_overhead_mean": "envelope_overhead",
}
_SUM_OF = {"output_tokens": "output_tokens", "stall_count": "stall_count"}
_POOLED = {
    "pooled_gap_p50_s": 50,
    "pooled_gap_p90_s": 90,
    "pooled_gap_p95_s": 95,
    "pooled_gap_p99_s": 99,
    "pooled_gap_max_s": 100,
}


def fleet_draws(
    table: StreamTable,
    names: Iterable[str],
    config: MetricConfig | None = None,
    *,
    resamples: int = RESAMPLES,
    seed: int = 0,
) -> dict[str, FloatArray]:
    """``resamples`` bootstrap values of each fleet metric named (NaN where a draw leaves it
    undefined). The same table and seed give the same draws."""
    if isinstance(resamples, bool) or not isinstance(resamples, Integral) or resamples < 0:
        raise ValueError(f"resamples must be a whole number, 0 or more; got {resamples!r}")
    cfg = config or MetricConfig()
    statistics = {name: fleet_statistic(name, table, cfg) for name in names}
    draws = {name: np.full(resamples, np.nan) for name in statistics}
    streams = len(table)
    if not streams or not statistics:
        return draws
    rng = np.random.default_rng(seed)
    pooled = any(name in _POOLED for name in statistics)
    # A pooled statistic spreads the counts over every gap: a block holds fewer draws.
    width = max(streams, len(table.gap_values_s)) if pooled else streams
    block = max(1, _CELLS // width)
    for start in range(0, resamples, block):
        rows = min(block, resamples - start)
        picks = rng.integers(0, streams, size=(rows, streams))
        # Row r's picks counted per stream, all rows in one bincount.
        offsets = picks + (np.arange(rows, dtype=np.int64) * streams)[:, None]
        counts = np.bincount(offsets.ravel(), minlength=rows * streams).reshape(rows, streams)
        for name, statistic in statistics.items():
            draws[name][start : start + rows] = statistic(counts)
    return draws


def percentile_interval(draws: FloatArray, level: float = LEVEL) -> tuple[float, float] | None:
    """The middle ``level`` of the draws; None when most draws left the metric undefined
    (then the run says too little to bound it)."""
    defined = draws[~np.isnan(draws)]
    if not len(defined) or len(defined) < len(draws) / 2:
        return None
    tail = (1 - level) / 2 * 100
    low, high = np.percentile(defined, (tail, 100 - tail))
    return float(low), float(high)


def fleet_statistic(name: str, table: StreamTable, config: MetricConfig) -> Statistic:
    """The fleet metric ``name`` of draws given as counts per stream (a row of ones is the
    run as recorded)."""
    column = table.column
    if name in _PERCENTILE_OF:
        values, q = _PERCENTILE_OF[name]
        return _percentile(column(values), q, owners=np.arange(len(table), dtype=np.int64))
    if name in _POOLED:
        return _percentile(table.gap_values_s, _POOLED[name], owners=segment_ids(table.gap_counts))
    if name in _MEAN_OF:
        return _mean(column(_MEAN_OF[name]))
    if name in _SUM_OF:
        return _sum(column(_SUM_OF[name]))
    if name == "streams":
        return lambda counts: counts.sum(axis=1).astype(np.float64)
    if name == "reasoning_streams":
        return _sum((~np.isnan(column("ttfr_s"))).astype(np.float64))
    if name == "goodput":
        good = good_streams(table, config).astype(np.float64)
        return lambda counts: (counts @ good) / counts.sum(axis=1)
    if name == "stalls_per_1k_tokens":
        counted = np.where(np.isnan(column("output_tokens")), np.nan, column("stall_count"))
        stalls, tokens = _sum(counted), _sum(column("output_tokens"))

        def per_1k(counts: Counts) -> FloatArray:
            total = tokens(counts)
            with np.errstate(invalid="ignore", divide="ignore"):
                return np.where(total > 0, stalls(counts) / total * 1000, np.nan)

        return per_1k
    raise KeyError(f"no bootstrap statistic for the fleet metric {name!r}")


def _percentile(values: FloatArray, q: float, *, owners: npt.NDArray[np.int64]) -> Statistic:
    """The q-th percentile (numpy's linear one) of the values of each draw, where value i
    belongs to stream ``owners[i]`` and counts as often as that stream is drawn."""
    defined = ~np.isnan(values)
    order = np.argsort(values[defined], kind="stable")
    ranked = values[defined][order]
    ranked_owner = owners[defined][order]

    def statistic(counts: Counts) -> FloatArray:
        result = np.full(len(counts), np.nan)
        if not len(ranked):
            return result
        reach = np.cumsum(counts[:, ranked_owner], axis=1)  # values up to each rank, per draw
        total = reach[:, -1]
        some = total > 0
        position = (total[some] - 1) * (q / 100)
        below = np.floor(position)
        above = np.minimum(below + 1, total[some] - 1)
        # The value at rank k of a draw is the first whose running count passes k.
        low = ranked[(reach[some] <= below[:, None]).sum(axis=1)]
        high = ranked[(reach[some] <= above[:, None]).sum(axis=1)]
        result[some] = low + (position - below) * (high - low)
        return result

    return statistic


def _mean(values: FloatArray) -> Statistic:
    """The mean of each draw's defined values."""
    defined = (~np.isnan(values)).astype(np.float64)
    filled = np.nan_to_num(values)

    def statistic(counts: Counts) -> FloatArray:
        weight = counts @ defined
        with np.errstate(invalid="ignore", divide="ignore"):
            return np.where(weight > 0, (counts @ filled) / weight, np.nan)

    return statistic


def _sum(values: FloatArray) -> Statistic:
    filled = np.nan_to_num(values)
    return lambda counts: (counts @ filled).astype(np.float64)
