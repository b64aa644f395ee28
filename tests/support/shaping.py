"""Builders for pacing tests: hand-made timelines, the live driver on a fake clock, strategies."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Sequence

from hypothesis import strategies as st

from steadystream import Event, EventKind, FakeClock, Timeline
from steadystream.shaping import (
    Adaptive,
    Flush,
    Leaky,
    Pacer,
    Passthrough,
    Phrase,
    Reading,
    Rechunk,
    pace,
)

MS = 1_000_000


def words(*pieces: tuple[float, str]) -> Timeline:
    """Content events of one token each: ``(ms, text)`` pairs."""
    return Timeline.from_events(
        [Event(round(ms * MS), text, 1) for ms, text in pieces], stream_id="hand"
    )


def tokens_at(*times_ms: float) -> Timeline:
    """One-token content events ``" w0"``, ``" w1"``, ... at the given milliseconds."""
    return words(*((ms, f" w{i}") for i, ms in enumerate(times_ms)))


def ms(times: Sequence[int]) -> list[float]:
    return [t / MS for t in times]


async def timed_source(events: Sequence[Event], clock: FakeClock) -> AsyncIterator[Event]:
    """Yields each event at its time on the fake clock, as a live upstream would."""
    for event in events:
        await clock.sleep_until(event.time_ns)
        yield event


async def run_live(
    events: Sequence[Event],
    pacer: Pacer,
    *,
    high_watermark: int | None = 50,
    low_watermark: int = 20,
) -> list[Event]:
    """Everything :func:`pace` yields for ``events`` arriving on a fake clock."""
    clock = FakeClock()
    out: list[Event] = []

    async def consume() -> None:
        paced = pace(
            timed_source(events, clock),
            pacer,
            clock,
            high_watermark=high_watermark,
            low_watermark=low_watermark,
        )
        async for event in paced:
            out.append(event)

    task = asyncio.create_task(consume())
    for _ in range(100_000):
        if task.done():
            break
        await clock.run_until_idle()
        await asyncio.sleep(0)
    else:
        task.cancel()
        raise AssertionError("the live driver stopped making progress")
    await task
    return out


def live(timeline: Timeline, pacer: Pacer, **watermarks: int | None) -> list[Event]:
    """:func:`run_live` for a timeline, from synchronous (hypothesis) tests."""
    return asyncio.run(run_live(timeline.events(), pacer, **watermarks))  # type: ignore[arg-type]


# -- hypothesis strategies ----------------------------------------------------------------

_VOCABULARY = (" the", " cat", ",", " and", ".", " but", "!", " or", "?", " sat", "mat", " ")
_GAPS_MS = (0, 0, 1, 5, 10, 20, 33, 40, 50, 100, 120, 250, 400, 900, 2000)


@st.composite
def timelines(draw: st.DrawFn, max_events: int = 30) -> Timeline:
    """Streams with bursts, stalls, multi-token chunks and unpaced events among the text."""
    count = draw(st.integers(1, max_events))
    time_ns = draw(st.integers(0, 50)) * MS
    events: list[Event] = []
    if draw(st.booleans()):
        events.append(Event(time_ns, "", 0, EventKind.ROLE))
    for _ in range(count):
        # Mostly whole milliseconds, so arrivals often coincide with the pacers' wake-ups.
        jitter = draw(st.sampled_from((0, 0, 0, 1, 3))) * 1000
        time_ns += draw(st.sampled_from(_GAPS_MS)) * MS + jitter
        kind = draw(
            st.sampled_from(
                (EventKind.CONTENT,) * 6
                + (EventKind.REASONING, EventKind.KEEPALIVE, EventKind.EMPTY)
            )
        )
        if kind in (EventKind.KEEPALIVE, EventKind.EMPTY):
            events.append(Event(time_ns, "", 0, kind))
            continue
        size = draw(st.integers(1, 4))
        text = "".join(draw(st.lists(st.sampled_from(_VOCABULARY), min_size=0, max_size=5)))
        events.append(Event(time_ns, text, size, kind, draw(st.integers(0, 300))))
    if draw(st.booleans()):
        events.append(Event(time_ns + draw(st.integers(0, 5)) * MS, "", 0, EventKind.USAGE))
    return Timeline.from_events(events, stream_id="drawn")


_ROUND_MS = (0, 1, 5, 10, 20, 40, 50, 100, 120, 250, 300, 500)


def _ms(low: int, high: int) -> st.SearchStrategy[int]:
    """Durations, often round ones (the same as the drawn gaps) so that times coincide."""
    round_ms = [value for value in _ROUND_MS if low <= value <= high]
    return st.one_of(st.sampled_from(round_ms), st.integers(low, high)).map(
        lambda value: value * MS
    )


PACER_STRATEGIES: dict[str, st.SearchStrategy[Pacer]] = {
    "passthrough": st.just(Passthrough()),
    "leaky": st.builds(
        Leaky, interval_ns=_ms(1, 200), capacity=st.integers(1, 10), tail_ns=_ms(0, 500)
    ),
    "adaptive": st.builds(
        Adaptive,
        min_buffer=st.integers(0, 6),
        max_delay_ns=_ms(0, 300),
        window=st.integers(1, 8),
        gain=st.floats(0.05, 1.0),
        tail_ns=_ms(0, 500),
    ),
    "phrase": st.builds(Phrase, cap=st.integers(1, 12), stagger_ns=_ms(0, 60), tail_ns=_ms(0, 500)),
    "flush": st.builds(Flush, window_ns=_ms(1, 100)),
    "rechunk": st.builds(Rechunk, min_tokens=st.integers(1, 8), max_wait_ns=_ms(0, 100)),
    "reading": st.builds(
        Reading, rate=st.floats(1.0, 40.0), buffer_ns=_ms(0, 1500), tail_ns=_ms(0, 500)
    ),
}
