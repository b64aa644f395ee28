"""What each pacer would have done to recorded traffic: the comparison behind ``whatif``.

Every recorded stream is simulated through every pacer (:func:`simulate_run`, backpressure
included), and the run is measured before and after with the metrics of docs/metrics.md.
Per pacer:

- added TTFT: paced minus recorded time to first visible token, per stream (p50, p99);
- tail delay: paced minus recorded time of the last text event, per stream (p50, p99): how
  long the end of the answer was held back;
- the run's scorecard after pacing: p99 of the per-stream p99 gap, p99 of the per-stream
  worst gap, stalls above the threshold, ITL goodput, TTFT p50/p99, mean QoE and fluidity.

The best pacer is the one, among those whose added TTFT p99 is within ``max_added_ttft``
(all of them when no limit is set), with the fewest stalls, then the lowest p99 worst gap,
then the lowest p99-of-p99 gap, then the shortest tail delay p99; over no streams at all there
is no evidence, and no best. Pure: nothing is read, written or printed here.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass, field
from numbers import Real
from typing import Any

import numpy as np
import numpy.typing as npt

from steadystream._types import Nanos
from steadystream.metrics import FleetMetrics, MetricConfig, fleet_metrics, stream_table
from steadystream.shaping.base import DEFAULT_HIGH_WATERMARK, DEFAULT_LOW_WATERMARK, Pacer
from steadystream.shaping.simulate import simulate_run
from steadystream.shaping.spec import format_spec
from steadystream.timeline import Timeline

__all__ = ["PacerOutcome", "Scorecard", "WhatIf", "what_if"]


@dataclass(frozen=True, slots=True)
class Scorecard:
    """The run's headline numbers (seconds, shares, counts; None where undefined)."""

    p99_of_p99_s: float | None
    p99_of_worst_gap_s: float | None
    stall_count: int
    goodput: float | None
    ttft_p50_s: float | None
    ttft_p99_s: float | None
    qoe_mean: float | None
    fluidity_mean: float | None

    @classmethod
    def of(cls, fleet: FleetMetrics) -> Scorecard:
        return cls(
            p99_of_p99_s=fleet.p99_of_p99_s,
            p99_of_worst_gap_s=fleet.p99_of_worst_gap_s,
            stall_count=fleet.stall_count,
            goodput=fleet.goodput,
            ttft_p50_s=fleet.ttft_p50_s,
            ttft_p99_s=fleet.ttft_p99_s,
            qoe_mean=fleet.qoe_mean,
            fluidity_mean=fleet.fluidity_mean,
        )


@dataclass(frozen=True, slots=True)
class PacerOutcome:
    """One pacer over the whole run."""

    spec: str
    after: Scorecard
    added_ttft_p50_s: float | None
    added_ttft_p99_s: float | None
    tail_delay_p50_s: float | None
    tail_delay_p99_s: float | None
    max_buffered: int  # the most tokens held at once, over all streams
    paused_streams: int  # streams whose read backpressure paused at least once
    within_limit: bool  # added TTFT p99 within max_added_ttft (True when no limit)
    timelines: list[Timeline] = field(default_factory=list, repr=False, compare=False)

    def to_dict(self) -> dict[str, Any]:
        out = {name: getattr(self, name) for name in self.__dataclass_fields__}
        out.pop("timelines")
        out["after"] = asdict(self.after)
        return out


@dataclass(frozen=True, slots=True)
class WhatIf:
    """The comparison: the run as recorded, and after each pacer."""

    streams: int
    config: MetricConfig
    max_added_ttft_ns: Nanos | None
    before: Scorecard
    pacers: list[PacerOutcome]
    best: int | None  # index into ``pacers``; None when no pacer is within the limit

    @property
    def best_pacer(self) -> PacerOutcome | None:
        return None if self.best is None else self.pacers[self.best]

    def to_dict(self) -> dict[str, Any]:
        return {
            "streams": self.streams,
            "stall_threshold_s": self.config.stall_threshold_ns / 1e9,
            "ttft_target_s": self.config.ttft_target_ns / 1e9,
            "max_added_ttft_s": (
                None if self.max_added_ttft_ns is None else self.max_added_ttft_ns / 1e9
            ),
            "best": None if self.best is None else self.pacers[self.best].spec,
            "before": asdict(self.before),
            "pacers": [outcome.to_dict() for outcome in self.pacers],
        }


