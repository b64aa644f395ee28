"""``flush``: the server-side accept-then-flush pattern.

The stream is cut into windows of ``window`` (default 50 ms) starting at the first token,
which leaves at once. Whatever arrives during a window is held and flushed, as one write, at
the window's end: the client sees one update per window at a fixed cadence, never the
scheduling jitter inside a window.

Hides: jitter shorter than the window. Costs: up to one window of latency on every token
(none on the first), and gaps become whole windows. Longer stalls pass through.
"""

from __future__ import annotations

from typing import ClassVar

from steadystream._clock import NS_PER_MS
from steadystream._types import Nanos
from steadystream.shaping.base import Pacer, Param, StreamRun, check_duration

__all__ = ["Flush"]


class Flush(Pacer):
    """Hold up to one window, then flush on a fixed cadence."""

    name: ClassVar[str] = "flush"
    params: ClassVar[tuple[Param, ...]] = (
        Param("window", "duration", "window_ns", 50 * NS_PER_MS, "flush cadence and longest hold"),
    )
    coalesce: ClassVar[bool] = True

    def __init__(self, *, window_ns: int = 50 * NS_PER_MS) -> None:
        self.window_ns = check_duration(self.name, "window", window_ns)
        super().__init__(tail_ns=0)
        self._origin: int | None = None

    def _flush_time(self, arrival: Nanos) -> Nanos:
        origin = self._origin
        assert origin is not None  # set by the first arrival
        windows = -((origin - arrival) // self.window_ns)  # ceiling division
        return origin + windows * self.window_ns

    def _arrived(self, now: Nanos, tokens: int, text: str) -> None:
        if self._origin is None:
            self._origin = now

    def _release_count(self, now: Nanos) -> int:
        origin = self._origin
        assert origin is not None
        # Everything that arrived by the last window edge at or before now is flushed.
        edge = origin + (now - origin) // self.window_ns * self.window_ns
        count = 0
        for arrival, tokens in self._held:
            if arrival > edge:
                break
            count += tokens
        return count

    def _wake_at(self, now: Nanos) -> Nanos | None:
        return self._flush_time(self._held[0][0])

    def _run_stream(
        self,
        arrivals: list[int],
        sizes: list[int],
        texts: list[str] | None,
        high: int | None,
        low: int,
    ) -> StreamRun | None:
        # What is held always arrived within one window, so it all leaves at one flush time.
        window = self.window_ns
        origin: int | None = None
        held = released = peak = 0
        flush_at = 0
        ends: list[int] = []
        times: list[int] = []
        instant = -1
        start_held = pushed = 0
        for arrival, size in zip(arrivals, sizes, strict=True):
            if held and flush_at <= arrival:
                if flush_at == arrival and instant != arrival:
                    instant, start_held, pushed = arrival, held, 0
                released += held
                ends.append(released)
                times.append(flush_at)
                held = 0
            if not size:
                continue
            if instant != arrival:
                instant, start_held, pushed = arrival, held, 0
            if origin is None:
                origin = arrival
            if not held:
                flush_at = origin - (origin - arrival) // window * window
            held += size
            peak = max(peak, held)
            if flush_at == arrival:  # on a window edge: out at once
                released += held
                ends.append(released)
                times.append(arrival)
                held = 0
            pushed += size
            if high is not None and start_held + pushed >= high and held > low:
                return None  # backpressure would pause the read: the generic driver runs it
        if held:
            ends.append(released + held)
            times.append(arrivals[-1])
        return StreamRun(ends, times, peak)
