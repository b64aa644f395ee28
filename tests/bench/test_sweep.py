"""Sweeps: plans, objectives, the answer, the search, and the cooldown on a fake clock."""

from __future__ import annotations

import asyncio

import pytest

from steadystream import FakeClock, SpecError
from steadystream.bench.sweep import Objective, SweepPlan, run_sweep
from steadystream.metrics import FleetMetrics, fleet_metrics
from tests.support.timelines import make_timeline

S = 1_000_000_000


def fleet(goodput_share: float, ttft_ms: float = 100.0) -> FleetMetrics:
    """Ten streams: the first ``goodput_share`` of them smooth, the rest with a 1 s freeze."""
    smooth = round(goodput_share * 10)
    streams = []
    for k in range(10):
        freeze = 0.0 if k < smooth else 1000.0
        times = [ttft_ms + 20 * i + (freeze if i >= 5 else 0) for i in range(10)]
        streams.append(make_timeline(times, stream_id=str(k)))
    return fleet_metrics(streams)


def capacity_model(limit: float):  # type: ignore[no-untyped-def]
    """A stack that meets the SLO up to ``limit``, and a log of the loads asked for."""
    asked: list[float] = []

    async def measure(load: float) -> tuple[FleetMetrics, bool]:
        asked.append(load)
        return fleet(1.0 if load <= limit else 0.5), True

    return measure, asked


def test_plans_parse() -> None:
    assert SweepPlan.parse("rates=1,2,4,8").loads == (1, 2, 4, 8)
    assert SweepPlan.parse("rate=8,2,2").loads == (2, 8)  # sorted, once each
    search = SweepPlan.parse("rates=search:0.5-32")
    assert (search.dimension, search.search) == ("rate", (0.5, 32))
    assert SweepPlan.parse("concurrency=1,4,16").dimension == "concurrency"


@pytest.mark.parametrize(
    "text", ["rates=", "speed=1,2", "rates=1,-2", "concurrency=1.5", "rates=search:4-2"]
)
def test_bad_plans_are_refused(text: str) -> None:
    with pytest.raises(SpecError, match="--sweep"):
        SweepPlan.parse(text)


def test_objectives_parse_and_judge() -> None:
    good = Objective.parse("goodput>=99%")
    assert (good.metric, good.at_least, good.value) == ("goodput", True, 0.99)
    ttft = Objective.parse("ttft_p95<=800ms")
    assert ttft.metric == "ttft_p95_s"
    assert ttft.value == pytest.approx(0.8)
    assert good.met(fleet(1.0))
    assert not good.met(fleet(0.9))
    assert ttft.met(fleet(1.0, ttft_ms=700))
    assert not ttft.met(fleet(1.0, ttft_ms=900))
    assert "needs >= 99.0%" in good.describe(fleet(0.9))
    with pytest.raises(SpecError, match="unknown metric"):
        Objective.parse("speed>=3")
    with pytest.raises(SpecError, match="cannot read"):
        Objective.parse("goodput=99%")


@pytest.mark.parametrize(
    ("text", "needle"),
    [
        ("goodput>=150%", "a share from 0% to 100%"),  # no run could meet it
        ("goodput>=-0.5", "a share from 0% to 100%"),  # every run would
        ("goodput>=nan", "no number"),
        ("unstable_share<=inf%", "no number"),
        ("ttft_p95<=5%", "as a duration"),  # (it was read as 50 ms)
        ("qoe_mean>=80%", "no share"),
        ("stall_count<=-1", "is a count"),
    ],
)
def test_an_objective_no_run_could_meet_or_fail_is_refused(text: str, needle: str) -> None:
    with pytest.raises(SpecError, match="--slo") as refused:
        Objective.parse(text)
    assert needle in str(refused.value)


