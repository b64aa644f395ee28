"""Records and live numbers of a run in progress, for a live view and the end-of-run notes.

The runner reports every request here; a view reads :meth:`RunProgress.snapshot` a few
times a second. Per finished stream only two numbers are computed (its p99 gap and its worst
gap, over the gaps between content events, as docs/metrics.md defines them), so keeping the
running p99-of-p99 costs microseconds per stream; the full metrics come at the end.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field

import numpy as np

from steadystream._clock import NS_PER_MS, Clock
from steadystream._types import Outcome
from steadystream.timeline import Timeline

__all__ = ["FAILED_OUTCOMES", "ProgressSnapshot", "RunProgress"]

FAILED_OUTCOMES = frozenset({Outcome.ERROR, Outcome.TRUNCATED, Outcome.CLIENT_STUCK})
"""Outcomes that count as a failed request (a cancellation asked for is not a failure)."""


@dataclass(frozen=True, slots=True)
class ProgressSnapshot:
    """The run so far. Times in seconds; None where nothing is defined yet."""

    elapsed_s: float
    sent: int
    in_flight: int
    finished: int
    outcomes: dict[str, int]
    errors: int
    p99_of_p99_s: float | None
    p99_of_worst_gap_s: float | None
    goodput: float | None
    ttft_p95_s: float | None
    lagged_streams: int
    first_error: str | None


@dataclass
class RunProgress:
    """Counts and per-stream headline numbers, updated as requests go out and come back."""

    clock: Clock
    stall_threshold_ns: int = 400 * NS_PER_MS
    ttft_target_ns: int = 800 * NS_PER_MS
    start_ns: int | None = None
    sent: int = 0
    in_flight: int = 0
    outcomes: Counter[str] = field(default_factory=Counter)
    first_error: str | None = None
    lagged_streams: int = 0
    _p99: list[float] = field(default_factory=list)
    _worst: list[float] = field(default_factory=list)
    _ttft: list[float] = field(default_factory=list)
    _good: int = 0

    def started(self) -> None:
        # numpy's first percentile costs milliseconds (lazy imports): pay it now, not at the
        # first stream's end, where it would stall every stream still being stamped.
        np.percentile(np.zeros(2), 99)
        self.start_ns = self.clock.now_ns()

    def request_sent(self) -> None:
        self.sent += 1
        self.in_flight += 1

    def request_done(self, timeline: Timeline) -> None:
        self.in_flight -= 1
        self.outcomes[timeline.outcome.value] += 1
        if timeline.outcome in FAILED_OUTCOMES and self.first_error is None:
            self.first_error = f"{timeline.stream_id}: {timeline.error or timeline.outcome.value}"
        # The runner's flag, as the summary counts it: with kernel stamps, loop lag moved a
        # stream's stamps only where its events shared one (docs/bench.md#fidelity).
        if timeline.meta.get("client_lagged"):
            self.lagged_streams += 1
        times = timeline.times[timeline.text_mask]
        answer = timeline.times[timeline.visible_mask]  # TTFT: the answer's first token
        ttft = int(answer[0]) if len(answer) else None
        worst = None
        if len(times) >= 2:
            gaps = np.diff(times)
            worst = int(gaps.max())
            self._p99.append(float(np.percentile(gaps, 99)))
            self._worst.append(float(worst))
        if ttft is not None:
            self._ttft.append(float(ttft))
        if (
            timeline.outcome not in FAILED_OUTCOMES
            and ttft is not None
            and ttft <= self.ttft_target_ns
            and (worst is None or worst <= self.stall_threshold_ns)
        ):
            self._good += 1

    @property
    def finished(self) -> int:
        return sum(self.outcomes.values())

    @property
    def succeeded(self) -> int:
        return self.outcomes.get(Outcome.COMPLETE.value, 0)

    def snapshot(self) -> ProgressSnapshot:
        now = self.clock.now_ns()
        finished = self.finished
        return ProgressSnapshot(
            elapsed_s=0.0 if self.start_ns is None else (now - self.start_ns) / 1e9,
            sent=self.sent,
            in_flight=self.in_flight,
            finished=finished,
            outcomes=dict(self.outcomes),
            errors=sum(self.outcomes.get(o.value, 0) for o in FAILED_OUTCOMES),
            p99_of_p99_s=_p(self._p99, 99),
            p99_of_worst_gap_s=_p(self._worst, 99),
            goodput=self._good / finished if finished else None,
            ttft_p95_s=_p(self._ttft, 95),
            lagged_streams=self.lagged_streams,
            first_error=self.first_error,
        )


def _p(values: list[float], q: float) -> float | None:
    return float(np.percentile(values, q)) / 1e9 if values else None
