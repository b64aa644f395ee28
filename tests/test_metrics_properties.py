"""Property tests: the vectorised metrics equal a slow per-stream loop on any input."""

from __future__ import annotations

import math

import numpy as np
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from steadystream import Event, EventKind, Timeline
from steadystream.metrics import STREAM_COLUMNS, MetricConfig, fleet_metrics, stream_table
from steadystream.metrics.segments import lindley, segment_percentiles, segment_running_max
from tests.metrics_reference import reference

MS = 1_000_000

kinds = st.sampled_from(
    [EventKind.CONTENT] * 5
    + [EventKind.REASONING] * 2
    + [EventKind.TOOL_CALL, EventKind.ROLE, EventKind.USAGE, EventKind.KEEPALIVE]
)


@st.composite
def timelines(draw: st.DrawFn, index: int = 0) -> Timeline:
    n = draw(st.integers(0, 40))
    gaps = draw(
        st.lists(st.sampled_from([0, 1, 5, 10, 20, 50, 120, 401, 2500]), min_size=n, max_size=n)
    )
    start = draw(st.integers(0, 1500))
    events, t = [], start * MS
    for gap in gaps:
        t += gap * MS + draw(st.integers(0, 999))
        kind = draw(kinds)
        tokens = draw(st.integers(1, 4)) if kind.carries_text else 0
        events.append(Event(t, "ab" * tokens, tokens, kind, draw(st.integers(0, 300))))
    return Timeline.from_events(events, stream_id=f"s{index}")


configs = st.builds(
    MetricConfig,
    stall_threshold_ns=st.sampled_from([50 * MS, 400 * MS]),
    qoe_expected_ttft_ns=st.sampled_from([100 * MS, 1000 * MS]),
    qoe_pace_ns_per_token=st.sampled_from([20 * MS, 100 * MS]),
    qoe_form=st.sampled_from(["exact", "discrete"]),
    fluidity_form=st.sampled_from(["documented", "code"]),
)


def close(a: float | None, b: float | None) -> bool:
    if a is None or b is None or (isinstance(a, float) and math.isnan(a)):
        return (a is None or math.isnan(a)) and b is None
    return math.isclose(a, b, rel_tol=1e-9, abs_tol=1e-12)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(timelines(), min_size=1, max_size=8), configs)
def test_vectorised_equals_reference(runs: list[Timeline], cfg: MetricConfig) -> None:
    table = stream_table(runs, cfg)
    for i, tl in enumerate(runs):
        expected = reference(tl, cfg)
        for name in STREAM_COLUMNS:
            got = float(table.column(name)[i])
            assert close(got, expected[name]), (name, i, got, expected[name])


@settings(max_examples=80, deadline=None)
@given(st.lists(timelines(), min_size=1, max_size=8))
def test_fleet_headlines_equal_percentiles_of_stream_values(runs: list[Timeline]) -> None:
    fleet = fleet_metrics(runs)
    worst = [reference(t, MetricConfig())["max_gap_s"] for t in runs]
    defined = [w for w in worst if w is not None]
    if defined:
        assert close(fleet.p99_of_worst_gap_s, float(np.percentile(defined, 99)))
    else:
        assert fleet.p99_of_worst_gap_s is None


@settings(max_examples=200, deadline=None)
@given(st.lists(st.lists(st.integers(-(10**12), 10**12), max_size=30), max_size=12))
def test_segment_helpers_equal_loops(segments: list[list[int]]) -> None:
    counts = np.array([len(s) for s in segments], dtype=np.int64)
    values = np.array([v for s in segments for v in s], dtype=np.int64)
    pct = segment_percentiles(values, counts, [0, 50, 99, 100])
    running = segment_running_max(values, counts)
    before, after = lindley(values // 10**6, counts)
    pos = 0
    for i, seg in enumerate(segments):
        if seg:
            assert np.array_equal(
                pct[i], np.percentile(np.array(seg, dtype=np.int64), [0, 50, 99, 100])
            )
            assert list(running[pos : pos + len(seg)]) == list(np.maximum.accumulate(seg))
            level = 0
            for j, step in enumerate(v // 10**6 for v in seg):
                assert before[pos + j] == level
                level = max(0, level + step)
                assert after[pos + j] == level
        else:
            assert np.isnan(pct[i]).all()
        pos += len(seg)
