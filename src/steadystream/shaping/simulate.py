"""The offline driver: what a pacer would have done to a recorded stream.

:func:`simulate` replays a timeline through a pacer in simulated time: a discrete-event loop
that jumps from arrival to arrival and from wake-up to wake-up, never sleeping. It follows
the live driver's rules exactly (see :mod:`steadystream.shaping.live`), backpressure
included, so both give the same release times for the same input.

The paced timeline keeps the stream's vantage point, outcome, usage and labels; its text,
token counts and kinds are the original ones, only the times of the events change. A chunk
whose tokens leave at different times becomes several events (``_pieces`` says how its text
is cut); a pacer that coalesces (flush, rechunk) joins the chunks it releases together.
Events that carry no paced text (role, usage, keepalive, error) leave as soon as everything
before them has, and never before they arrived. Annotations are dropped: they describe gaps
that pacing changed.

The loop works on integers and the pacer's core methods only: building event objects for
every chunk would cost more than the policy itself. Pacers may also offer a faster form of
their policy for a whole stream (``Pacer._run_stream``); it is used where backpressure never
pauses the read, and the test suite checks that it releases exactly what this loop does.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from steadystream._exceptions import InputError
from steadystream._types import TEXT_KINDS, Nanos
from steadystream.shaping._assemble import Releases, assemble
from steadystream.shaping.base import (
    DEFAULT_HIGH_WATERMARK,
    DEFAULT_LOW_WATERMARK,
    MAX_DURATION_NS,
    Pacer,
    check_watermarks,
)
from steadystream.shaping.spec import format_spec
from steadystream.timeline import Timeline

__all__ = ["SimulationRun", "simulate", "simulate_run"]

_PACED_KINDS = np.zeros(256, dtype=np.bool_)
_PACED_KINDS[[int(kind) for kind in TEXT_KINDS]] = True


@dataclass(frozen=True, slots=True)
class SimulationRun:
    """A simulated stream: the paced timeline and what the driver saw on the way.

    ``close_ns``: when the source was seen to end (the tail drain starts there; None for an
    empty stream). ``max_buffered``: the most tokens the pacer held at once. ``paused``: how
    many times backpressure stopped the read.
    """

    timeline: Timeline
    close_ns: Nanos | None
    max_buffered: int
    paused: int


def simulate(
    timeline: Timeline,
    pacer: Pacer,
    *,
    high_watermark: int | None = DEFAULT_HIGH_WATERMARK,
    low_watermark: int = DEFAULT_LOW_WATERMARK,
) -> Timeline:
    """The timeline as ``pacer`` would have released it.

    ``pacer`` is a template: a fresh copy paces the stream, the argument is not changed.
    ``high_watermark=None`` turns backpressure off (the read never pauses).
    """
    return simulate_run(
        timeline, pacer, high_watermark=high_watermark, low_watermark=low_watermark
    ).timeline


def simulate_run(
    timeline: Timeline,
    pacer: Pacer,
    *,
    high_watermark: int | None = DEFAULT_HIGH_WATERMARK,
    low_watermark: int = DEFAULT_LOW_WATERMARK,
) -> SimulationRun:
    """Like :func:`simulate`, with the close time, peak buffer and pause count."""
    check_watermarks(pacer, high_watermark, low_watermark)
    if len(timeline) and int(timeline.times[-1]) >= MAX_DURATION_NS:
        # A pacer may hold a token up to MAX_DURATION_NS: later, its release time would not
        # fit the 64-bit times of the paced timeline.
        raise InputError(
            f"stream {timeline.stream_id!r}: cannot simulate pacing of an event at"
            f" {int(timeline.times[-1])} ns, more than 2**62 ns (about 146 years) after the"
            " request was sent"
        )
    sizes = np.where(_PACED_KINDS[timeline.kinds], timeline.tokens, 0)
    arrivals = timeline.times.tolist()
    size_list = sizes.tolist()
    drive = _Drive(pacer.fresh(), high_watermark, low_watermark)
    if arrivals and not drive.run_fast(arrivals, size_list, timeline.texts):
        drive = _Drive(pacer.fresh(), high_watermark, low_watermark)  # the fast form may
        drive.run(arrivals, size_list, timeline.texts)  # have gone part of the way
    out = assemble(timeline, pacer.coalesce, sizes > 0, drive.releases())
    out.meta = {**timeline.meta, "pacer": format_spec(pacer, full=True)}
    return SimulationRun(out, drive.close_ns, drive.max_buffered, drive.pauses)


class _Drive:
    """The discrete-event loop: the live driver's reader and releaser, in simulated time."""

    __slots__ = (
        "close_ns",
        "group_ends",
        "group_times",
        "high",
        "low",
        "max_buffered",
        "pacer",
        "pauses",
        "push_times",
    )

    def __init__(self, pacer: Pacer, high: int | None, low: int) -> None:
        self.pacer = pacer
        self.high = high
        self.low = low
        self.push_times: list[int] = []
        self.group_ends: list[int] = []  # paced tokens released so far, after each release
        self.group_times: list[int] = []
        self.close_ns: int | None = None
        self.max_buffered = 0
        self.pauses = 0

    def releases(self) -> Releases:
        return Releases(self.push_times, self.group_ends, self.group_times)

    def run_fast(self, arrivals: list[int], sizes: list[int], texts: list[str] | None) -> bool:
        """Replay with the pacer's fast form, if it has one and backpressure never pauses."""
        run = self.pacer._run_stream(arrivals, sizes, texts, self.high, self.low)
        if run is None:
            return False
        self.push_times = arrivals
        self.group_ends = run.group_ends
        self.group_times = run.group_times
        self.max_buffered = run.max_buffered
        self.close_ns = arrivals[-1]
        return True

    def run(self, arrivals: list[int], tokens: list[int], texts: list[str] | None) -> None:
        count = len(arrivals)
        if not count:
            return
        pacer = self.pacer
        settle = pacer._settle
        wake_at = pacer._wake_at
        held_queue = pacer._held
        arrived = pacer._arrived if type(pacer)._arrived is not Pacer._arrived else None
        high = self.high
        low = self.low
        ends = self.group_ends
        times = self.group_times
        push_times = self.push_times
        released = 0
        index = 0
        free_at = arrivals[0]  # the reader acts no earlier than this (last push or resume)
        paused = False
        instant = -1
        start_held = pushed = 0
        now = free_at
        while True:
            # pacer.next_due, inlined: this loop runs once or twice per event.
            if not pacer._held_tokens:
                due = None
            elif pacer._draining:
                due = pacer._drain_wake
            else:
                due = wake_at(now)
            if paused:
                read_at: int | None = None
            elif index < count:
                arrival = arrivals[index]
                read_at = arrival if arrival > free_at else free_at
            elif self.close_ns is None:
                read_at = free_at
            else:
                read_at = None
            if read_at is None:
                if due is None:
                    if paused:
                        raise RuntimeError(
                            f"{pacer.name} holds {pacer.buffered} tokens with nothing due "
                            "while the read is paused"
                        )
                    break
                now = due
            else:
                now = read_at if due is None or read_at <= due else due
            if now != instant:
                # The gauge backpressure reads: tokens held as this instant began.
                instant = now
                start_held = pacer._held_tokens
                pushed = 0
            if due is not None and due <= now:
                # Wake-ups: keep releasing while they come before the reader's next turn.
                while True:
                    released_now = settle(now)
                    if not released_now:
                        raise RuntimeError(f"{pacer.name} asked to be woken at {due} for nothing")
                    released += released_now
                    ends.append(released)
                    times.append(now)
                    if paused:
                        if pacer._held_tokens <= low:
                            paused = False
                            free_at = now
                        break
                    if not pacer._held_tokens:
                        break
                    due = pacer._drain_wake if pacer._draining else wake_at(now)
                    if due is None or (read_at is not None and due >= read_at):
                        break
                    now = instant = due
                    start_held = pacer._held_tokens
                    pushed = 0
                continue
            # The reader's turn: everything that has arrived by now, until backpressure. Nothing
            # is due at this instant, so the settle the live pacer does before each arrival
            # would release nothing and is skipped, as is any settle after an unpaced event.
            while index < count and arrivals[index] <= now:
                push_times.append(now)
                size = tokens[index]
                index += 1
                if not size:
                    continue
                held_queue.append([now, size])
                pacer._held_tokens += size
                if arrived is not None:
                    arrived(now, size, texts[index - 1] if texts is not None else "")
                pushed += size
                held = pacer._held_tokens
                if held > self.max_buffered:
                    self.max_buffered = held
                released_now = settle(now)
                if released_now:
                    released += released_now
                    ends.append(released)
                    times.append(now)
                # The live reader pauses here; its consumer resumes it at once if the releases
                # of this instant already left the buffer low.
                if high is not None and start_held + pushed >= high and pacer._held_tokens > low:
                    paused = True
                    self.pauses += 1
                    break
            free_at = now
            # A paused live reader still asks for one more event, so it sees the end at once.
            if index == count and self.close_ns is None:
                paused = False  # the reader is done; nothing is left to hold back
                pacer._start_drain(now)
                released_now = settle(now)
                if released_now:
                    released += released_now
                    ends.append(released)
                    times.append(now)
                self.close_ns = now
