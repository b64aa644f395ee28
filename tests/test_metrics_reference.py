"""The per-stream and fleet metrics against a literal reading of docs/metrics.md.

The per-stream reference is tests/metrics_reference.py's (a stream at a time in plain
Python, written from the definitions alone); the fleet's is here, built on it. The
vectorised code must agree with them on degenerate fleets: empty streams, one or two events,
events sharing a time, gaps of 0 ns, one huge gap, many tokens an event, pieces of a token,
times a little before the request (clock skew), every outcome, unknown token counts.
"""

from __future__ import annotations

import itertools
import math
from collections import Counter
from collections.abc import Sequence

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from steadystream import EventKind, Outcome, Timeline, TokenSource, Where
from steadystream.metrics import (
    FLEET_CATALOGUE,
    STREAM_COLUMNS,
    MetricConfig,
    _per_stream,
    fleet_metrics,
    stream_metrics,
    stream_table,
)
from steadystream.metrics.bootstrap import fleet_draws, fleet_statistic, percentile_interval
from tests.metrics_reference import reference as reference_stream

MS = 1_000_000
_TEXT = {EventKind.CONTENT, EventKind.REASONING, EventKind.TOOL_CALL}
_BROKEN = {Outcome.ERROR, Outcome.TRUNCATED, Outcome.CLIENT_STUCK}


# -- the reference: one stream, from the definitions ----------------------------------------


def _percentile(values: Sequence[float], q: float) -> float:
    """Linear interpolation between closest ranks: rank ``q/100 * (n - 1)``."""
    ordered = sorted(values)
    rank = q / 100 * (len(ordered) - 1)
    low = math.floor(rank)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (rank - low) * (ordered[high] - ordered[low])


def _text_events(tl: Timeline) -> list[tuple[int, int, int, bool]]:
    """(time, tokens, text bytes, reasoning) of every text event: a text kind carrying a
    token or a piece of one (text, no token)."""
    out = []
    columns = (tl.times, tl.tokens, tl.text_bytes, tl.kinds)
    for t, n, b, k in zip(*(column.tolist() for column in columns), strict=True):
        if EventKind(k) in _TEXT and (n > 0 or b > 0):
            out.append((t, n, b, k == EventKind.REASONING))
    return out


def reference_fleet(runs: Sequence[Timeline], cfg: MetricConfig) -> dict[str, float | None]:
    rows = [reference_stream(tl, cfg) for tl in runs]

    def defined(name: str) -> list[float]:
        return [v for r in rows if (v := r[name]) is not None]

    def pct(name: str, q: float) -> float | None:
        values = defined(name)
        return _percentile(values, q) if values else None

    def mean(name: str) -> float | None:
        values = defined(name)
        return sum(values) / len(values) if values else None

    out: dict[str, float | None] = {"streams": float(len(runs))}
    tokens = sum(defined("output_tokens"))
    out["output_tokens"] = float(int(tokens))
    for of, column in (("p99", "gap_p99_s"), ("worst_gap", "max_gap_s")):
        for q in (50, 90, 99):
            out[f"p{q}_of_{of}_s"] = pct(column, q)
    good = 0
    for tl, r in zip(runs, rows, strict=True):
        ttft, worst = r["ttft_s"], r["max_gap_s"]
        if tl.outcome in _BROKEN or ttft is None or ttft > cfg.ttft_target_ns / 1e9:
            continue
        if worst is None or worst <= cfg.stall_threshold_ns / 1e9:
            good += 1
    out["goodput"] = good / len(runs) if runs else None
    out["unstable_share"] = mean("unstable")
    out["stall_count"] = float(sum(defined("stall_count")))
    # Stalls per 1,000 of the tokens of the streams that counted their tokens, those streams'
    # stalls alone: a stream whose tokens are unknown adds nothing to either side.
    known = [r for r in rows if r["output_tokens"] is not None]
    known_tokens = sum(r["output_tokens"] or 0.0 for r in known)
    known_stalls = sum(r["stall_count"] or 0.0 for r in known)
    out["stalls_per_1k_tokens"] = known_stalls / known_tokens * 1000 if known_tokens else None
    for q in (50, 90, 95, 99):
        out[f"ttft_p{q}_s"] = pct("ttft_s", q)
    out["reasoning_streams"] = float(len(defined("ttfr_s")))
    out["ttfr_p50_s"], out["ttfr_p99_s"] = pct("ttfr_s", 50), pct("ttfr_s", 99)
    out["tpot_p50_s"], out["e2el_p50_s"] = pct("tpot_s", 50), pct("e2el_s", 50)
    pooled = [b[0] - a[0] for tl in runs for a, b in itertools.pairwise(_text_events(tl))]
    for q in (50, 90, 95, 99):
        out[f"pooled_gap_p{q}_s"] = _percentile(pooled, q) / 1e9 if pooled else None
    out["pooled_gap_max_s"] = max(pooled) / 1e9 if pooled else None
    out["qoe_mean"], out["fluidity_mean"] = mean("qoe"), mean("fluidity")
    out["tokens_per_chunk_mean"] = mean("tokens_per_chunk")
    out["envelope_overhead_mean"] = mean("envelope_overhead")
    out["head_burst_p50"] = pct("head_burst", 50)
    return out


