"""The one hand-rolled histogram the lab and the gateway share: scalar and array paths agree."""

from __future__ import annotations

import numpy as np
import pytest
from prometheus_client import CollectorRegistry, generate_latest

from steadystream._histogram import FastHistogram, Histograms


def buckets_of(histogram: FastHistogram) -> dict[tuple[str, ...], list[float]]:
    family = histogram.collect()
    out: dict[tuple[str, ...], list[float]] = {}
    for sample in family.samples:
        if sample.name.endswith("_bucket"):
            key = tuple(v for k, v in sorted(sample.labels.items()) if k != "le")
            out.setdefault(key, []).append(sample.value)
    return out


def test_one_value_at_a_time_and_an_array_count_the_same() -> None:
    values = np.random.default_rng(3).exponential(0.05, 5_000)
    values[:5] = [0.01, 0.05, 0.1, 0.0, 10.0]  # on bounds, below, above
    one = FastHistogram("h", "doc", ("x",), (0.01, 0.05, 0.1))
    many = FastHistogram("h", "doc", ("x",), (0.01, 0.05, 0.1))
    series = one.labels("a")
    for value in values:
        series.observe(float(value))
    many.observe(("a",), values)
    assert buckets_of(one) == buckets_of(many)
    assert series.count == 5_000
    assert series.total == pytest.approx(float(values.sum()))


def test_exposed_through_a_registry_passed_in() -> None:
    registry = CollectorRegistry()
    histogram = FastHistogram("lab_h", "doc", ("engine",), (1.0,))
    registry.register(Histograms([histogram]))
    histogram.labels("e1").observe(0.5)
    text = generate_latest(registry).decode()
    assert 'lab_h_bucket{engine="e1",le="1.0"} 1.0' in text
    assert 'lab_h_count{engine="e1"} 1.0' in text
    with pytest.raises(ValueError, match="expected labels"):
        histogram.labels("e1", "extra")
