"""``leaky``: a leaky bucket that releases one token per interval.

Tokens queue in a bucket and leave one per ``interval`` (default 120 ms). The bucket holds
at most ``capacity`` tokens (default 8): what arrives beyond that leaves at once, so the
added latency is bounded by about ``capacity × interval`` and a burst larger than the bucket
passes through. The first token leaves on arrival (no added time to first token).

Hides: gaps shorter than the time the bucket's content takes to leak, and bursts up to the
capacity. Costs: up to ``capacity × interval`` of latency on every token when generation is
faster than one token per interval, and a stream slower than that is never sped up.
"""

from __future__ import annotations

from typing import ClassVar

from steadystream._clock import NS_PER_MS
from steadystream.shaping._spaced import SpacedPacer
from steadystream.shaping.base import (
    DEFAULT_TAIL_NS,
    TAIL_PARAM,
    Param,
    check_count,
    check_duration,
)

__all__ = ["Leaky"]


class Leaky(SpacedPacer):
    """Constant release interval with a bounded bucket."""

    name: ClassVar[str] = "leaky"
    params: ClassVar[tuple[Param, ...]] = (
        Param("interval", "duration", "interval_ns", 120 * NS_PER_MS, "time between releases"),
        Param("capacity", "count", "capacity", 8, "tokens the bucket holds; more leave at once"),
        TAIL_PARAM,
    )

    def __init__(
        self,
        *,
        interval_ns: int = 120 * NS_PER_MS,
        capacity: int = 8,
        tail_ns: int = DEFAULT_TAIL_NS,
    ) -> None:
        self.interval_ns = check_duration(self.name, "interval", interval_ns)
        self.capacity = check_count(self.name, "capacity", capacity, minimum=1)
        super().__init__(tail_ns=tail_ns)
        self._capacity = self.capacity
        self._fixed_interval = self.interval_ns

    def _interval(self) -> int:
        return self.interval_ns
