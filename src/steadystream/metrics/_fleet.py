"""Fleet metrics: distributions of per-stream distributions (docs/metrics.md#fleet)."""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np
import numpy.typing as npt

from steadystream._types import Outcome
from steadystream.metrics._config import MetricConfig
from steadystream.metrics._per_stream import StreamTable, stream_table
from steadystream.timeline import Timeline

__all__ = ["LABEL_DIMENSIONS", "FleetMetrics", "fleet_metrics", "good_streams", "worst_streams"]

LABEL_DIMENSIONS = ("model", "route", "tenant")
MAX_TTFT_GROUPS = 100
"""Values of one label that ``ttft_by`` breaks TTFT down by; the rest are pooled as one."""

# A stream that broke off did not give its reader what they asked for, however smooth it was.
_FAILED = frozenset({Outcome.ERROR, Outcome.TRUNCATED, Outcome.CLIENT_STUCK})


@dataclass(frozen=True, slots=True)
class TtftGroup:
    streams: int
    p50_s: float | None
    p95_s: float | None
    p99_s: float | None


@dataclass(frozen=True, slots=True)
class FleetMetrics:
    """What a fleet of streams felt like. Seconds and shares (0-1); None where undefined."""

    streams: int
    output_tokens: int
    outcomes: dict[str, int]
    token_sources: dict[str, int]
    stall_threshold_s: float
    ttft_target_s: float
    # the two headline numbers, and their companions
    p99_of_p99_s: float | None
    p99_of_worst_gap_s: float | None
    p50_of_p99_s: float | None
    p90_of_p99_s: float | None
    p50_of_worst_gap_s: float | None
    p90_of_worst_gap_s: float | None
    goodput: float | None
    unstable_share: float | None
    stall_count: int
    stalls_per_1k_tokens: float | None
    ttft_p50_s: float | None
    ttft_p90_s: float | None
    ttft_p95_s: float | None
    ttft_p99_s: float | None
    # time to first reasoning token, over the streams that reasoned (None when none did)
    reasoning_streams: int
    ttfr_p50_s: float | None
    ttfr_p99_s: float | None
    tpot_p50_s: float | None
    e2el_p50_s: float | None
    # vLLM's convention: every gap of every stream in one pool (for comparison only)
    pooled_gap_p50_s: float | None
    pooled_gap_p90_s: float | None
    pooled_gap_p95_s: float | None
    pooled_gap_p99_s: float | None
    pooled_gap_max_s: float | None
    qoe_mean: float | None
    fluidity_mean: float | None
    tokens_per_chunk_mean: float | None
    envelope_overhead_mean: float | None
    head_burst_p50: float | None
    ttft_by: dict[str, dict[str, TtftGroup]] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    def scalars(self) -> dict[str, float | None]:
        """The single-number metrics by name (what ``gate`` compares)."""
        return {
            name: None if value is None else float(value)
            for name, value in self.to_dict().items()
            if value is None or isinstance(value, int | float)
        }


def fleet_metrics(
    runs: Sequence[Timeline] | StreamTable, config: MetricConfig | None = None
) -> FleetMetrics:
    """Fleet metrics of a run, from its timelines or an already computed stream table."""
    cfg = config or MetricConfig()
    table = runs if isinstance(runs, StreamTable) else stream_table(runs, cfg)
    col = table.column
    p99, worst, ttft = col("gap_p99_s"), col("max_gap_s"), col("ttft_s")
    threshold_s = cfg.stall_threshold_ns / 1e9
    target_s = cfg.ttft_target_ns / 1e9

    good = good_streams(table, cfg)
    tokens = float(np.nansum(col("output_tokens")))
    stalls = int(np.nansum(col("stall_count")))
    # Per 1,000 tokens: the stalls of the streams whose tokens were counted (a peer's file
    # may keep none), over those tokens; the others' stalls have no tokens to go with.
    counted_stalls = float(np.nansum(col("stall_count")[~np.isnan(col("output_tokens"))]))
    unstable = col("unstable")
    pooled = _percentiles(table.gap_values_s, (50, 90, 95, 99, 100))
    of_p99 = _percentiles(p99, (50, 90, 99))
    of_worst = _percentiles(worst, (50, 90, 99))
    ttft_pct = _percentiles(ttft, (50, 90, 95, 99))
    ttfr = col("ttfr_s")
    ttfr_pct = _percentiles(ttfr, (50, 99))

    return FleetMetrics(
        streams=len(table),
        output_tokens=int(tokens),
        outcomes=dict(Counter(o.value for o in table.outcomes)),
        token_sources=dict(Counter(table.token_sources)),
        stall_threshold_s=threshold_s,
        ttft_target_s=target_s,
        p99_of_p99_s=of_p99[2],
        p99_of_worst_gap_s=of_worst[2],
        p50_of_p99_s=of_p99[0],
        p90_of_p99_s=of_p99[1],
        p50_of_worst_gap_s=of_worst[0],
        p90_of_worst_gap_s=of_worst[1],
        goodput=float(good.mean()) if len(table) else None,
        unstable_share=_mean(unstable),
        stall_count=stalls,
        stalls_per_1k_tokens=counted_stalls / tokens * 1000 if tokens else None,
        ttft_p50_s=ttft_pct[0],
        ttft_p90_s=ttft_pct[1],
        ttft_p95_s=ttft_pct[2],
        ttft_p99_s=ttft_pct[3],
        reasoning_streams=int(np.count_nonzero(~np.isnan(ttfr))),
        ttfr_p50_s=ttfr_pct[0],
        ttfr_p99_s=ttfr_pct[1],
        tpot_p50_s=_percentiles(col("tpot_s"), (50,))[0],
        e2el_p50_s=_percentiles(col("e2el_s"), (50,))[0],
        pooled_gap_p50_s=pooled[0],
        pooled_gap_p90_s=pooled[1],
        pooled_gap_p95_s=pooled[2],
        pooled_gap_p99_s=pooled[3],
        pooled_gap_max_s=pooled[4],
        qoe_mean=_mean(col("qoe")),
        fluidity_mean=_mean(col("fluidity")),
        tokens_per_chunk_mean=_mean(col("tokens_per_chunk")),
        envelope_overhead_mean=_mean(col("envelope_overhead")),
        head_burst_p50=_percentiles(col("head_burst"), (50,))[0],
        ttft_by=_ttft_by_label(table),
    )