@pytest.mark.asyncio
async def test_a_list_finds_the_highest_load_below_the_first_miss() -> None:
    measure, asked = capacity_model(limit=4)
    result = await run_sweep(
        SweepPlan.parse("rates=1,2,4,8,16"),
        [Objective.parse("goodput>=99%")],
        measure,
        clock=FakeClock(),
    )
    assert asked == [1, 2, 4, 8, 16]
    assert [p.passed for p in result.points] == [True, True, True, False, False]
    assert result.answer == 4
    assert "goodput 50.0%" in result.points[3].misses[0]


@pytest.mark.asyncio
async def test_a_pass_above_a_miss_is_noise_not_capacity() -> None:
    outcomes = {1: 1.0, 2: 0.5, 4: 1.0}

    async def measure(load: float) -> tuple[FleetMetrics, bool]:
        return fleet(outcomes[int(load)]), True

    result = await run_sweep(
        SweepPlan.parse("rates=1,2,4"),
        [Objective.parse("goodput>=99%")],
        measure,
        clock=FakeClock(),
    )
    assert result.answer == 1
    assert result.noisy


@pytest.mark.asyncio
async def test_search_doubles_then_bisects_to_the_precision() -> None:
    measure, asked = capacity_model(limit=11)
    result = await run_sweep(
        SweepPlan.parse("rates=search:1-64"),
        [Objective.parse("goodput>=99%")],
        measure,
        clock=FakeClock(),
    )
    assert asked[:5] == [1, 2, 4, 8, 16]  # doubling until the first miss
    assert asked[5:] == [12, 10, 11]  # then halving the interval [8, 16]
    answer = result.answer
    assert answer is not None
    assert 10 <= answer <= 11


@pytest.mark.asyncio
async def test_concurrency_search_stops_at_one_stream() -> None:
    measure, asked = capacity_model(limit=5)
    result = await run_sweep(
        SweepPlan.parse("concurrency=search:1-100"),
        [Objective.parse("goodput>=99%")],
        measure,
        clock=FakeClock(),
    )
    assert result.answer == 5
    assert all(load == int(load) for load in asked)


@pytest.mark.asyncio
async def test_search_that_never_fails_answers_the_upper_bound() -> None:
    measure, asked = capacity_model(limit=1000)
    result = await run_sweep(
        SweepPlan.parse("rates=search:1-6"),
        [Objective.parse("goodput>=99%")],
        measure,
        clock=FakeClock(),
    )
    assert asked == [1, 2, 4, 6]
    assert result.answer == 6


@pytest.mark.asyncio
async def test_search_that_fails_at_once_has_no_answer() -> None:
    measure, asked = capacity_model(limit=0.1)
    result = await run_sweep(
        SweepPlan.parse("rates=search:1-64"),
        [Objective.parse("goodput>=99%")],
        measure,
        clock=FakeClock(),
    )
    assert asked == [1]
    assert result.answer is None


@pytest.mark.asyncio
async def test_loads_run_back_to_back_with_a_cooldown_between() -> None:
    clock = FakeClock()
    started: list[int] = []

    async def measure(load: float) -> tuple[FleetMetrics, bool]:
        started.append(clock.now_ns())
        await clock.sleep_until(clock.now_ns() + 10 * S)  # each load runs 10 s
        return fleet(1.0), load < 4  # the client lagged at 4

    task = asyncio.create_task(
        run_sweep(
            SweepPlan.parse("rates=1,2,4"),
            [Objective.parse("goodput>=99%")],
            measure,
            clock=clock,
            cooldown_ns=3 * S,
        )
    )
    await clock.run_until_idle()
    result = await task
    assert started == [0, 13 * S, 26 * S]
    assert clock.now_ns() == 36 * S
    assert [p.client_kept_up for p in result.points] == [True, True, False]


@pytest.mark.asyncio
async def test_a_sweep_needs_an_objective() -> None:
    measure, _ = capacity_model(limit=1)
    with pytest.raises(SpecError, match="--slo"):
        await run_sweep(SweepPlan.parse("rates=1"), [], measure, clock=FakeClock())