# -- generated fleets ---------------------------------------------------------------------

_KINDS = [EventKind.CONTENT] * 6 + [
    EventKind.REASONING,
    EventKind.REASONING,
    EventKind.TOOL_CALL,
    EventKind.ROLE,
    EventKind.USAGE,
    EventKind.KEEPALIVE,
    EventKind.ERROR,
    EventKind.EMPTY,
]


@st.composite
def streams(draw: st.DrawFn, index: int = 0) -> Timeline:
    n = draw(st.integers(0, 24))
    shape = draw(st.sampled_from(["mixed", "equal", "same-time", "one-huge", "fat"]))
    step = draw(st.sampled_from([0, 1, 20 * MS, 50 * MS]))
    start = draw(st.integers(-MS, 1500 * MS))  # a little before the request: clock skew
    times, tokens, text_bytes, kinds = [], [], [], []
    t = start
    for j in range(n):
        if shape == "mixed":
            t += draw(st.sampled_from([0, 1, 999_999, MS, 20 * MS, 401 * MS, 2500 * MS]))
        elif shape == "equal":
            t += step
        elif shape == "one-huge":
            t += 10**13 if j == n // 2 else 20 * MS
        elif shape == "fat":
            t += draw(st.integers(0, 300 * MS))
        kind = draw(st.sampled_from(_KINDS))
        count = (
            draw(st.sampled_from([0, 1, 1, 3, 500] if shape == "fat" else [0, 1, 1, 2]))
            if kind in _TEXT
            else draw(st.sampled_from([0, 0, 1]))  # a count on a non-text event is no token
        )
        times.append(t)
        tokens.append(count)
        text_bytes.append(draw(st.sampled_from([0, 1, 4])))
        kinds.append(int(kind))
    return Timeline(
        stream_id=f"s{index}",
        where=Where.CLIENT,
        times=np.array(times, dtype=np.int64),
        tokens=np.array(tokens, dtype=np.int32),
        wire_bytes=np.array([draw(st.sampled_from([0, 90])) for _ in times], dtype=np.int32),
        text_bytes=np.array(text_bytes, dtype=np.int32),
        kinds=np.array(kinds, dtype=np.uint8),
        first_byte_ns=times[0] if times and times[0] >= 0 else None,
        outcome=draw(st.sampled_from(list(Outcome))),
        token_source=draw(st.sampled_from([TokenSource.EXACT] * 4 + [TokenSource.UNKNOWN])),
        labels=draw(st.sampled_from([{}, {"model": "a"}, {"model": "b", "tenant": "t"}])),
    )


@st.composite
def fleets(draw: st.DrawFn) -> list[Timeline]:
    count = draw(st.integers(1, 7))
    return [draw(streams(i)) for i in range(count)]


configs = st.builds(
    MetricConfig,
    stall_threshold_ns=st.sampled_from([MS, 20 * MS, 400 * MS]),
    ttft_target_ns=st.sampled_from([MS, 800 * MS]),
    qoe_expected_ttft_ns=st.sampled_from([MS, 1000 * MS]),
    qoe_pace_ns_per_token=st.sampled_from([1, 20 * MS, 100 * MS]),
    qoe_form=st.sampled_from(["exact", "discrete"]),
    fluidity_decode_deadline_ns=st.sampled_from([1, 50 * MS]),
    fluidity_form=st.sampled_from(["documented", "code"]),
)


def agree(got: float | None, want: float | None) -> bool:
    if got is None or (isinstance(got, float) and math.isnan(got)):
        return want is None
    if want is None:
        return False
    return math.isclose(got, want, rel_tol=1e-9, abs_tol=1e-12)


