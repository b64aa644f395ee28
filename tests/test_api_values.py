"""Values checked where they are given: thresholds, limits, durations, stop rules, clocks and
the exported configuration models each refuse a value that would give a silent wrong result
(NaN compares false with everything), naming the field."""

from __future__ import annotations

import asyncio
import math

import pytest

import steadystream as ss
from steadystream._units import parse_duration
from tests.support.timelines import paused_stream, steady_stream

NOT_FINITE = [math.nan, math.inf, -math.inf]


# -- thresholds and limits -----------------------------------------------------------------


@pytest.mark.parametrize("value", [*NOT_FINITE, 0, -1, True, "400ms", None])
@pytest.mark.parametrize("field", ["stall_threshold_ns", "ttft_target_ns", "head_window_ns"])
def test_metric_config_refuses_a_threshold_that_is_not_a_finite_number_above_0(
    field: str, value: object
) -> None:
    with pytest.raises(ValueError, match=f"^{field} must be a finite number"):
        ss.MetricConfig(**{field: value})  # type: ignore[arg-type]


@pytest.mark.parametrize("value", [*NOT_FINITE, 1, 0.5, True, "5"])
def test_metric_config_refuses_a_jitter_flag_that_is_not_a_finite_number_above_1(
    value: object,
) -> None:
    with pytest.raises(ValueError, match=r"^jitter_flag must be a finite number above 1"):
        ss.MetricConfig(jitter_flag=value)  # type: ignore[arg-type]


def test_metric_config_takes_finite_numbers() -> None:
    config = ss.MetricConfig(stall_threshold_ns=250_000_000, jitter_flag=2.5)
    assert config.stall_threshold_ns == 250_000_000
    assert ss.MetricConfig(stall_threshold_ns=2.5e8).stall_threshold_ns == 2.5e8


@pytest.mark.parametrize("value", [*NOT_FINITE, 0, -5, True, "400ms"])
def test_explain_refuses_a_threshold_that_is_not_a_finite_number_above_0(value: object) -> None:
    with pytest.raises(ValueError, match=r"^stall_threshold_ns must be a finite number"):
        ss.explain([paused_stream()], stall_threshold_ns=value)  # type: ignore[arg-type]


@pytest.mark.parametrize("value", [*NOT_FINITE, -1, True, "50ms"])
def test_what_if_refuses_a_limit_that_is_not_a_finite_number(value: object) -> None:
    with pytest.raises(ValueError, match=r"^max_added_ttft_ns must be a finite number"):
        ss.what_if(
            [steady_stream()],
            [ss.parse_pacer("adaptive")],
            max_added_ttft_ns=value,  # type: ignore[arg-type]
        )


def test_what_if_takes_a_limit_of_zero() -> None:
    result = ss.what_if([steady_stream()], [ss.parse_pacer("passthrough")], max_added_ttft_ns=0)
    assert result.max_added_ttft_ns == 0


# -- durations past 64-bit nanoseconds -----------------------------------------------------


def test_parse_duration_refuses_a_duration_past_int64_nanoseconds() -> None:
    with pytest.raises(ss.SpecError, match=r"^window: '99999999999999999999s' is longer"):
        parse_duration("99999999999999999999s", name="window")
    assert parse_duration("9223372036s") == 9_223_372_036_000_000_000 <= 2**63 - 1


@pytest.mark.parametrize(
    "spec",
    [
        "flush:window=99999999999999999999s",
        "leaky:interval=9300000000s",
        "leaky:tail=99999999999999999999s",
        "flush:window=9000000000s",  # fits 64 bits, but a release time past it would not
    ],
)
def test_parse_pacer_refuses_a_duration_too_long_to_release_at(spec: str) -> None:
    with pytest.raises(ss.SpecError, match=r"^(flush|leaky): (window|interval|tail)"):
        ss.parse_pacer(spec)


def test_the_longest_pacer_duration_simulates() -> None:
    from steadystream.shaping.base import MAX_DURATION_NS as MAX_PACER_NS

    pacer = ss.parse_pacer(f"flush:window={MAX_PACER_NS}ns")
    out = ss.simulate(steady_stream(), pacer)
    assert int(out.times.max()) >= MAX_PACER_NS


# -- stop rules and schedules --------------------------------------------------------------


@pytest.mark.parametrize("value", [*NOT_FINITE, 0, -1, 1.5e9, True])
def test_run_options_refuse_a_duration_that_is_not_whole_nanoseconds_above_0(
    value: object,
) -> None:
    with pytest.raises(ss.SpecError, match=r"^duration_ns \(--duration\)"):
        ss.RunOptions(duration_ns=value)  # type: ignore[arg-type]


@pytest.mark.parametrize("value", [0, -1, 2.5, math.nan, True])
def test_run_options_refuse_max_requests_that_is_not_a_whole_number_above_0(
    value: object,
) -> None:
    with pytest.raises(ss.SpecError, match=r"^max_requests \(--requests\)"):
        ss.RunOptions(max_requests=value)  # type: ignore[arg-type]


