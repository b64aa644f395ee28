"""``adaptive``: follows the generation rate, keeps a few tokens in reserve, caps added latency.

The release interval tracks how fast tokens arrive. Each arrival measures the time per token
since the previous arrival; an exponential moving average over the last ``window`` (default
8) of those measurements gives the generation interval, and the release interval moves
towards it with ``target = gain × average + (1 − gain) × target`` (default gain 0.7: quick to
follow, damped against oscillation). The interval to the next release is fixed when a token
leaves, from the rate measured up to that instant, and is never under 1 ms.

Regular releases happen only while more than ``min_buffer`` tokens (default 5) are held, so
a short stall finds tokens in reserve. No token is held longer than ``max_delay`` (default
250 ms): that bounds the added latency, time to first token included, which never waits for
the reserve to fill.

Hides: stalls up to about ``min_buffer`` generation intervals, and rate jitter. Costs: up to
``max_delay`` on the first token and on every token while the stream is slower than the
reserve needs.
"""

from __future__ import annotations

from typing import ClassVar

from steadystream._clock import NS_PER_MS
from steadystream._types import Nanos
from steadystream.shaping._spaced import SpacedPacer
from steadystream.shaping.base import (
    DEFAULT_TAIL_NS,
    TAIL_PARAM,
    Param,
    check_count,
    check_duration,
    check_rate,
)

__all__ = ["Adaptive"]

MIN_INTERVAL_NS = NS_PER_MS
"""Floor on the release interval: a burst of simultaneous arrivals measures zero."""


class Adaptive(SpacedPacer):
    """Release interval that follows an EMA of the generation interval."""

    name: ClassVar[str] = "adaptive"
    params: ClassVar[tuple[Param, ...]] = (
        Param("min_buffer", "count", "min_buffer", 5, "tokens kept in reserve"),
        Param(
            "max_delay",
            "duration",
            "max_delay_ns",
            250 * NS_PER_MS,
            "longest any token is held (bounds added TTFT)",
        ),
        Param("window", "count", "window", 8, "arrivals the rate average spans"),
        Param("gain", "rate", "gain", 0.7, "weight of the new rate against the old target"),
        TAIL_PARAM,
    )

    def __init__(
        self,
        *,
        min_buffer: int = 5,
        max_delay_ns: int = 250 * NS_PER_MS,
        window: int = 8,
        gain: float = 0.7,
        tail_ns: int = DEFAULT_TAIL_NS,
    ) -> None:
        self.min_buffer = check_count(self.name, "min_buffer", min_buffer, minimum=0)
        self.max_delay_ns = check_duration(self.name, "max_delay", max_delay_ns, allow_zero=True)
        self.window = check_count(self.name, "window", window, minimum=1)
        self.gain = check_rate(self.name, "gain", gain, upper=1.0)
        super().__init__(tail_ns=tail_ns)
        self._reserve = self.min_buffer
        self._hold = self.max_delay_ns
        # An EMA whose weight matches a simple mean over `window` samples (span convention).
        self._weight = 2.0 / (self.window + 1)
        self._damping = 1.0 - self.gain
        self._previous_arrival: int | None = None
        self._average: float | None = None  # ns per token
        self._target: int | None = None  # ns between releases

    @property
    def target_ns(self) -> int | None:
        """The current release interval (None until two arrivals have been seen)."""
        return self._target

    def _arrived(self, now: Nanos, tokens: int, text: str) -> None:
        previous = self._previous_arrival
        self._previous_arrival = now
        if previous is None:
            return
        per_token = (now - previous) / tokens
        average = self._average
        average = per_token if average is None else average + (per_token - average) * self._weight
        self._average = average
        target = self._target
        blended = average if target is None else self.gain * average + self._damping * target
        target = round(blended)
        self._target = target if target > MIN_INTERVAL_NS else MIN_INTERVAL_NS

    def _interval(self) -> int:
        return self._target if self._target is not None else MIN_INTERVAL_NS

    def _step(self) -> int:
        return self._target if self._target is not None else self.max_delay_ns
