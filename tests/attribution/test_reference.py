"""The library's attribution is the plain reading of docs/attribution.md
(tests/attribution_reference.py), on random fleets and degenerate ones; and hostile inputs
through the public entry points end in a clear error or a bounded answer."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest

from steadystream import Event, EventKind, Timeline, TokenSource, Where
from steadystream.attribution import ATTRIBUTABLE, EngineSamples, Explanation, explain
from steadystream.attribution.export import stall_totals
from tests import attribution_reference as ref
from tests.support.attribution import T0

MS = 1_000_000
Scrapes = list[tuple[float, dict[str, float]]]


def timeline(
    times_ms: list[float],
    *,
    stream_id: str,
    start_ms: float | None = 0.0,
    where: Where = Where.CLIENT,
    tokens: list[int] | None = None,
    token_source: TokenSource = TokenSource.EXACT,
) -> Timeline:
    counts = tokens if tokens is not None else [1] * len(times_ms)
    events = [Event(0, "", 0, EventKind.ROLE)]
    events += [
        Event(round(t * MS), "w" * n, n, EventKind.CONTENT)
        for t, n in zip(times_ms, counts, strict=True)
    ]
    return Timeline.from_events(
        events,
        stream_id=stream_id,
        where=where,
        started_at=None if start_ms is None else T0 + start_ms / 1000,
        token_source=token_source,
    )


def random_fleet(seed: int, count: int) -> tuple[list[Timeline], Scrapes | None]:
    """Streams over a shared clock: steady ones, lumpy ones, shared stretched steps, own
    pauses, held heads, stalls touching, some without a wall clock or text; gateway edges
    for a few; engine scrapes (whole, partial, or none) with counters that move and reset."""
    rng = np.random.default_rng(seed)
    stretches = sorted(rng.uniform(0, count * 60.0, size=max(1, count // 8)).tolist())
    out: list[Timeline] = []
    for i in range(count):
        start = float(rng.uniform(0, count * 60.0))
        n = int(rng.integers(0, 60))
        shape = rng.choice(["steady", "lumps", "pairs"], p=[0.6, 0.2, 0.2])
        step = {"steady": [20.0, 30.0], "lumps": [0.2, 0.2, 0.2, 90.0], "pairs": [0.3, 40.0]}
        gaps = rng.choice(step[str(shape)], size=n)
        first = float(rng.choice([30.0, 300.0, 700.0, 2500.0]))
        times = first + np.concatenate(([0.0], np.cumsum(gaps)[:-1])) if n else np.zeros(0)
        if n and rng.random() < 0.15:  # a held head: released at once with the first token
            times[: min(n, 6)] = times[0]
        for at in stretches:  # one step stretched for every stream then in flight
            rel = at - start
            after = times > rel
            if after.any() and (~after).any():
                times = np.where(after, rel + 450.0 + (times - times[after][0]), times)
        if n > 4 and rng.random() < 0.3:  # a pause of its own, maybe let go in a lump
            k = int(rng.integers(1, n))
            times[k:] += float(rng.uniform(300, 1500))
            if rng.random() < 0.5:
                times[k : k + 4] = times[k]
        if n > 6 and rng.random() < 0.1:  # two stalls touching
            times[3:] += 500.0
            times[4:] += 500.0
        times = np.maximum.accumulate(np.round(times, 3))
        tokens = rng.integers(1, 3, size=n).tolist() if rng.random() < 0.3 else None
        source = TokenSource.ESTIMATED if rng.random() < 0.2 else TokenSource.EXACT
        started = None if rng.random() < 0.07 else start
        if rng.random() < 0.15 and n:  # seen at the gateway too: maybe without the pause
            up = times.copy()
            if rng.random() < 0.5:
                up = np.array([first + 25.0 * j for j in range(n)])
            for where in (Where.GATEWAY_UPSTREAM, Where.GATEWAY_DOWNSTREAM):
                out.append(
                    timeline(
                        up.tolist(), stream_id=f"s{i}", start_ms=start, where=where, tokens=tokens
                    )
                )
                up = times.copy() if rng.random() < 0.5 else up
        out.append(
            timeline(
                times.tolist(),
                stream_id=f"s{i}",
                start_ms=started,
                tokens=tokens,
                token_source=source,
            )
        )
    return out, random_scrapes(rng, count * 60.0 + 8_000.0)


def random_scrapes(rng: np.random.Generator, span_ms: float) -> Scrapes | None:
    kind = rng.choice(["none", "whole", "partial"])
    if kind == "none":
        return None
    names = [
        ref.PREEMPTIONS,
        ref.PROMPT,
        ref.DRAFTS,
        ref.DRAFT_TOKENS,
        ref.ACCEPTED,
        ref.INJECTED,
        ref.LAG_RESETS,
        ref.LAG_SUM,
        ref.LAG_COUNT,
    ]
    if kind == "partial":
        names = [str(n) for n in rng.choice(names, size=3, replace=False)]
    counters = dict.fromkeys(names, 0.0)
    scrapes: Scrapes = []
    t = T0 - 0.5
    while t < T0 + span_ms / 1000 + 0.5:
        for name in counters:
            if rng.random() < 0.08:
                counters[name] += float(rng.choice([1.0, 3.0, 1500.0]))
            if rng.random() < 0.004:
                counters[name] = 0.0  # the engine restarted
        values = dict(counters)
        if kind == "whole" or rng.random() < 0.5:
            values[ref.WAITING] = float(rng.integers(0, 3))
            values[ref.KV] = float(rng.random())
        if rng.random() < 0.05:
            values.pop(next(iter(counters)), None)  # a scrape without that series
        scrapes.append((t, values))
        t += 0.1
    return scrapes


def library(
    timelines: list[Timeline], threshold_ns: int, scrapes: Scrapes | None, **kwargs: object
) -> Explanation:
    engine = None if scrapes is None else EngineSamples.from_scrapes(scrapes)
    return explain(timelines, stall_threshold_ns=threshold_ns, engine=engine, **kwargs)  # type: ignore[arg-type]


def close(got: object, want: object) -> bool:
    """Equal, floats within a relative 1e-9 (sums taken in another order), through tuples
    and lists."""
    if isinstance(got, float | int) and isinstance(want, float | int):
        return math.isclose(got, want, rel_tol=1e-9, abs_tol=1e-12)
    if isinstance(got, tuple | list) and isinstance(want, tuple | list):
        return len(got) == len(want) and all(close(a, b) for a, b in zip(got, want, strict=True))
    if isinstance(got, dict) and isinstance(want, dict):
        return got.keys() == want.keys() and all(close(got[k], want[k]) for k in got)
    return got == want


def assert_same(
    timelines: list[Timeline],
    threshold_ns: int,
    scrapes: Scrapes | None = None,
    files: list[int] | None = None,
) -> Explanation:
    got = library(timelines, threshold_ns, scrapes, files=files, worst=1_000)
    want = ref.explain(timelines, threshold_ns=threshold_ns, scrapes=scrapes, files=files)
    assert len(got.stalls) == len(want)
    for g, w in zip(got.stalls, want, strict=True):
        where = (g.stream_id, g.text_index, g.evidence)
        assert (g.stream_id, g.where.value, g.event_index, g.text_index) == (
            w.stream_id,
            w.where,
            w.event_index,
            w.text_index,
        ), where
        assert (g.start_ns, g.end_ns, g.first_token) == (w.start_ns, w.end_ns, w.first_token)
        shares = [(s.cause, s.fraction, s.confidence) for s in g.parts]
        assert close(shares, w.shares), where
        assert (g.cause, g.confidence) == (w.cause, w.confidence), where
        assert math.isclose(sum(s.fraction for s in g.parts), 1.0)
    rows = [(c.cause, c.stalls, c.time_s, c.share) for c in got.by_cause]
    assert close(rows, ref.by_cause(want))
    hurt = [(h.stream_id, h.stalls, h.time_s, h.cause) for h in got.hurt]
    assert close(hurt, ref.most_hurt(want, 1_000))
    totals = {t.cause: (t.seconds, t.stalls) for t in stall_totals(got)}
    assert close(totals, ref.prometheus(want, ATTRIBUTABLE))
    return got


@pytest.mark.parametrize("seed", range(12))
def test_random_fleets_are_attributed_as_the_doc_says(seed: int) -> None:
    timelines, scrapes = random_fleet(seed, 30 + 7 * seed)
    got = assert_same(timelines, 400 * MS, scrapes)
    assert got.stalls


@pytest.mark.parametrize("seed", [101, 102])
def test_a_crowd_past_the_sample_is_attributed_as_the_doc_says(seed: int) -> None:
    timelines, scrapes = random_fleet(seed, 160)
    assert_same(timelines, 250 * MS, scrapes)


def test_low_thresholds_make_short_windows_alike() -> None:
    """Gaps of a few ms: the windows of 10 ms overlap the whole gap."""
    timelines, scrapes = random_fleet(7, 40)
    for threshold in (1, 5 * MS, 25 * MS):
        assert_same(timelines, threshold, scrapes)


def test_degenerate_fleets() -> None:
    one = [timeline([30.0, 900.0, 925.0], stream_id="only")]
    assert_same(one, 400 * MS)
    assert_same([], 400 * MS)
    empty = [timeline([], stream_id="e"), timeline([], stream_id="f", start_ms=None)]
    assert_same(empty, 400 * MS)
    # a stall at the first token, equal timestamps, stalls touching each other
    same = [
        timeline([500.0, 500.0, 500.0, 1000.0, 1500.0], stream_id="a"),
        timeline([500.0, 500.0, 500.0, 1000.0, 1500.0], stream_id="b"),
        timeline([500.0, 500.0, 500.0, 1000.0, 1500.0], stream_id="c"),
    ]
    assert_same(same, 400 * MS)
    # huge and tiny: a stream a year long, one a microsecond long
    huge = [
        timeline([1.0, 3.15e10], stream_id="year"),
        timeline([0.001, 0.002], stream_id="tiny"),
        timeline([1.0, 5e9, 1e10], stream_id="long", start_ms=1e6),
    ]
    assert_same(huge, 400 * MS)
    assert_same(huge, 1)


def test_clocks_offset_and_rerun_ids() -> None:
    """Streams whose wall clocks are far apart share nothing; ids reused by a later file are
    other streams; a gateway edge in another file joins its client."""
    a = [timeline([30.0 + 25 * k for k in range(10)] + [900.0, 925.0], stream_id="x")]
    far = [timeline([30.0, 900.0, 925.0], stream_id="y", start_ms=3.6e9)]
    assert_same(a + far, 400 * MS)
    upstream = timeline(
        [30.0 + 25 * k for k in range(40)], stream_id="x", where=Where.GATEWAY_UPSTREAM
    )
    assert_same(a + a + [upstream], 400 * MS, files=[0, 1, 2])
    assert_same([*a, upstream, *a], 400 * MS, files=[0, 0, 1])


def test_a_gap_present_downstream_and_absent_upstream_is_the_gateways_at_the_client() -> None:
    """Rule 1b reads where the gap arose, not which vantage point is explained: absent at the
    gateway's upstream edge, present at its downstream edge and at the client, it arose in
    the gateway (it was read as the network's, between the upstream edge and the client)."""
    smooth = [30.0 + 25 * k for k in range(40)]
    paused = [t + (600.0 if k >= 20 else 0.0) for k, t in enumerate(smooth)]
    timelines = [
        timeline(smooth, stream_id="g", where=Where.GATEWAY_UPSTREAM),
        timeline(paused, stream_id="g", where=Where.GATEWAY_DOWNSTREAM),
        timeline(paused, stream_id="g"),
    ]
    got = assert_same(timelines, 400 * MS)
    (stall,) = got.stalls
    assert (stall.where, stall.cause, stall.confidence) == (Where.CLIENT, "unknown", 0.0)
    assert "absent at gateway-upstream, present at gateway-downstream" in stall.evidence
    # Absent downstream too: the network between the gateway and the client.
    timelines[1] = timeline(smooth, stream_id="g", where=Where.GATEWAY_DOWNSTREAM)
    (stall,) = assert_same(timelines, 400 * MS).stalls
    assert (stall.cause, stall.confidence) == ("connection-hiccup", 0.95)
    assert "absent at gateway-downstream, present at client" in stall.evidence


def test_an_untimed_stream_reads_the_other_heads_as_a_timed_one() -> None:
    """Rule 2a (heads held in lumps of one size) needs no wall clock: a stream without
    ``started_at`` whose head came as the others' did is a held head too (it was read as a
    connection that froze)."""
    held = [600.0] * 6 + [625.0, 650.0]
    timelines = [timeline(held, stream_id=f"h{k}", start_ms=100.0 * k) for k in range(3)]
    timelines += [timeline([30.0 + 25 * k for k in range(30)], stream_id=f"q{k}") for k in range(5)]
    timelines[0] = timelines[0].replace(started_at=None)
    got = assert_same(timelines, 400 * MS)
    heads = {s.stream_id: (s.cause, s.confidence) for s in got.stalls}
    assert heads == dict.fromkeys(("h0", "h1", "h2"), ("head-burst", 0.75))


def test_a_counter_reset_inside_the_window_counts_what_came_after() -> None:
    """The engine restarted during the stall and counted as many again: read scrape to
    scrape, as Prometheus reads a reset, the increase is what it counted since (comparing
    the window's two ends alone said nothing happened)."""
    times = [T0 + k * 0.1 for k in range(40)]
    injected = [3.0 if k < 15 else (0.0 if k < 18 else 3.0) for k in range(40)]
    samples = EngineSamples.from_scrapes(
        [(t, {ref.INJECTED: v}) for t, v in zip(times, injected, strict=True)]
    )
    assert samples.increase(ref.INJECTED, T0 + 1.0, T0 + 2.5) == 3.0
    assert samples.increase(ref.INJECTED, T0 + 2.0, T0 + 3.0) == 0.0
    steady = [30.0 + 25 * k for k in range(20)]
    paused = steady[:10] + [t + 700.0 for t in steady[10:]]
    scrapes = [(t, {ref.INJECTED: v}) for t, v in zip(times, injected, strict=True)]
    (stall,) = assert_same(
        [timeline(paused, stream_id="r", start_ms=1000.0)], 400 * MS, scrapes
    ).stalls
    assert stall.cause == "injected-fault"


def raw(times_ns: list[int], stream_id: str, started_at: float | None) -> Timeline:
    events = [Event(0, "", 0, EventKind.ROLE)]
    events += [Event(t, "w", 1, EventKind.CONTENT) for t in times_ns]
    return Timeline.from_events(events, stream_id=stream_id, started_at=started_at)


def test_streams_that_last_centuries_are_attributed_as_the_doc_says() -> None:
    """Spans past 2**62 ns summed past 64 bits when the fleet's times were packed (an
    overflow warning, an error under pytest), and a wall clock plus a stream's last event
    past 64 bits wrapped around: such a stream now has no wall clock to join by."""
    centuries = 8_900_000_000_000_000_000
    fleet = [
        raw([MS, centuries // 2, centuries], "old", 0.0),
        raw([MS, 2 * MS, centuries], "older", 1.0),
        raw([MS, 2 * MS, 10**9], "b", 2.0),
        raw([MS, 9_000_000_000_000_000_000], "past", T0),  # its end on the wall: 2255+
    ]
    got = assert_same(fleet, 400 * MS)
    past = [s for s in got.stalls if s.stream_id == "past"]
    assert past
    assert all(s.started_at is None for s in past)


def test_engine_scrapes_at_no_time_are_refused() -> None:
    for t in (math.nan, math.inf, "soon", True):
        with pytest.raises(ValueError, match=r"scrape 1: t must be a finite number"):
            EngineSamples.from_scrapes([(T0, {}), (t, {ref.PREEMPTIONS: 1.0})])  # type: ignore[list-item]
    samples = EngineSamples.from_scrapes(
        [(T0, {ref.PREEMPTIONS: math.inf}), (T0 + 1, {ref.PREEMPTIONS: 2.0})]
    )
    assert samples.increase(ref.PREEMPTIONS, T0, T0 + 1) == 2.0  # inf: not scraped


@pytest.mark.parametrize("value", ["3", None, True, [1.0]])
def test_an_engine_value_that_is_no_number_is_refused_naming_its_series(value: object) -> None:
    # (numpy's own "could not convert string to float" named neither scrape nor series.)
    scrapes = [(T0, {ref.PREEMPTIONS: 1.0}), (T0 + 1, {ref.PREEMPTIONS: value})]
    with pytest.raises(ValueError, match=rf"scrape 1: series '{ref.PREEMPTIONS}' must be a number"):
        EngineSamples.from_scrapes(scrapes)  # type: ignore[arg-type]


def test_absurd_windows_and_hostile_numbers_end_in_an_answer_or_a_clear_error(
    tmp_path: Path,
) -> None:
    steady = [30.0 + 25 * k for k in range(20)]
    paused = steady[:10] + [t + 700.0 for t in steady[10:]]
    fleet = [timeline(paused, stream_id="a"), timeline(steady, stream_id="b")]
    for bad in (math.nan, math.inf, -1, 0, "400ms"):
        with pytest.raises(ValueError, match="stall_threshold_ns"):
            explain(fleet, stall_threshold_ns=bad)  # type: ignore[arg-type]
    for started in (math.nan, math.inf, -math.inf, 1e300):
        untimed = [t.replace(started_at=started) for t in fleet]
        assert [s.started_at for s in explain(untimed).stalls] == [None]
    # scrapes an age before and after the run, and a counter that jumps by 1e308
    scrapes: Scrapes = [(0.0, {ref.PREEMPTIONS: 0.0}), (T0 + 0.5, {ref.PREEMPTIONS: 1e308})]
    scrapes += [(4e9, {ref.PREEMPTIONS: 1e308, ref.PROMPT: 1e308})]
    assert_same(fleet, 400 * MS, scrapes)


def test_a_hundred_thousand_tiny_streams_complete() -> None:
    """Memory bounded by design (batched passes): no timing asserted. Streams a few ms
    apart, about a hundred in flight at once (the pairs of stalls and streams in flight are
    all looked at before the sample of 64 is taken: a fleet all in flight at once costs
    stalls x streams)."""
    fleet = [
        timeline([1.0, 450.0 + (k % 7)], stream_id=f"t{k}", start_ms=k * 5.0)
        for k in range(100_000)
    ]
    got = explain(fleet)
    assert got.streams == 100_000
    assert len(got.stalls) == 100_000
    assert sum(c.stalls for c in got.by_cause) == 100_000
