"""``rechunk``: coalesces small chunks into bigger ones.

A provider that starts "chunking smaller" (one token per event instead of a few) multiplies
the per-chunk cost downstream: framing bytes, parse calls, renders. ``rechunk`` holds tokens
until at least ``min_tokens`` (default 4) are waiting or the oldest has waited ``max_wait``
(default 50 ms), then releases them as one event.

Hides: the per-chunk overhead of tiny chunks. Costs: up to ``max_wait`` of latency on every
token, time to first token included; it smooths nothing.
"""

from __future__ import annotations

from typing import ClassVar

from steadystream._clock import NS_PER_MS
from steadystream._types import Nanos
from steadystream.shaping.base import Pacer, Param, check_count, check_duration

__all__ = ["Rechunk"]


class Rechunk(Pacer):
    """Release in chunks of at least N tokens, or after T."""

    name: ClassVar[str] = "rechunk"
    params: ClassVar[tuple[Param, ...]] = (
        Param("min_tokens", "count", "min_tokens", 4, "tokens a chunk waits for"),
        Param("max_wait", "duration", "max_wait_ns", 50 * NS_PER_MS, "longest a token waits"),
    )
    coalesce: ClassVar[bool] = True

    def __init__(self, *, min_tokens: int = 4, max_wait_ns: int = 50 * NS_PER_MS) -> None:
        self.min_tokens = check_count(self.name, "min_tokens", min_tokens, minimum=1)
        self.max_wait_ns = check_duration(self.name, "max_wait", max_wait_ns, allow_zero=True)
        super().__init__(tail_ns=0)

    def _release_count(self, now: Nanos) -> int:
        held = self._held_tokens
        if held >= self.min_tokens or now >= self._held[0][0] + self.max_wait_ns:
            return held
        return 0

    def _wake_at(self, now: Nanos) -> Nanos | None:
        return self._held[0][0] + self.max_wait_ns
