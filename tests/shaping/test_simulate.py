"""The offline driver: what a paced timeline keeps, and how chunks are cut and joined."""

from __future__ import annotations

from steadystream import Event, EventKind, Outcome, Timeline, Where
from steadystream.shaping import Flush, Leaky, Passthrough, simulate, simulate_run
from tests.support.shaping import MS, tokens_at


def test_only_times_change_and_the_stream_keeps_its_identity() -> None:
    timeline = Timeline.from_events(
        [Event(0, "", 0, EventKind.ROLE), Event(5 * MS, " a", 1), Event(6 * MS, " b", 1)],
        stream_id="s1",
        where=Where.GATEWAY_UPSTREAM,
        outcome=Outcome.TRUNCATED,
        usage={"completion_tokens": 2},
        labels={"model": "m"},
        annotations={"cause": [None, "prefill", None]},
        first_byte_ns=0,
        end_ns=7 * MS,
    )
    pacer = Leaky(interval_ns=50 * MS)
    out = simulate(timeline, pacer)
    assert out.times.tolist() == [0, 5 * MS, 55 * MS]
    assert (out.stream_id, out.where, out.outcome) == (
        "s1",
        Where.GATEWAY_UPSTREAM,
        Outcome.TRUNCATED,
    )
    assert (out.usage, out.labels, out.texts) == (timeline.usage, timeline.labels, timeline.texts)
    assert out.annotations == {}  # they described gaps that pacing changed
    assert out.meta["pacer"] == "leaky:interval=50ms,capacity=8,tail=300ms"
    # The stream ends as much later as its last event left later.
    assert (out.first_byte_ns, out.end_ns) == (0, 56 * MS)
    # The pacer passed in is a template: simulating again gives the same stream.
    assert simulate(timeline, pacer) == out


def test_timelines_without_text_split_their_byte_counts() -> None:
    timeline = Timeline.from_events(
        [Event(0, "abcdefghij", 4, EventKind.CONTENT, 100)], stream_id="s", keep_text=False
    )
    out = simulate(timeline, Leaky(interval_ns=10 * MS, capacity=8, tail_ns=0))
    assert out.texts is None
    assert out.tokens.tolist() == [1, 3]  # one at once; the tail of 0 drains the rest
    assert out.times.tolist() == [0, 0]
    assert out.text_bytes.tolist() == [2, 8]
    assert out.wire_bytes.tolist() == [25, 75]


def test_a_flush_joins_what_leaves_together_but_never_two_kinds() -> None:
    timeline = Timeline.from_events(
        [
            Event(0, "think", 1, EventKind.REASONING),
            Event(10 * MS, " more", 1, EventKind.REASONING),
            Event(20 * MS, "Answer", 1, EventKind.CONTENT),
            Event(30 * MS, " here", 1, EventKind.CONTENT),
            Event(90 * MS, "", 0, EventKind.USAGE),
        ],
        stream_id="s",
    )
    out = simulate(timeline, Flush(window_ns=50 * MS))
    assert out.texts == ["think", " more", "Answer here", ""]
    assert out.kinds.tolist() == [2, 2, 1, 4]
    assert out.times.tolist() == [0, 50 * MS, 50 * MS, 90 * MS]
    assert out.tokens.tolist() == [1, 1, 2, 0]


def test_an_empty_stream_stays_empty() -> None:
    timeline = Timeline.from_events([], stream_id="empty")
    run = simulate_run(timeline, Leaky())
    assert len(run.timeline) == 0
    assert run.close_ns is None


def test_passthrough_changes_nothing_but_the_pacer_note() -> None:
    timeline = tokens_at(0, 3, 900, 901)
    out = simulate(timeline, Passthrough())
    assert out.replace(meta={}) == timeline.replace(annotations={})