@pytest.mark.parametrize("value", [-1, math.nan, math.inf])
def test_run_options_refuse_a_grace_that_is_not_whole_nanoseconds(value: object) -> None:
    with pytest.raises(ss.SpecError, match=r"^grace_ns \(--grace\)"):
        ss.RunOptions(duration_ns=10**9, grace_ns=value)  # type: ignore[arg-type]


def test_run_options_take_whole_numbers() -> None:
    options = ss.RunOptions(max_requests=3, duration_ns=10**9, grace_ns=0)
    assert (options.max_requests, options.duration_ns, options.grace_ns) == (3, 10**9, 0)


@pytest.mark.parametrize("value", [2.5, 0, -1, True, "2"])
def test_closed_loop_refuses_a_concurrency_that_is_not_a_whole_number(value: object) -> None:
    with pytest.raises(ss.SpecError, match=r"^--concurrency must be a whole number"):
        ss.ClosedLoop(value)  # type: ignore[arg-type]


@pytest.mark.parametrize("value", [0.5, -1, math.nan])
def test_schedules_refuse_a_ramp_that_is_not_whole_nanoseconds(value: object) -> None:
    with pytest.raises(ss.SpecError, match=r"^--ramp"):
        ss.ClosedLoop(2, ramp_ns=value)  # type: ignore[arg-type]
    with pytest.raises(ss.SpecError, match=r"^--ramp"):
        ss.OpenLoop(1.0, ramp_ns=value)  # type: ignore[arg-type]


@pytest.mark.parametrize("value", ["10", True, math.nan])
def test_open_loop_refuses_a_rate_that_is_not_a_finite_number(value: object) -> None:
    with pytest.raises(ss.SpecError, match=r"^--rate"):
        ss.OpenLoop(value)  # type: ignore[arg-type]


# -- the fake clock ------------------------------------------------------------------------


@pytest.mark.parametrize("value", [math.nan, 1.5, -1, True])
def test_fake_clock_refuses_an_advance_that_is_not_whole_nanoseconds(value: object) -> None:
    async def main() -> None:
        clock = ss.FakeClock(10)
        with pytest.raises(ValueError, match=r"^delta_ns must be a whole number"):
            await clock.advance(value)  # type: ignore[arg-type]
        with pytest.raises(ValueError, match=r"^target_ns must be a whole number"):
            await clock.advance_to(value)  # type: ignore[arg-type]
        assert clock.now_ns() == 10

    asyncio.run(main())


def test_fake_clock_refuses_a_start_that_is_not_whole_nanoseconds() -> None:
    with pytest.raises(ValueError, match=r"^start_ns must be a whole number"):
        ss.FakeClock(0.5)  # type: ignore[arg-type]


def test_fake_clock_still_refuses_to_go_back() -> None:
    async def main() -> None:
        clock = ss.FakeClock(10)
        with pytest.raises(ValueError, match=r"time cannot go back"):
            await clock.advance_to(5)
        await clock.advance(0)
        assert clock.now_ns() == 10

    asyncio.run(main())


# -- the exported configuration models -----------------------------------------------------


@pytest.mark.parametrize(
    ("values", "key"),
    [
        ({"bogus": 1}, "key 'bogus': unknown key"),
        ({"label_min_ms": math.nan}, "key 'label_min_ms'"),
        ({"scheduler": {"step_base_ms": 0}}, "key 'scheduler.step_base_ms'"),
    ],
)
def test_scenario_refuses_a_bad_value_with_a_config_error_naming_the_key(
    values: dict[str, object], key: str
) -> None:
    with pytest.raises(ss.ConfigError, match=f"^Scenario: {key}"):
        ss.Scenario(**values)  # type: ignore[arg-type]


def test_scenario_is_still_a_pydantic_model() -> None:
    scenario = ss.Scenario(name="mine", label_min_ms=2.0)
    assert scenario.label_min_ms == 2.0
    assert ss.Scenario.model_validate(scenario.model_dump()) == scenario


def test_gateway_config_refuses_an_unknown_key_with_a_config_error() -> None:
    with pytest.raises(ss.ConfigError, match=r"^GatewayConfig: .*key 'bogus': unknown key"):
        ss.GatewayConfig(bogus=1)  # type: ignore[call-arg]


def test_gateway_config_is_still_a_pydantic_model() -> None:
    upstreams = [{"name": "a", "base_url": "http://127.0.0.1:9/v1"}]
    config = ss.GatewayConfig(upstreams=upstreams)  # type: ignore[arg-type]
    assert ss.GatewayConfig.model_validate({"upstreams": upstreams}) == config
    assert config.model_copy(update={"upstreams": ()}).upstreams == ()


@pytest.mark.parametrize("data", [None, ["upstreams"], "upstreams: []"])
def test_config_from_mapping_refuses_what_is_not_a_mapping(data: object) -> None:
    with pytest.raises(ss.ConfigError, match=r"^gateway config: a gateway configuration is a"):
        ss.config_from_mapping(data)  # type: ignore[arg-type]
