"""Small timelines by hand (as aiperf's ``create_record``), and the two streams that say why
per-stream gaps matter: one steady, one with a single 2 s pause in the same total time."""

from __future__ import annotations

from collections.abc import Sequence

from steadystream import Event, EventKind, Outcome, Timeline, Where

MS = 1_000_000


def make_timeline(
    content_ms: Sequence[float],
    *,
    stream_id: str = "s",
    tokens: Sequence[int] | None = None,
    role_ms: float | None = 0.0,
    usage_ms: float | None = None,
    outcome: Outcome = Outcome.COMPLETE,
    labels: dict[str, str] | None = None,
    wire_bytes: int | None = None,
    text: str = "w ",
    where: Where = Where.CLIENT,
) -> Timeline:
    """A stream with content events at ``content_ms`` (ms after request sent)."""
    counts = list(tokens) if tokens is not None else [1] * len(content_ms)
    events: list[Event] = []
    if role_ms is not None:
        events.append(Event(round(role_ms * MS), "", 0, EventKind.ROLE, wire_bytes))
    events += [
        Event(round(t * MS), text * n, n, EventKind.CONTENT, wire_bytes)
        for t, n in zip(content_ms, counts, strict=True)
    ]
    if usage_ms is not None:
        events.append(Event(round(usage_ms * MS), "", 0, EventKind.USAGE, wire_bytes))
    return Timeline.from_events(
        events, stream_id=stream_id, where=where, outcome=outcome, labels=labels or {}
    )


def reasoning_timeline(
    reasoning_ms: Sequence[float],
    content_ms: Sequence[float] = (),
    *,
    stream_id: str = "r",
    outcome: Outcome = Outcome.COMPLETE,
    labels: dict[str, str] | None = None,
    where: Where = Where.CLIENT,
) -> Timeline:
    """A stream that reasons (one token at each of ``reasoning_ms``), then answers (one token
    at each of ``content_ms``), after a role chunk at 0; an error event ends it on ERROR."""
    events = [Event(0, "", 0, EventKind.ROLE)]
    events += [Event(round(t * MS), "hm ", 1, EventKind.REASONING) for t in reasoning_ms]
    events += [Event(round(t * MS), "w ", 1, EventKind.CONTENT) for t in content_ms]
    if outcome is Outcome.ERROR:
        last = max([*reasoning_ms, *content_ms, 0.0])
        events.append(Event(round((last + 1) * MS), "", 0, EventKind.ERROR))
    events.sort(key=lambda e: e.time_ns)
    return Timeline.from_events(
        events, stream_id=stream_id, where=where, outcome=outcome, labels=labels or {}
    )


TTFT_MS = 200.0


def steady_stream() -> Timeline:
    """200 tokens at a steady 20 ms cadence."""
    return make_timeline([TTFT_MS + 20 * i for i in range(200)], stream_id="steady")


def paused_stream() -> Timeline:
    """200 tokens in the same total time, with one 2 s pause mid-answer (after token 100)."""
    times, t = [], TTFT_MS
    for i in range(200):
        if i:
            t += 2000 if i == 100 else 10
        times.append(t)
    return make_timeline(times, stream_id="paused")
