"""Exact release times of every pacer on hand-built streams, simulated and live."""

from __future__ import annotations

import pytest

from steadystream import Event, EventKind, Timeline
from steadystream.shaping import (
    Adaptive,
    Flush,
    Leaky,
    Pacer,
    Passthrough,
    Phrase,
    Reading,
    Rechunk,
    simulate,
)
from tests.support.shaping import MS, live, ms, tokens_at, words

CASES: list[tuple[str, Pacer, Timeline, list[float], list[str]]] = [
    (
        # Jitter and a stall pass through untouched.
        "passthrough",
        Passthrough(),
        tokens_at(0, 10, 700, 705),
        [0, 10, 700, 705],
        [" w0", " w1", " w2", " w3"],
    ),
    (
        # First token at once; the bucket (3) overflows at 40 ms and releases the oldest;
        # at the close three remain and drain at min(100, 300 / 3) = 100 ms steps.
        "leaky",
        Leaky(interval_ns=100 * MS, capacity=3, tail_ns=300 * MS),
        tokens_at(0, 10, 20, 30, 40),
        [0, 40, 140, 240, 340],
        [" w0", " w1", " w2", " w3", " w4"],
    ),
    (
        # The generation interval (10 ms) becomes the release interval; two tokens stay in
        # reserve, so the first leaves when a third arrives, 20 ms late.
        "adaptive",
        Adaptive(min_buffer=2, max_delay_ns=100 * MS, window=1, gain=1.0),
        tokens_at(0, 10, 20, 30, 40, 50),
        [20, 30, 40, 50, 60, 70],
        [" w0", " w1", " w2", " w3", " w4", " w5"],
    ),
    (
        # A lone token waits at most max_delay; the last is drained at the close.
        "adaptive-latency-cap",
        Adaptive(min_buffer=2, max_delay_ns=100 * MS),
        tokens_at(0, 500),
        [100, 500],
        [" w0", " w1"],
    ),
    (
        # "and" opens a phrase: "I like tea" leaves from 30 ms, staggered 10 ms; "and cake."
        # ends at the period (50 ms) and starts at once.
        "phrase",
        Phrase(stagger_ns=10 * MS),
        words((0, "I"), (10, " like"), (20, " tea"), (30, " and"), (40, " cake"), (50, ".")),
        [30, 40, 50, 50, 60, 70],
        ["I", " like", " tea", " and", " cake", "."],
    ),
    (
        # Without text only the cap ends a phrase. The second phrase (w2, w3) ends at 22 ms
        # while the first is still being staggered: w1 leaves with it.
        "phrase-cap",
        Phrase(cap=2, stagger_ns=20 * MS),
        tokens_at(0, 10, 20, 22, 200),
        [10, 22, 22, 42, 200],
        [" w0", " w1", " w2", " w3", " w4"],
    ),
    (
        # Windows of 50 ms from the first token (10 ms): w1 and w2 flush together at 60, w3
        # at 110; w4 would wait for 210 but the stream ends with it and it leaves at once.
        "flush",
        Flush(window_ns=50 * MS),
        tokens_at(10, 20, 30, 70, 200),
        [10, 60, 110, 200],
        [" w0", " w1 w2", " w3", " w4"],
    ),
    (
        # Three tokens make a chunk; two wait until the oldest is 50 ms old; the last goes
        # at the close.
        "rechunk",
        Rechunk(min_tokens=3, max_wait_ns=50 * MS),
        tokens_at(0, 10, 20, 100, 130, 300),
        [20, 150, 300],
        [" w0 w1 w2", " w3 w4", " w5"],
    ),
    (
        # 10 tokens a second; w3 and w4 have waited the 250 ms buffer and leave at once.
        "reading",
        Reading(rate=10, buffer_ns=250 * MS),
        tokens_at(0, 10, 20, 30, 40, 600),
        [0, 100, 200, 280, 290, 600],
        [" w0", " w1", " w2", " w3", " w4", " w5"],
    ),
]


@pytest.mark.parametrize(
    ("pacer", "timeline", "expected_ms", "texts"),
    [case[1:] for case in CASES],
    ids=[case[0] for case in CASES],
)
def test_release_times_simulated(
    pacer: Pacer, timeline: Timeline, expected_ms: list[float], texts: list[str]
) -> None:
    out = simulate(timeline, pacer)
    assert ms(out.times.tolist()) == expected_ms
    assert out.texts == texts


@pytest.mark.parametrize(
    ("pacer", "timeline", "expected_ms", "texts"),
    [case[1:] for case in CASES],
    ids=[case[0] for case in CASES],
)
def test_release_times_live(
    pacer: Pacer, timeline: Timeline, expected_ms: list[float], texts: list[str]
) -> None:
    out = live(timeline, pacer)
    assert ms([event.time_ns for event in out]) == expected_ms
    assert [event.text for event in out] == texts


def test_tail_drain_splits_a_held_chunk_word_by_word_within_the_tail() -> None:
    # Eight tokens in one chunk: one leaves at once, seven drain at 300 ms / 7 steps.
    timeline = Timeline.from_events([Event(0, "a b c d e f g h", 8)], stream_id="burst")
    out = simulate(timeline, Leaky())
    step = 300 * MS // 7
    assert out.times.tolist() == [0, *(step * i for i in range(1, 8))]
    assert out.texts == ["a", " b", " c", " d", " e", " f", " g", " h"]
    assert out.tokens.tolist() == [1] * 8
    assert out.times[-1] <= 300 * MS


def test_unpaced_events_leave_after_the_text_before_them_never_before_arrival() -> None:
    timeline = Timeline.from_events(
        [
            Event(0, "", 0, EventKind.ROLE),
            Event(10 * MS, " a", 1),
            Event(11 * MS, " b", 1),
            Event(12 * MS, "", 0, EventKind.KEEPALIVE),
            Event(500 * MS, " c", 1),
            Event(501 * MS, "", 0, EventKind.USAGE),
        ],
        stream_id="mixed",
    )
    out = simulate(timeline, Leaky(interval_ns=100 * MS))
    assert out.kinds.tolist() == timeline.kinds.tolist()
    # The keepalive waits for " b" (110 ms); the usage chunk waits for the drained " c".
    assert ms(out.times.tolist()) == [0, 10, 110, 110, 500, 501]
