"""Engine metrics scraped during a run, as numbers over wall time (no I/O here).

A scrape is one instant (unix seconds) and the value of each series name summed over its
label sets. Counters are read as increases over a window, gauges as their peak in it. The
names are vLLM's (``vllm:num_preemptions_total`` ...), which the lab exports too.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from numbers import Real

import numpy as np
import numpy.typing as npt

__all__ = [
    "INJECTED_FAULTS",
    "KV_USAGE",
    "PREEMPTIONS",
    "PROMPT_TOKENS",
    "RUNNING",
    "SPEC_ACCEPTED",
    "SPEC_DRAFTS",
    "SPEC_DRAFT_TOKENS",
    "WAITING",
    "EngineSamples",
]  # fmt: skip

PREEMPTIONS = "vllm:num_preemptions_total"
PROMPT_TOKENS = "vllm:prompt_tokens_total"
SPEC_DRAFTS = "vllm:spec_decode_num_drafts_total"
SPEC_DRAFT_TOKENS = "vllm:spec_decode_num_draft_tokens_total"
SPEC_ACCEPTED = "vllm:spec_decode_num_accepted_tokens_total"
WAITING = "vllm:num_requests_waiting"
RUNNING = "vllm:num_requests_running"
KV_USAGE = "vllm:kv_cache_usage_perc"
LAG_RESETS = "lab:scheduling_lag_resets_total"  # the lab's own: it fell behind its plan
LAG_SUM = "lab:scheduling_lag_seconds_sum"  # the lab's own: step start minus planned, summed
LAG_COUNT = "lab:scheduling_lag_seconds_count"
INJECTED_FAULTS = "lab:injected_faults_total"  # the replay's: pauses injected, as played

FloatArray = npt.NDArray[np.float64]


@dataclass(frozen=True, slots=True)
class EngineSamples:
    """Scrapes in time order: ``times_s`` (unix seconds) and one column per series name."""

    times_s: FloatArray
    series: dict[str, FloatArray]
    _counted: dict[str, FloatArray] = field(
        default_factory=dict, init=False, repr=False, compare=False
    )

    @classmethod
    def from_scrapes(cls, scrapes: Iterable[tuple[float, Mapping[str, float]]]) -> EngineSamples:
        """Build from ``(unix_seconds, {name: value})`` pairs, sorted here by time. A time
        that is not a finite number is a ValueError (it would sort anywhere), and so is a
        value that is no number (naming its series); a value that is not finite reads as not
        scraped, as the Prometheus text reader skips it."""
        rows = list(scrapes)
        for number, (t, values) in enumerate(rows):
            if isinstance(t, bool) or not isinstance(t, Real) or not math.isfinite(t):
                raise ValueError(f"scrape {number}: t must be a finite number of unix seconds")
            for name, value in values.items():
                if isinstance(value, bool) or not isinstance(value, Real):
                    raise ValueError(
                        f"scrape {number}: series {str(name)[:100]!r} must be a number, not"
                        f" {type(value).__name__}"
                    )
        rows.sort(key=lambda row: row[0])
        names = sorted({name for _, values in rows for name in values})
        times = np.array([t for t, _ in rows], dtype=np.float64)
        series = {}
        for name in names:
            column = np.array([values.get(name, np.nan) for _, values in rows], dtype=np.float64)
            column[~np.isfinite(column)] = np.nan
            series[name] = column
        return cls(times, series)

    def __len__(self) -> int:
        return len(self.times_s)

    def increase(self, name: str, start_s: float, end_s: float) -> float | None:
        """How much counter ``name`` grew from the last scrape at or before ``start_s`` to
        the first at or after ``end_s``; None when the scrapes do not cover the window."""
        found = self.increases(name, np.array([start_s], dtype=np.float64), np.array([end_s]))
        return None if np.isnan(found[0]) else float(found[0])

    def increases(self, name: str, start_s: FloatArray, end_s: FloatArray) -> FloatArray:
        """:meth:`increase` over many windows at once (NaN where it says None).

        Counted scrape to scrape, as Prometheus reads a counter: one that went down was reset
        (the engine restarted) and counts from zero, however many scrapes the window holds;
        a scrape without the series is skipped (before its first, it had counted nothing)."""
        values = self.series.get(name)
        out = np.full(len(start_s), np.nan)
        if values is None:
            return out
        before = np.searchsorted(self.times_s, start_s, side="right") - 1
        after = np.searchsorted(self.times_s, end_s, side="left")
        inside = np.flatnonzero((before >= 0) & (after < len(self.times_s)))
        inside = inside[np.isfinite(values[after[inside]])]  # its last scrape without it: None
        running = self._running(name)
        out[inside] = running[after[inside]] - running[before[inside]]
        return out

    def _running(self, name: str) -> FloatArray:
        """Counter ``name`` summed over its increases from the first scrape (resets read as
        Prometheus reads them), at each scrape; made on first use."""
        if name not in self._counted:
            values = self.series[name]
            seen = np.isfinite(values)
            at = np.flatnonzero(seen)
            steps = np.zeros(len(values), dtype=np.float64)
            if len(at):
                now = values[at]
                then = np.concatenate(([0.0], now[:-1]))  # the last value scraped before
                steps[at] = np.where(now >= then, now - then, now)
            self._counted[name] = np.cumsum(steps)
        return self._counted[name]

    def peaks(self, name: str, start_s: FloatArray, end_s: FloatArray) -> FloatArray:
        """:meth:`peak` over many windows at once (NaN where it says None)."""
        values = self.series.get(name)
        out = np.full(len(start_s), np.nan)
        if values is None or not len(values):
            return out
        lo = np.searchsorted(self.times_s, start_s, side="left")
        hi = np.searchsorted(self.times_s, end_s, side="right")
        inside = np.flatnonzero(hi > lo)
        if len(inside):
            # fmax ignores NaN (a series not scraped then); a window of NaN alone stays NaN.
            padded = np.append(values, np.nan)
            bounds = np.column_stack((lo[inside], hi[inside])).ravel()
            out[inside] = np.fmax.reduceat(padded, bounds)[::2]
        return out

    def peak(self, name: str, start_s: float, end_s: float) -> float | None:
        """The largest value of gauge ``name`` scraped within the window (None: no scrape)."""
        values = self.series.get(name)
        if values is None:
            return None
        lo = int(np.searchsorted(self.times_s, start_s, side="left"))
        hi = int(np.searchsorted(self.times_s, end_s, side="right"))
        window = values[lo:hi]
        window = window[np.isfinite(window)]
        return float(window.max()) if len(window) else None
