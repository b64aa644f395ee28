"""Bootstrap draws of fleet metrics: each statistic is its metric, draw by draw."""

from __future__ import annotations

import math

import numpy as np
import pytest

from steadystream import Outcome, Timeline
from steadystream.metrics import FLEET_CATALOGUE, MetricConfig, fleet_metrics, stream_table
from steadystream.metrics.bootstrap import fleet_draws, fleet_statistic, percentile_interval
from tests.support.timelines import make_timeline


def mixed_run() -> list[Timeline]:
    """Streams of every kind a fleet metric must handle: steady, frozen, one token (no gap),
    failed with nothing, slow to start, and several tokens a chunk."""
    rng = np.random.default_rng(7)
    run = []
    for k in range(17):
        times = np.cumsum(rng.uniform(10, 40, 30)) + rng.uniform(30, 1200)
        if k % 4 == 0:
            times[15:] += rng.uniform(300, 2000)  # a freeze
        run.append(make_timeline(times.tolist(), stream_id=f"m{k}", tokens=[1 + k % 3] * 30))
    run.append(make_timeline([50.0], stream_id="one-token"))
    run.append(make_timeline([], stream_id="failed", outcome=Outcome.ERROR))
    return run


def same(a: float | None, b: float) -> bool:
    return math.isnan(b) if a is None else math.isclose(a, b, rel_tol=1e-9, abs_tol=1e-15)


@pytest.mark.parametrize("name", list(FLEET_CATALOGUE))
def test_each_statistic_is_its_fleet_metric(name: str) -> None:
    config = MetricConfig()
    table = stream_table(mixed_run(), config)
    statistic = fleet_statistic(name, table, config)
    recorded = np.ones((1, len(table)), dtype=np.int64)
    assert same(fleet_metrics(table, config).scalars()[name], statistic(recorded)[0])
    # and on resampled draws: the metric of the streams drawn, each as often as drawn
    rng = np.random.default_rng(3)
    for _ in range(5):
        picks = rng.integers(0, len(table), len(table))
        counts = np.bincount(picks, minlength=len(table))[None, :]
        expected = fleet_metrics(table.take(picks), config).scalars()[name]
        assert same(expected, statistic(counts)[0]), name


def test_draws_are_repeatable_and_narrow_as_streams_grow() -> None:
    config = MetricConfig()
    small = stream_table(mixed_run(), config)
    first = fleet_draws(small, ["p99_of_worst_gap_s"], config, seed=5)["p99_of_worst_gap_s"]
    again = fleet_draws(small, ["p99_of_worst_gap_s"], config, seed=5)["p99_of_worst_gap_s"]
    assert np.array_equal(first, again, equal_nan=True)
    large = small.take(np.resize(np.arange(len(small)), 16 * len(small)))
    widths = []
    for table in (small, large):
        draws = fleet_draws(table, ["goodput"], config)["goodput"]
        interval = percentile_interval(draws)
        assert interval is not None
        widths.append(interval[1] - interval[0])
    assert widths[1] < widths[0] / 2  # 16 times the streams: about a quarter as wide


def test_a_metric_undefined_in_most_draws_has_no_interval() -> None:
    config = MetricConfig()
    one_token = [make_timeline([50.0], stream_id=f"t{k}") for k in range(5)]
    draws = fleet_draws(stream_table(one_token, config), ["p99_of_p99_s"], config)
    assert np.isnan(draws["p99_of_p99_s"]).all()  # no stream has a gap
    assert percentile_interval(draws["p99_of_p99_s"]) is None


def test_an_unknown_metric_is_refused_by_name() -> None:
    table = stream_table(mixed_run())
    with pytest.raises(KeyError, match="no_such_metric"):
        fleet_statistic("no_such_metric", table, MetricConfig())
