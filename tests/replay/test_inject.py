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


# -- the arrays against the definition, event by event -----------------------------------------


def _one_by_one(plan: Plan, specs: list[str], generator: np.random.Generator) -> Plan:
    """What ``inject`` must equal: each injection applied an event at a time, as specified."""
    times, extra = list(plan.times), [dict(e) for e in plan.extra]
    end_ns, cut_at, cut, applied = plan.end_ns, plan.cut_at, plan.cut, []
    total, n = sum(plan.tokens), len(times)

    def charge(i: int, cause: Cause, ns: int) -> None:
        extra[i][cause] = extra[i].get(cause, 0) + ns

    def event_of(token: int) -> int:
        seen = 0
        for i, count in enumerate(plan.tokens):
            seen += count
            if token < seen:
                return i
        return n

    for injection in map(parse_injection, specs):
        token = injection.position.token(total, generator) if injection.position else None
        event = None if token is None else min(event_of(token), n)
        record: dict[str, object] = {"spec": injection.spec, "token": token, "event": event}
        if injection.kind == "jitter":
            assert injection.duration_ns is not None
            draws = generator.uniform(0, injection.duration_ns, size=n)
            previous = added = 0
            old = list(times)
            for i in range(n):
                # the delay added to the gap that ends at event i (not the event's shift: a
                # gap after a late event carries only what it adds)
                before = old[i] - (old[i - 1] if i else 0)
                times[i] = max(previous, times[i] + round(float(draws[i])))
                change = times[i] - (times[i - 1] if i else 0) - before
                if change > 0:
                    charge(i, Cause.NETWORK_BUFFERING, change)
                    added += change
                previous = times[i]
            end_ns = max(end_ns, times[-1] if times else 0)
            record.update(fired=n > 0, added_ns=added)
        elif event is None or event >= n:
            record.update(fired=False, added_ns=None if injection.duration_ns is None else 0)
            if injection.kind == "burst":
                record["added_ns"] = 0
        elif injection.kind in ("stall", "truncate") and injection.duration_ns is None:
            if cut_at is None or event < cut_at:
                cut_at, cut = event, ("stall" if injection.kind == "stall" else "truncate")
            record.update(fired=True, added_ns=None)
        elif injection.kind == "burst":
            first = sum(plan.tokens[:event])
            last = min(event_of(min(total - 1, first + injection.count - 1)), n - 1)
            held = times[last] - times[event]
            for i in range(event, last):
                times[i] = times[last]
            if held > 0:
                charge(event, Cause.HEAD_BURST, held)
            record.update(fired=True, added_ns=held, last_event=last)
        else:
            assert injection.duration_ns is not None
            for i in range(event, n):
                times[i] += injection.duration_ns
            end_ns += injection.duration_ns
            charge(event, Cause.INJECTED_FAULT, injection.duration_ns)
            record.update(fired=True, added_ns=injection.duration_ns)
        applied.append(record)
    return Plan(
        times,
        list(plan.tokens),
        list(plan.texts),
        end_ns,
        plan.role_ns,
        extra,
        cut_at,
        cut,
        applied,
    )


_SPECS = [
    "pause:2s@50%",
    "stall:300ms@token=3",
    "burst:4@10-90%",
    "jitter:20ms",
    "jitter:1ms",
    "stall:forever@70%",
    "truncate@token=5-9",
    "pause:1ms@start",
    "burst:1@100%",
    "pause:5s@101%".replace("101", "100"),
    "burst:1000@start",
    "truncate@0%",
]


@pytest.mark.parametrize("seed", range(40))
def test_injecting_by_arrays_equals_injecting_event_by_event(seed: int) -> None:
    draw = np.random.default_rng(seed)
    events = int(draw.integers(0, 30))
    tokens = [int(t) for t in draw.integers(0, 4, size=events)]
    times = sorted(int(t) for t in draw.integers(0, 2_000 * MS, size=events))
    plan = Plan(times, tokens, ["x"] * events, end_ns=(times[-1] if times else 0) + MS)
    specs = [str(s) for s in draw.choice(_SPECS, size=int(draw.integers(1, 8)))]
    got = inject(plan, [parse_injection(s) for s in specs], rng(seed))
    want = _one_by_one(plan, specs, rng(seed))
    assert got.times == want.times
    assert all(type(t) is int for t in got.times)
    assert (got.end_ns, got.cut_at, got.cut) == (want.end_ns, want.cut_at, want.cut)
    assert got.extra == want.extra
    assert got.applied == want.applied


def test_the_bound_of_injections_on_a_long_stream_is_array_work() -> None:
    # 2,000 jitters on 5,000 events was ten million Python steps (10 s on the event loop).
    plan = steady_plan(events=5_000, gap_ms=5)
    out = inject(plan, [parse_injection("jitter:2ms")] * 2_000, rng())
    assert len(out.applied) == 2_000
    assert out.times == sorted(out.times)
    assert sum(sum(e.values()) for e in out.extra) == sum(a["added_ns"] for a in out.applied)


def test_jitter_charges_each_gap_what_it_added_to_that_gap() -> None:
    # An event made late by the one before it has no delay of its own: what a gap carries
    # is its growth, and the causes sum to no more than the stream was made longer by.
    plan = steady_plan(events=200, gap_ms=2)
    out = inject(plan, [parse_injection("jitter:30ms")], rng(3))
    old, new = np.diff(plan.times, prepend=0), np.diff(out.times, prepend=0)
    charged = [e.get(Cause.NETWORK_BUFFERING, 0) for e in out.extra]
    assert charged == np.maximum(new - old, 0).tolist()
    assert out.applied[0]["added_ns"] == sum(charged)