def good_streams(table: StreamTable, config: MetricConfig) -> npt.NDArray[np.bool_]:
    """Per stream: did it count for ITL goodput (completed, first visible token within the
    TTFT target, no gap above the stall threshold; docs/metrics.md#fleet)."""
    worst, ttft = table.column("max_gap_s"), table.column("ttft_s")
    failed = np.array([o in _FAILED for o in table.outcomes], dtype=bool)
    smooth = np.isnan(worst) | (worst <= config.stall_threshold_ns / 1e9)
    with np.errstate(invalid="ignore"):
        return ~failed & ~np.isnan(ttft) & (ttft <= config.ttft_target_ns / 1e9) & smooth


def worst_streams(table: StreamTable, count: int = 10) -> list[int]:
    """Indices of the streams with the largest worst gap (the freezes people watched)."""
    worst = table.column("max_gap_s")
    order = np.argsort(np.where(np.isnan(worst), -np.inf, -worst), kind="stable")
    return [int(i) for i in order[:count] if not np.isnan(worst[i])]


def _ttft_by_label(table: StreamTable) -> dict[str, dict[str, TtftGroup]]:
    """TTFT percentiles per value of each label dimension, in name order.

    One sort per dimension, not a pass over the run per value: a label with a value per
    stream (a request id put in ``tenant``) costs what one value does. At most
    :data:`MAX_TTFT_GROUPS` values are kept, those with the most streams; the rest are
    pooled in one group named ``(N other values)``.
    """
    ttft = table.column("ttft_s")
    result: dict[str, dict[str, TtftGroup]] = {}
    for dimension in LABEL_DIMENSIONS:
        values = np.array([labels.get(dimension, "") for labels in table.labels], dtype=object)
        names, inverse, counts = np.unique(values, return_inverse=True, return_counts=True)
        present = [i for i, name in enumerate(names.tolist()) if name]
        if not present:
            continue
        order = np.argsort(inverse, kind="stable")
        bounds = np.concatenate([[0], np.cumsum(counts)])
        kept = sorted(present, key=lambda i: -counts[i])[:MAX_TTFT_GROUPS]
        groups: dict[str, TtftGroup] = {}
        for i in sorted(kept):
            groups[names[i]] = _ttft_group(ttft[order[bounds[i] : bounds[i + 1]]])
        others = sorted(set(present) - set(kept))
        if others:
            rest = np.concatenate([order[bounds[i] : bounds[i + 1]] for i in others])
            groups[f"({len(others):,} other values)"] = _ttft_group(ttft[rest])
        result[dimension] = groups
    return result


def _ttft_group(member: npt.NDArray[np.float64]) -> TtftGroup:
    p50, p95, p99 = _percentiles(member, (50, 95, 99))
    return TtftGroup(len(member), p50, p95, p99)


def _percentiles(values: npt.NDArray[np.float64], qs: Sequence[float]) -> list[float | None]:
    defined = values[~np.isnan(values)]
    if len(defined) == 0:
        return [None] * len(qs)
    return [float(v) for v in np.percentile(defined, qs)]


def _mean(values: npt.NDArray[np.float64]) -> float | None:
    defined = values[~np.isnan(values)]
    return float(defined.mean()) if len(defined) else None
