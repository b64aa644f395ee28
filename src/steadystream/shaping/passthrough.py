"""``passthrough``: releases every event the instant it arrives (the baseline)."""

from __future__ import annotations

from typing import ClassVar

from steadystream._types import Nanos
from steadystream.shaping.base import Pacer, Param, StreamRun

__all__ = ["Passthrough"]


class Passthrough(Pacer):
    """No pacing at all: what the stream looks like untouched, through the same drivers.

    Hides nothing and costs nothing; it is the "before" of every comparison.
    """

    name: ClassVar[str] = "passthrough"
    params: ClassVar[tuple[Param, ...]] = ()

    def __init__(self) -> None:
        super().__init__(tail_ns=0)

    def _release_count(self, now: Nanos) -> int:
        return self._held_tokens

    def _wake_at(self, now: Nanos) -> Nanos | None:
        return now

    def _run_stream(
        self,
        arrivals: list[int],
        sizes: list[int],
        texts: list[str] | None,
        high: int | None,
        low: int,
    ) -> StreamRun | None:
        # Every event leaves as it arrives; nothing is ever held, so the read never pauses.
        ends: list[int] = []
        times: list[int] = []
        total = peak = 0
        for arrival, size in zip(arrivals, sizes, strict=True):
            if size:
                total += size
                ends.append(total)
                times.append(arrival)
                peak = max(peak, size)
        return StreamRun(ends, times, peak)