@settings(max_examples=250, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(fleets(), configs)
def test_every_stream_column_equals_the_literal_reading(
    runs: list[Timeline], cfg: MetricConfig
) -> None:
    table = stream_table(runs, cfg)
    for i, tl in enumerate(runs):
        want = reference_stream(tl, cfg)
        for name in STREAM_COLUMNS:
            got = float(table.column(name)[i])
            assert agree(got, want[name]), (i, name, got, want[name])


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(fleets(), configs)
def test_every_fleet_number_equals_the_literal_reading(
    runs: list[Timeline], cfg: MetricConfig
) -> None:
    got = fleet_metrics(runs, cfg).scalars()
    want = reference_fleet(runs, cfg)
    for name in want:
        assert agree(got[name], want[name]), (name, got[name], want[name])
    assert set(want) | {"stall_threshold_s", "ttft_target_s"} == set(got)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(fleets(), st.integers(0, 2**32 - 1))
def test_each_bootstrap_statistic_is_its_fleet_metric_of_the_streams_drawn(
    runs: list[Timeline], seed: int
) -> None:
    cfg = MetricConfig()
    table = stream_table(runs, cfg)
    picks = np.random.default_rng(seed).integers(0, len(table), len(table))
    counts = np.bincount(picks, minlength=len(table))[None, :]
    recorded = np.ones((1, len(table)), dtype=np.int64)
    as_recorded = fleet_metrics(table, cfg).scalars()
    drawn = fleet_metrics(table.take(picks), cfg).scalars()
    for name in FLEET_CATALOGUE:
        statistic = fleet_statistic(name, table, cfg)
        assert agree(float(statistic(recorded)[0]), as_recorded[name]), name
        assert agree(float(statistic(counts)[0]), drawn[name]), name


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(fleets())
def test_ttft_by_label_is_each_values_ttft_percentiles(runs: list[Timeline]) -> None:
    cfg = MetricConfig()
    by = fleet_metrics(runs, cfg).ttft_by
    for dimension in ("model", "route", "tenant"):
        members: dict[str, list[float | None]] = {}
        for tl in runs:
            if value := tl.labels.get(dimension, ""):
                members.setdefault(value, []).append(reference_stream(tl, cfg)["ttft_s"])
        assert set(by.get(dimension, {})) == set(members)
        for value, ttfts in members.items():
            group = by[dimension][value]
            defined = [t for t in ttfts if t is not None]
            assert group.streams == len(ttfts)
            for q, got in ((50, group.p50_s), (95, group.p95_s), (99, group.p99_s)):
                assert agree(got, _percentile(defined, q) if defined else None)


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(fleets(), configs)
def test_quality_a_chunk_a_step_equals_the_literal_reading(
    runs: list[Timeline], cfg: MetricConfig
) -> None:
    with pytest.MonkeyPatch.context() as patch:  # every stream past the token layout's size
        patch.setattr(_per_stream, "_EXPAND_TOKENS", 0)
        patch.setattr(_per_stream, "_EXPAND_PER_EVENT", 0)
        table = stream_table(runs, cfg)
    for i, tl in enumerate(runs):
        want = reference_stream(tl, cfg)
        for name in ("qoe", "fluidity"):
            got = float(table.column(name)[i])
            assert agree(got, want[name]), (i, name, got, want[name])


# -- the cases the generated fleets found, and hostile sizes ----------------------------


def _stream(
    times_ms: Sequence[float],
    tokens: Sequence[int],
    *,
    text_bytes: Sequence[int] | None = None,
    stream_id: str = "s",
    token_source: TokenSource = TokenSource.EXACT,
) -> Timeline:
    n = len(times_ms)
    return Timeline(
        stream_id=stream_id,
        where=Where.CLIENT,
        times=np.array([round(t * MS) for t in times_ms], dtype=np.int64),
        tokens=np.array(tokens, dtype=np.int32),
        wire_bytes=np.zeros(n, dtype=np.int32),
        text_bytes=np.array(text_bytes if text_bytes is not None else [1] * n, dtype=np.int32),
        kinds=np.full(n, int(EventKind.CONTENT), dtype=np.uint8),
        token_source=token_source,
    )


def test_a_tail_of_pieces_of_a_token_has_no_head_burst_rather_than_an_infinite_one() -> None:
    # The answer's one token comes first; after the head window only pieces of a token
    # (text, no token of its own) arrive: the steady rate delivers no token, so the ratio of
    # the head to it is undefined (None), never infinity (which a p50 across streams takes).
    stream = _stream([100, 120, 140, 600, 620, 640], [1, 0, 0, 0, 0, 0])
    assert stream_metrics(stream).head_burst is None
    steady = _stream([100, 120, 140, 600, 620, 640], [1, 1, 1, 1, 1, 1], stream_id="t")
    fleet = fleet_metrics([stream, steady])
    assert fleet.head_burst_p50 == stream_metrics(steady).head_burst


def test_stalls_per_1k_tokens_leaves_out_the_stalls_of_streams_without_a_token_count() -> None:
    # A peer's file that kept no token count (UNKNOWN) has stalls but no tokens to put them
    # over: counting its stalls against the other streams' tokens doubled the rate here.
    counted = _stream([100, 1100, 1120, 1140], [1, 1, 1, 1])  # one stall, 4 tokens
    uncounted = _stream(
        [100, 1100, 1120, 1140], [1, 1, 1, 1], stream_id="peer", token_source=TokenSource.UNKNOWN
    )
    cfg = MetricConfig()
    fleet = fleet_metrics([counted, uncounted], cfg)
    assert fleet.stall_count == 2  # all stalls
    assert fleet.output_tokens == 4
    assert fleet.stalls_per_1k_tokens == pytest.approx(250.0)
    table = stream_table([counted, uncounted], cfg)
    recorded = np.ones((1, 2), dtype=np.int64)
    per_1k = fleet_statistic("stalls_per_1k_tokens", table, cfg)
    assert per_1k(recorded)[0] == pytest.approx(250.0)
    assert np.isnan(per_1k(np.array([[0, 2]]))[0])  # only the uncounted stream drawn


@pytest.mark.parametrize("form", ["exact", "discrete"])
def test_a_reading_pace_past_int64_is_no_score_rather_than_a_wrapped_one(form: str) -> None:
    # 29 tokens delivered long before the reader expects the first: a reader this slow
    # (the longest duration a flag takes) is never kept waiting, but 29 paces wrap int64
    # nanoseconds, which scored 0.76. Past what int64 holds the score is None, as it is
    # when the same stream is measured a chunk a step.
    longest = 2**63 - 1
    stream = _stream([10 * k for k in range(1, 30)], [1] * 29)
    cfg = MetricConfig(
        qoe_pace_ns_per_token=longest, fluidity_decode_deadline_ns=longest, qoe_form=form
    )
    measured = stream_metrics(stream, cfg)
    assert (measured.qoe, measured.fluidity) == (None, None)
    first = MetricConfig(qoe_expected_ttft_ns=longest, fluidity_prompt_deadline_ns=longest)
    measured = stream_metrics(stream, first)
    assert (measured.qoe, measured.fluidity) == (None, None)
    # and a slow reader that int64 does hold is scored as the reference scores it
    slow = MetricConfig(qoe_pace_ns_per_token=10**15, qoe_form=form)
    assert agree(stream_metrics(stream, slow).qoe, reference_stream(stream, slow)["qoe"])


def test_a_fraction_of_a_nanosecond_in_the_config_is_rounded_not_cut_off() -> None:
    # The deadline recursions run in integer nanoseconds: a 1.5 ns decode deadline was cut to
    # 1 ns there (and 0.5 ns to 0), scoring tokens against deadlines nobody set.
    cfg = MetricConfig(fluidity_decode_deadline_ns=1.6, fluidity_prompt_deadline_ns=2.6)
    assert (cfg.fluidity_decode_deadline_ns, cfg.fluidity_prompt_deadline_ns) == (2, 3)
    assert type(cfg.fluidity_decode_deadline_ns) is int
    stream = Timeline(
        stream_id="ns",
        where=Where.CLIENT,
        times=np.array([3, 5, 7, 9, 12], dtype=np.int64),
        tokens=np.ones(5, dtype=np.int32),
        wire_bytes=np.zeros(5, dtype=np.int32),
        text_bytes=np.ones(5, dtype=np.int32),
        kinds=np.full(5, int(EventKind.CONTENT), dtype=np.uint8),
    )
    assert stream_metrics(stream, cfg).fluidity == pytest.approx(0.8)  # only the 3 ns gap late
    assert MetricConfig(stall_threshold_ns=2.5e8).stall_threshold_ns == 250_000_000


@pytest.mark.parametrize(
    ("value", "message"),
    [
        (0.4, r"^qoe_pace_ns_per_token must be 1 ns or more, got 0\.4$"),
        (10**30, r"^qoe_pace_ns_per_token must be at most 9223372036854775807 ns"),
        (1e30, r"^qoe_pace_ns_per_token must be at most 9223372036854775807 ns"),
    ],
)
def test_a_duration_no_nanosecond_count_holds_is_refused_by_name(
    value: float, message: str
) -> None:
    # 10**30 ns went through, then failed deep in numpy with "Python int too large to
    # convert to C long" on the first stream measured.
    with pytest.raises(ValueError, match=message):
        MetricConfig(qoe_pace_ns_per_token=value)


def test_fleets_of_streams_without_gaps_have_no_gap_numbers() -> None:
    one_event = [_stream([100.0 + k % 7], [1], stream_id=f"s{k}") for k in range(3000)]
    empty = _stream([], [], stream_id="empty")
    fleet = fleet_metrics([*one_event, empty])
    assert fleet.streams == 3001
    assert fleet.p99_of_p99_s is None
    assert fleet.p99_of_worst_gap_s is None
    assert fleet.pooled_gap_max_s is None
    assert fleet.unstable_share is None
    assert fleet.goodput == pytest.approx(3000 / 3001)  # the empty stream has no TTFT
    assert fleet.ttft_p50_s == pytest.approx(0.103)
    single = fleet_metrics([_stream([100, 120, 2620], [1, 1, 1])])
    assert single.p99_of_worst_gap_s == single.p50_of_worst_gap_s == pytest.approx(2.5)
    assert single.goodput == 0.0


def test_the_gaps_of_200_000_streams_are_measured_whole() -> None:
    kinds = np.full(2, int(EventKind.CONTENT), dtype=np.uint8)
    ones = np.ones(2, dtype=np.int32)
    runs = [
        Timeline(
            stream_id=f"s{k}",
            where=Where.CLIENT,
            times=np.array([100 * MS + k, 120 * MS + 2 * k], dtype=np.int64),
            tokens=ones,
            wire_bytes=ones,
            text_bytes=ones,
            kinds=kinds,
            _checked=True,
        )
        for k in range(200_000)
    ]
    fleet = fleet_metrics(stream_table(runs))  # (about 1 s on one core: not timed here)
    assert fleet.streams == 200_000
    assert fleet.stall_count == 0
    assert fleet.pooled_gap_max_s == pytest.approx((20 * MS + 199_999) / 1e9)


def test_bootstrap_draws_repeat_with_their_seed_and_are_exact_for_identical_streams() -> None:
    cfg = MetricConfig()
    same = [_stream([100, 120, 900], [1, 1, 1], stream_id=f"s{k}") for k in range(4)]
    table = stream_table(same, cfg)
    names = list(FLEET_CATALOGUE)
    first = fleet_draws(table, names, cfg, resamples=40, seed=11)
    again = fleet_draws(table, names, cfg, resamples=40, seed=11)
    for name in names:
        assert np.array_equal(first[name], again[name], equal_nan=True), name
    # every draw of identical streams is the run itself: a zero-width interval
    assert percentile_interval(first["p99_of_worst_gap_s"]) == (0.78, 0.78)
    assert percentile_interval(first["goodput"]) == (0.0, 0.0)
    one = stream_table(same[:1], cfg)
    assert percentile_interval(fleet_draws(one, ["streams"], cfg)["streams"]) == (1.0, 1.0)
    other = stream_table([same[0], _stream([100, 120, 140], [1, 1, 1], stream_id="x")], cfg)
    differ = fleet_draws(other, ["goodput"], cfg, resamples=200, seed=1)["goodput"]
    assert set(differ.tolist()) == {0.0, 0.5, 1.0}
    assert not np.array_equal(differ, fleet_draws(other, ["goodput"], cfg, seed=2)["goodput"])


@pytest.mark.parametrize("resamples", [-1, 2.5, True])
def test_bootstrap_refuses_a_count_of_draws_that_is_not_one(resamples: object) -> None:
    table = stream_table([_stream([100, 120], [1, 1])])
    with pytest.raises(ValueError, match=r"^resamples must be a whole number, 0 or more"):
        fleet_draws(table, ["goodput"], resamples=resamples)  # type: ignore[arg-type]


def test_fleet_counts_every_outcome_and_judges_goodput_by_the_docs() -> None:
    # Broken streams (error, truncated, client-stuck) are never good however smooth; a
    # cancelled or failed-over one is judged on what it delivered; all count in the tails.
    runs = [
        _stream([100, 120, 140], [1, 1, 1], stream_id=o.value).replace(outcome=o) for o in Outcome
    ]
    fleet = fleet_metrics(runs)
    assert fleet.outcomes == dict(Counter(o.value for o in Outcome))
    good = {Outcome.COMPLETE, Outcome.CANCELLED, Outcome.FAILED_OVER}
    assert fleet.goodput == pytest.approx(len(good) / len(Outcome))
    assert fleet.p99_of_worst_gap_s == pytest.approx(0.02)
