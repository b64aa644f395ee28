"""The client's own lag: how late its event loop ran, and how late requests went out.

A load generator that falls behind distorts what it measures: a chunk that arrived while the
event loop was busy elsewhere is stamped when the loop gets to it, not when it arrived, and
a request meant for ``t`` that goes out at ``t + 30 ms`` is not the load that was asked for.
So both are measured, and every stream records the worst loop lag seen while it was open.

:class:`LoopLagSampler` wakes every ``interval_ns`` on the injected clock and records how late
it woke: the loop could serve nothing (stamp nothing) between the planned wake-up and the
actual one. A stream whose open interval overlaps such a window of more than
:data:`LAG_FLAG_NS` is flagged: its stamps may be late by up to that much.
"""

from __future__ import annotations

import asyncio
from array import array
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from steadystream._clock import NS_PER_MS, Clock
from steadystream._tasks import cancel_and_wait

__all__ = ["LAG_FLAG_NS", "LagStats", "LoopLagSampler", "lag_stats"]

LAG_FLAG_NS = 5 * NS_PER_MS
"""A stream stamped while the loop lagged by more than this is flagged (docs/bench.md)."""


@dataclass(frozen=True, slots=True)
class LagStats:
    """A lag distribution, in milliseconds (None when there were no samples)."""

    samples: int
    p50_ms: float | None
    p99_ms: float | None
    max_ms: float | None
    over_flag: int  # samples above LAG_FLAG_NS


def lag_stats(values_ns: Sequence[int] | np.ndarray) -> LagStats:
    values = np.asarray(values_ns, dtype=np.float64)
    if len(values) == 0:
        return LagStats(0, None, None, None, 0)
    p50, p99 = np.percentile(values, (50, 99)) / NS_PER_MS
    return LagStats(
        samples=len(values),
        p50_ms=float(p50),
        p99_ms=float(p99),
        max_ms=float(values.max() / NS_PER_MS),
        over_flag=int((values > LAG_FLAG_NS).sum()),
    )


class LoopLagSampler:
    """Samples event-loop lag on a clock: ``start()``, then ``await stop()``."""

    def __init__(self, clock: Clock, *, interval_ns: int = 5 * NS_PER_MS) -> None:
        if interval_ns <= 0:
            raise ValueError(f"interval_ns must be positive, got {interval_ns}")
        self.clock = clock
        self.interval_ns = interval_ns
        self._planned = array("q")
        self._lags = array("q")
        self._max_lag = 0
        self._task: asyncio.Task[None] | None = None

    def start(self) -> None:
        if self._task is None:
            self._task = asyncio.get_running_loop().create_task(self._run())

    async def stop(self) -> None:
        task, self._task = self._task, None
        await cancel_and_wait(task)

    async def _run(self) -> None:
        clock, interval = self.clock, self.interval_ns
        planned = clock.now_ns() + interval
        while True:
            await clock.sleep_until(planned)
            now = clock.now_ns()
            self._planned.append(planned)
            lag = now - planned
            self._lags.append(lag)
            if lag > self._max_lag:
                self._max_lag = lag
            # Plan from now, not from the missed plan: after a long block one sample says
            # how long it was, rather than a burst of catch-up samples.
            planned = now + interval

    @property
    def samples(self) -> int:
        return len(self._lags)

    def stats(self) -> LagStats:
        return lag_stats(np.frombuffer(self._lags, dtype=np.int64))

    def samples_ns(self) -> npt.NDArray[np.int64]:
        """Every lag sampled so far (a copy): samplers of several workers merge exactly."""
        return np.frombuffer(self._lags, dtype=np.int64).copy()

    def max_between(self, start_ns: int, end_ns: int) -> int:
        """The worst lag whose blocked window ``[planned, planned + lag]`` overlaps the span."""
        planned = np.frombuffer(self._planned, dtype=np.int64)
        lags = np.frombuffer(self._lags, dtype=np.int64)
        last = int(np.searchsorted(planned, end_ns, side="right"))
        if last == 0:
            return 0
        # Windows are short; look back only as far as the longest lag could reach.
        first = int(np.searchsorted(planned[:last], start_ns - self._max_lag, side="left"))
        span_lags = lags[first:last]
        overlaps = planned[first:last] + span_lags >= start_ns
        return int(span_lags[overlaps].max()) if overlaps.any() else 0
