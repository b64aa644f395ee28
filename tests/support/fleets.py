"""Random fleets of every shape, and the check that two stream tables are the same table."""

from __future__ import annotations

import numpy as np

from steadystream import Outcome, Timeline
from steadystream.metrics import STREAM_COLUMNS, MetricConfig, StreamTable
from tests.support.timelines import make_timeline

CONFIG = MetricConfig(stall_threshold_ns=300_000_000)


def random_fleet(count: int, seed: int) -> list[Timeline]:
    """Streams of every shape: lengths 0 to 300, stalls, multi-token chunks, outcomes, labels."""
    rng = np.random.default_rng(seed)
    fleet = []
    for i in range(count):
        n = int(rng.integers(0, 300))
        gaps = rng.gamma(0.6, 30.0, n) + np.where(rng.random(n) < 0.01, 900.0, 0.0)
        times = (rng.uniform(50, 900) + np.cumsum(gaps)).tolist()
        fleet.append(
            make_timeline(
                times,
                stream_id=f"r{seed}-{i}",
                tokens=rng.integers(1, 4, n).tolist(),
                outcome=Outcome.ERROR if rng.random() < 0.05 else Outcome.COMPLETE,
                labels={"tenant": str(rng.choice(["acme", "globex", ""]))},
                wire_bytes=int(rng.integers(20, 200)),
            )
        )
    return fleet


def assert_same_table(got: StreamTable, want: StreamTable) -> None:
    assert got.stream_ids == want.stream_ids
    assert got.outcomes == want.outcomes
    assert got.labels == want.labels
    assert (got.token_sources, got.wheres) == (want.token_sources, want.wheres)
    for name in STREAM_COLUMNS:
        np.testing.assert_array_equal(got.column(name), want.column(name), err_msg=name)
    np.testing.assert_array_equal(got.gap_values_s, want.gap_values_s)
    np.testing.assert_array_equal(got.gap_counts, want.gap_counts)
