"""``reading``: releases at a reading pace through a client buffer (after Andes).

A reader takes in about 5 to 8 words a second; text that arrives faster waits in a client
buffer and appears at reading pace, one token every ``1 / rate`` (default 8 a second; a
token counts as a word, and since a token is about three quarters of a word this errs slow).
The buffer is ``buffer`` long (default 500 ms, just above the 400 ms stall threshold): a
token that has waited that long leaves at once, so the text on screen is never more than
``buffer`` behind generation, and at the end of the stream what is held drains within the
tail bound.

Hides: stalls up to ``buffer`` (longer when the buffer holds more than a stall's worth of
reading). Costs: up to ``buffer`` of latency per token when generation outruns reading
(none on the first token). A stream faster than ``high_watermark / buffer`` tokens a second
(100 with the defaults) fills the buffer past the high watermark: backpressure then holds
arrivals back and the lag grows beyond ``buffer``.
"""

from __future__ import annotations

from typing import ClassVar

from steadystream._clock import NS_PER_MS, NS_PER_S
from steadystream.shaping._spaced import SpacedPacer
from steadystream.shaping.base import (
    DEFAULT_TAIL_NS,
    TAIL_PARAM,
    Param,
    check_duration,
    check_rate,
)

__all__ = ["Reading"]

MIN_RATE = 1e-9
"""The slowest rate, one token in about 32 years: the interval must fit within
``MAX_DURATION_NS`` of ``base`` (a slower one overflowed the 64-bit release times)."""


class Reading(SpacedPacer):
    """Reading pace, with a bounded lag behind generation."""

    name: ClassVar[str] = "reading"
    params: ClassVar[tuple[Param, ...]] = (
        Param("rate", "rate", "rate", 8.0, "words (tokens) a second"),
        Param("buffer", "duration", "buffer_ns", 500 * NS_PER_MS, "longest a token waits"),
        TAIL_PARAM,
    )

    def __init__(
        self,
        *,
        rate: float = 8.0,
        buffer_ns: int = 500 * NS_PER_MS,
        tail_ns: int = DEFAULT_TAIL_NS,
    ) -> None:
        self.rate = check_rate(self.name, "rate", rate, upper=1e6, lower=MIN_RATE)
        self.buffer_ns = check_duration(self.name, "buffer", buffer_ns, allow_zero=True)
        super().__init__(tail_ns=tail_ns)
        self.interval_ns = max(1, round(NS_PER_S / self.rate))
        self._hold = self.buffer_ns
        self._fixed_interval = self.interval_ns

    def _interval(self) -> int:
        return self.interval_ns
