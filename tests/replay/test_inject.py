"""Injection specs: parsed with errors that name the bad part, applied exactly, by seed."""

from __future__ import annotations

import numpy as np
import pytest

from steadystream._causes import Cause
from steadystream._exceptions import SpecError
from steadystream.replay.inject import Plan, inject, parse_injection

MS = 1_000_000


def steady_plan(events: int = 100, gap_ms: int = 20, tokens: list[int] | None = None) -> Plan:
    counts = tokens or [1] * events
    times = [100 * MS + i * gap_ms * MS for i in range(len(counts))]
    return Plan(times, counts, ["w "] * len(counts), end_ns=times[-1] + 5 * MS)


def rng(seed: int = 0) -> np.random.Generator:
    return np.random.default_rng((seed, 0))


def test_pause_at_a_percentage_shifts_that_token_and_everything_after() -> None:
    plan = steady_plan()
    out = inject(plan, [parse_injection("pause:2s@50%")], rng())
    assert out.times[:50] == plan.times[:50]
    assert all(b - a == 2_000 * MS for a, b in zip(plan.times[50:], out.times[50:], strict=True))
    assert out.end_ns == plan.end_ns + 2_000 * MS
    assert out.extra[50] == {Cause.INJECTED_FAULT: 2_000 * MS}
    assert out.applied == [
        {"spec": "pause:2s@50%", "token": 50, "event": 50, "fired": True, "added_ns": 2_000 * MS}
    ]
    assert plan.times[50] == 100 * MS + 50 * 20 * MS  # the input plan is left alone


def test_pause_at_a_token_lands_on_the_event_that_carries_it() -> None:
    plan = steady_plan(tokens=[4] * 25)  # token 40 is in event 10
    out = inject(
        plan, [parse_injection("pause:1.5s@token=40"), parse_injection("stall:1s@token=41")], rng()
    )
    assert out.times[10] - plan.times[10] == 2_500 * MS
    assert out.times[9] == plan.times[9]
    assert [a["event"] for a in out.applied] == [10, 10]


def test_burst_at_start_releases_its_tokens_together() -> None:
    plan = steady_plan()
    out = inject(plan, [parse_injection("burst:30@start")], rng())
    assert set(out.times[:30]) == {plan.times[29]}
    assert out.times[30:] == plan.times[30:]
    assert out.extra[0] == {Cause.HEAD_BURST: 29 * 20 * MS}


def test_jitter_is_bounded_keeps_order_and_repeats_with_the_seed() -> None:
    plan = steady_plan(gap_ms=5)
    spec = [parse_injection("jitter:20ms")]
    first, again, other = (
        inject(plan, spec, rng(1)),
        inject(plan, spec, rng(1)),
        inject(plan, spec, rng(2)),
    )
    assert first.times == again.times
    assert first.times != other.times
    delays = np.array(first.times) - np.array(plan.times)
    assert delays.min() >= 0
    assert np.all(np.diff(first.times) >= 0)
    # each event is late by its draw (< 20 ms) or held behind an earlier, later one
    assert delays.max() < 20 * MS


def test_a_position_range_is_drawn_from_the_seed_within_the_range() -> None:
    plan = steady_plan()
    spec = [parse_injection("pause:1s@40-60%")]
    tokens = {inject(plan, spec, rng(seed)).applied[0]["token"] for seed in range(20)}
    assert tokens <= set(range(40, 61))
    assert len(tokens) > 3
    assert inject(plan, spec, rng(5)).applied == inject(plan, spec, rng(5)).applied


def test_stall_forever_and_truncate_cut_the_stream_the_earliest_wins() -> None:
    plan = steady_plan()
    stalled = inject(plan, [parse_injection("stall:forever@60%")], rng())
    assert (stalled.cut, stalled.cut_at, stalled.sent) == ("stall", 60, 60)
    both = inject(
        plan, [parse_injection("stall:forever@60%"), parse_injection("truncate@80%")], rng()
    )
    assert (both.cut, both.cut_at) == ("stall", 60)
    cut = inject(plan, [parse_injection("truncate@80%")], rng())
    assert (cut.cut, cut.sent) == ("truncate", 80)
    assert cut.times == plan.times


def test_a_fault_past_the_end_never_fires() -> None:
    plan = steady_plan(events=10)
    out = inject(
        plan, [parse_injection("pause:1s@token=10"), parse_injection("pause:1s@100%")], rng()
    )
    assert out.times == plan.times
    assert [a["fired"] for a in out.applied] == [False, False]
    # (a cut too: the whole answer goes out)
    cut = inject(
        plan, [parse_injection("truncate@token=999"), parse_injection("stall:forever@100%")], rng()
    )
    assert (cut.cut_at, cut.cut) == (None, None)
    assert [a["fired"] for a in cut.applied] == [False, False]


@pytest.mark.parametrize("size", ["²", "٣", "3 ", "+3"])
def test_a_burst_size_is_ascii_digits(size: str) -> None:
    with pytest.raises(SpecError):
        parse_injection(f"burst:{size}@start")


@pytest.mark.parametrize(
    ("spec", "names"),
    [
        ("pause:2x@50%", ["'2x'"]),
        ("pause:2s@150%", ["'150%'", "0-100%"]),
        ("pause:2s", ["needs a position"]),
        ("pause:0s@50%", ["above zero"]),
        ("wobble:2s@50%", ["'wobble'", "pause, stall, burst, jitter, truncate"]),
        ("burst:lots@start", ["'lots'"]),
        ("jitter:20ms@50%", ["whole stream"]),
        ("truncate", ["needs a position"]),
        ("truncate@middle", ["'middle'", "token=40"]),
        ("pause:1s@token=9-3", ["backwards"]),
        ("pause", ["KIND:VALUE"]),
    ],
)
def test_a_bad_spec_names_the_bad_part(spec: str, names: list[str]) -> None:
    with pytest.raises(SpecError) as caught:
        parse_injection(spec)
    message = str(caught.value)
    assert repr(spec) in message
    for name in names:
        assert name in message