def what_if(
    timelines: Iterable[Timeline],
    pacers: Iterable[Pacer],
    *,
    config: MetricConfig | None = None,
    max_added_ttft_ns: Nanos | None = None,
    high_watermark: int | None = DEFAULT_HIGH_WATERMARK,
    low_watermark: int = DEFAULT_LOW_WATERMARK,
    keep_timelines: bool = False,
) -> WhatIf:
    """Simulate ``pacers`` over ``timelines`` and compare (see the module docstring).

    ``keep_timelines`` keeps the paced timelines on each outcome, for writing them out.
    ``max_added_ttft_ns`` is a finite number of nanoseconds, zero or more (None: no limit).
    """
    _check_limit(max_added_ttft_ns)
    cfg = config or MetricConfig()
    # Each is read several times (once per pacer): a generator would be used up by the first.
    timelines = list(timelines)
    pacers = list(pacers)
    for pacer in pacers:
        if not isinstance(pacer, Pacer):
            raise TypeError(
                f"pacers must be Pacer objects (parse_pacer makes one from a spec), got {pacer!r}"
            )
    before = Scorecard.of(fleet_metrics(stream_table(timelines, cfg), cfg))
    first_before, last_before = _text_span(timelines)
    outcomes: list[PacerOutcome] = []
    for pacer in pacers:
        runs = [
            simulate_run(t, pacer, high_watermark=high_watermark, low_watermark=low_watermark)
            for t in timelines
        ]
        paced = [run.timeline for run in runs]
        first, last = _text_span(paced)
        added_ns = first - first_before
        added = _percentiles(added_ns)
        tail = _percentiles(last - last_before)
        outcomes.append(
            PacerOutcome(
                spec=format_spec(pacer),
                after=Scorecard.of(fleet_metrics(stream_table(paced, cfg), cfg)),
                added_ttft_p50_s=added[0],
                added_ttft_p99_s=added[1],
                tail_delay_p50_s=tail[0],
                tail_delay_p99_s=tail[1],
                max_buffered=max((run.max_buffered for run in runs), default=0),
                paused_streams=sum(1 for run in runs if run.paused),
                within_limit=_within(added_ns, max_added_ttft_ns),
                timelines=paced if keep_timelines else [],
            )
        )
    return WhatIf(
        streams=len(timelines),
        config=cfg,
        max_added_ttft_ns=max_added_ttft_ns,
        before=before,
        pacers=outcomes,
        best=_best(outcomes) if timelines else None,
    )


def _check_limit(limit_ns: object) -> None:
    # NaN compares false with everything: as a limit it would make every pacer ineligible.
    ok = limit_ns is None or (
        isinstance(limit_ns, Real)
        and not isinstance(limit_ns, bool)
        and math.isfinite(limit_ns)
        and float(limit_ns) >= 0
    )
    if not ok:
        raise ValueError(
            f"max_added_ttft_ns must be a finite number of nanoseconds, 0 or more (or None),"
            f" got {limit_ns!r}"
        )


def _within(added_ns: npt.NDArray[np.float64], limit_ns: Nanos | None) -> bool:
    defined = added_ns[~np.isnan(added_ns)]
    return limit_ns is None or not len(defined) or float(np.percentile(defined, 99)) <= limit_ns


def _best(outcomes: Sequence[PacerOutcome]) -> int | None:
    def key(index: int) -> tuple[float, ...]:
        outcome = outcomes[index]
        after = outcome.after
        return (
            after.stall_count,
            _or_inf(after.p99_of_worst_gap_s),
            _or_inf(after.p99_of_p99_s),
            _or_inf(outcome.tail_delay_p99_s),
        )

    eligible = [i for i, outcome in enumerate(outcomes) if outcome.within_limit]
    return min(eligible, key=key) if eligible else None


def _or_inf(value: float | None) -> float:
    return float("inf") if value is None else value


def _text_span(
    timelines: Sequence[Timeline],
) -> tuple[npt.NDArray[np.float64], npt.NDArray[np.float64]]:
    """Per stream, the time of the first visible token (TTFT: reasoning is not one) and of
    the last text event (NaN: none)."""
    first = np.full(len(timelines), np.nan)
    last = np.full(len(timelines), np.nan)
    for index, timeline in enumerate(timelines):
        answer = timeline.times[timeline.visible_mask]
        if len(answer):
            first[index] = answer[0]
        times = timeline.times[timeline.text_mask]
        if len(times):
            last[index] = times[-1]
    return first, last


def _percentiles(values_ns: npt.NDArray[np.float64]) -> tuple[float | None, float | None]:
    """p50 and p99 in seconds of the defined values (a stream without text has no TTFT)."""
    defined = values_ns[~np.isnan(values_ns)]
    if not len(defined):
        return None, None
    p50, p99 = np.percentile(defined, (50, 99))
    return float(p50) / 1e9, float(p99) / 1e9
