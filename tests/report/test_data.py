"""Chart data: checked against literal per-stream loops on small runs, and its size bounds."""

from __future__ import annotations

import numpy as np
import pytest

from steadystream import Event, EventKind, Timeline
from steadystream.metrics import fleet_metrics, stream_table
from steadystream.report.data import cdf, histogram, itl_band, stream_trace, ttft_bars
from steadystream.report.stall_map import stall_map
from tests.support.report import steady
from tests.support.timelines import make_timeline

MS = 1_000_000


def _literal_band(timelines: list[Timeline]) -> dict[int, list[float]]:
    """Gaps by position, one stream and one event at a time."""
    by_position: dict[int, list[float]] = {}
    for timeline in timelines:
        delivered = 0
        previous = None
        for time, tokens, kind in zip(timeline.times, timeline.tokens, timeline.kinds, strict=True):
            if EventKind(int(kind)).carries_text and tokens > 0:
                if previous is not None:
                    by_position.setdefault(delivered, []).append((time - previous) / 1e9)
                delivered += int(tokens)
                previous = time
    return by_position


def test_band_matches_a_literal_loop() -> None:
    rng = np.random.default_rng(3)
    runs = []
    for i in range(12):
        count = int(rng.integers(1, 40))
        times = np.cumsum(rng.uniform(5, 60, size=count)).tolist()
        tokens = rng.integers(1, 4, size=count).tolist()
        runs.append(make_timeline(times, stream_id=f"s{i}", tokens=tokens, usage_ms=times[-1] + 1))
    band = itl_band(runs)
    expected = _literal_band(runs)
    assert band.bin_width == 1
    assert band.position.tolist() == sorted(expected)
    for i, position in enumerate(band.position.tolist()):
        gaps = expected[position]
        assert band.gaps[i] == len(gaps)
        want = np.percentile(gaps, [50, 95, 99])
        assert [band.p50_s[i], band.p95_s[i], band.p99_s[i]] == pytest.approx(want)
    assert band.total_gaps == sum(len(g) for g in expected.values())


def test_band_bins_long_streams() -> None:
    long = steady("long", [20.0] * 999)
    band = itl_band([long, steady("short", [20.0] * 9)], max_bins=300)
    assert band.bin_width == 4
    assert len(band.position) <= 300
    assert band.position[0] == 1
    assert band.position[1] == 5
    assert int(band.gaps.sum()) == 999 + 9


def test_band_of_streams_without_gaps_is_empty() -> None:
    band = itl_band([steady("one", []), make_timeline([], stream_id="none")])
    assert band.total_gaps == 0
    assert len(band.position) == 0


def test_cdf_is_exact_for_small_runs_and_thinned_for_large() -> None:
    small = cdf(np.array([3.0, np.nan, 1.0, 2.0]))
    assert small.values.tolist() == [1.0, 2.0, 3.0]
    assert small.share.tolist() == pytest.approx([1 / 3, 2 / 3, 1.0])
    assert small.streams == 3
    values = np.random.default_rng(0).lognormal(size=100_000)
    large = cdf(values, max_points=500)
    assert len(large.values) == 500
    assert large.streams == 100_000
    assert large.values[-1] == values.max()
    assert np.all(np.diff(large.values) >= 0)
    assert np.isin(large.values, values).all()  # points of the data, not interpolations


def test_histogram_of_equal_values_is_one_bin() -> None:
    hist = histogram(np.array([4.0, 4.0, np.nan]))
    assert hist.counts.tolist() == [2]
    assert hist.edges[0] < 4.0 < hist.edges[1]
    assert histogram(np.array([np.nan])).values == 0


def test_trace_thinning_keeps_the_stall() -> None:
    gaps = [10.0] * 5000
    gaps[3000] = 2000.0
    trace = stream_trace(steady("long", gaps), max_points=200)
    assert len(trace.times_s) <= 200 + 1
    assert trace.points == 5001
    at = int(np.nanargmax(trace.gap_s))
    assert trace.gap_s[at] == pytest.approx(2.0)
    # The point before the stall is kept, so the curve is flat across it.
    assert trace.tokens[at] - trace.tokens[at - 1] == 1
    assert trace.times_s[at] - trace.times_s[at - 1] == pytest.approx(2.0)
    assert trace.tokens[-1] == 5001


