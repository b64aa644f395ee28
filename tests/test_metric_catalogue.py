"""The catalogue of fleet metrics: one entry per result, read by every view."""

from __future__ import annotations

import dataclasses
import math
import typing

import pytest

from steadystream import SpecError
from steadystream._units import (
    format_count,
    format_number,
    format_seconds,
    format_share,
)
from steadystream.bench.gate import GateRule, gateable_metrics, show_value
from steadystream.metrics import (
    FLEET_CATALOGUE,
    RUN_SETTINGS,
    FleetMetrics,
    find_fleet_metric,
)


def _numeric_fields() -> set[str]:
    hints = typing.get_type_hints(FleetMetrics)
    numbers = {int, float, int | None, float | None}
    return {f.name for f in dataclasses.fields(FleetMetrics) if hints[f.name] in numbers}


def test_every_single_number_result_has_one_entry() -> None:
    assert set(FLEET_CATALOGUE) == _numeric_fields() - set(RUN_SETTINGS)
    assert set(RUN_SETTINGS) <= _numeric_fields()
    for name, info in FLEET_CATALOGUE.items():
        assert info.name == name
        assert all((info.label, info.header, info.note)), name
        assert (info.unit == "seconds") == name.endswith("_s"), name


def test_the_gate_gates_exactly_the_catalogue() -> None:
    assert gateable_metrics() == sorted(FLEET_CATALOGUE)
    for name, info in FLEET_CATALOGUE.items():
        if info.worse is None:
            with pytest.raises(SpecError, match="which way is worse"):
                GateRule.parse(f"{info.short_name}=10%")
        else:
            assert GateRule.parse(f"{info.short_name}=10%").worse == info.worse, name


@pytest.mark.parametrize(
    ("name", "better"),
    [
        ("p99_of_worst_gap_s", "lower"),
        ("goodput", "higher"),
        ("unstable_share", "lower"),
        ("qoe_mean", "higher"),
        ("fluidity_mean", "higher"),
        ("stalls_per_1k_tokens", "lower"),
        ("tokens_per_chunk_mean", None),
        ("streams", None),
    ],
)
def test_directions(name: str, better: str | None) -> None:
    assert FLEET_CATALOGUE[name].better == better


def test_values_are_shown_by_unit() -> None:
    assert FLEET_CATALOGUE["p99_of_p99_s"].show(0.0336) == "33.6ms"
    assert FLEET_CATALOGUE["p99_of_p99_s"].show(0.0336, narrow=True) == "34ms"
    assert FLEET_CATALOGUE["goodput"].show(0.875) == "87.5%"
    assert FLEET_CATALOGUE["goodput"].show(0.875, narrow=True) == "88%"
    assert FLEET_CATALOGUE["streams"].show(1250) == "1,250"
    assert FLEET_CATALOGUE["qoe_mean"].show(0.83456) == "0.835"
    assert FLEET_CATALOGUE["stalls_per_1k_tokens"].show(1.5) == "1.50"
    for info in FLEET_CATALOGUE.values():
        assert info.show(None) == "—"
        assert info.show(math.nan) == "—"
    assert show_value("goodput", 0.5) == "50.0%"  # the gate shows what the catalogue shows


def test_formatters() -> None:
    assert format_seconds(2.0) == "2.00s"
    assert format_seconds(0.00085) == "850µs"
    assert [format_seconds(v, narrow=True) for v in (0, 0.00085, 0.0042, 0.085, 2.813)] == [
        "0",
        "850µs",
        "4.2ms",
        "85ms",
        "2.81s",
    ]
    assert format_share(0.0123) == "1.2%"
    assert format_count(12345.0) == "12,345"
    assert format_number(1.23456, 3) == "1.235"
    assert format_seconds(None) == format_share(None) == format_number(None) == "—"


def test_names_are_found_with_or_without_their_seconds_suffix() -> None:
    assert find_fleet_metric("ttft_p95", option="--slo").name == "ttft_p95_s"
    assert find_fleet_metric("goodput", option="--slo").name == "goodput"
    with pytest.raises(SpecError, match=r"--slo: unknown metric 'jank'; known: .*p99_of_p99"):
        find_fleet_metric("jank", option="--slo")


def test_notes_take_the_run_settings() -> None:
    note = FLEET_CATALOGUE["goodput"].describe(threshold="250.0ms", target="1.00s")
    assert note == "streams with TTFT ≤ 1.00s and no gap above 250.0ms"