def test_trace_carries_causes() -> None:
    events = [
        Event(0, "", 0, EventKind.ROLE),
        Event(100 * MS, "a", 1),
        Event(120 * MS, "b", 1),
        Event(900 * MS, "c", 1),
    ]
    timeline = Timeline.from_events(
        events, stream_id="lab-1", annotations={"cause": [None, None, None, "kv-preemption"]}
    )
    trace = stream_trace(timeline)
    assert trace.causes == [None, None, None, "kv-preemption"]
    assert trace.tokens.tolist() == [0, 1, 2, 3]


def _run(n: int, *, pause_every: int = 0) -> list[Timeline]:
    runs = []
    for i in range(n):
        gaps = [20.0] * 30
        if pause_every and i % pause_every == 0:
            gaps[15] = 1500.0
        runs.append(steady(f"s{i:04d}", gaps))
    return runs


def test_small_stall_map_draws_every_gap() -> None:
    runs = _run(5, pause_every=2)
    result = stall_map(runs, stream_table(runs))
    assert result.bars is not None
    assert result.grid is None
    assert result.rows == [f"s{i:04d}" for i in range(5)]
    assert len(result.bars.row) == 5 * 30 == result.gaps
    longest = int(np.argmax(result.bars.length_s))
    assert result.bars.length_s[longest] == pytest.approx(1.5)
    assert result.bars.position[longest] == 16  # 16 tokens delivered before the freeze
    assert result.bars.wait_length_s.tolist() == pytest.approx([0.1] * 5)
    assert "all 5 streams" in result.summary
    assert result.clock == "request"  # no wall-clock start recorded


def test_large_stall_map_keeps_the_worst_and_summarises() -> None:
    runs = _run(500, pause_every=50)
    table = stream_table(runs)
    result = stall_map(runs, table, max_rows=40, worst_rows=10, max_bars=500, bins=100)
    assert len(result.rows) == 40
    assert result.worst_kept == 10
    assert result.sampled == 30
    paused = {f"s{i:04d}" for i in range(0, 500, 50)}
    assert paused <= set(result.rows)  # all ten frozen streams made the cut
    assert result.bars is None
    assert result.grid is not None
    grid = result.grid
    assert grid.worst_s.shape == (40, 100)
    width = grid.edges_s[1] - grid.edges_s[0]
    row = result.rows.index("s0000")
    frozen = np.flatnonzero(np.isclose(grid.worst_s[row], 1.5))
    # The freeze covers every cell it spans, not just the one it ended in.
    assert len(frozen) >= int(1.5 // width)
    assert grid.position[row, frozen[0]] == 16
    assert "showing 40 of 500 streams" in result.summary
    assert "summarised" in result.summary


def test_stall_map_uses_wall_clock_when_streams_overlap() -> None:
    runs = _run(4)
    for i, timeline in enumerate(runs):
        timeline.started_at = 1_700_000_000.0 + 0.25 * i
    result = stall_map(runs, stream_table(runs))
    assert result.clock == "wall"
    assert result.bars is not None
    assert result.bars.wait_start_s.tolist() == pytest.approx([0.0, 0.25, 0.5, 0.75])


def test_stall_map_carries_causes() -> None:
    events = [Event(100 * MS, "a", 1), Event(120 * MS, "b", 1), Event(900 * MS, "c", 1)]
    timeline = Timeline.from_events(
        events, stream_id="lab-1", annotations={"cause": [None, None, "queueing"]}
    )
    result = stall_map([timeline], stream_table([timeline]))
    assert result.bars is not None
    assert result.bars.cause == [None, "queueing"]


def test_ttft_bars_fall_back_to_the_whole_run() -> None:
    runs = _run(3)
    bars = ttft_bars(fleet_metrics(runs))
    assert bars.groups == ["all streams"]
    assert bars.p50_s == [pytest.approx(0.1)]
    labelled = [
        make_timeline([50, 60], stream_id=f"t{i}", labels={"tenant": f"t{i}"}) for i in range(5)
    ]
    few = ttft_bars(fleet_metrics(labelled), max_groups=3)
    assert len(few.groups) == 3
    assert few.left_out == 2
