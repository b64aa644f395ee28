from __future__ import annotations

import asyncio

import pytest

from steadystream import FakeClock, MonotonicClock


@pytest.mark.asyncio
async def test_fake_clock_wakes_sleepers_in_deadline_order() -> None:
    clock = FakeClock()
    woke: list[tuple[str, int]] = []

    async def sleeper(name: str, at: int) -> None:
        await clock.sleep_until(at)
        woke.append((name, clock.now_ns()))

    tasks = [asyncio.create_task(sleeper(n, t)) for n, t in (("b", 300), ("a", 100), ("c", 200))]
    await clock.advance_to(250)
    assert woke == [("a", 100), ("c", 200)]
    assert clock.now_ns() == 250
    assert clock.next_deadline == 300
    await clock.run_until_idle()
    assert woke[-1] == ("b", 300)
    await asyncio.gather(*tasks)


@pytest.mark.asyncio
async def test_fake_clock_past_deadline_returns_at_once_and_time_never_goes_back() -> None:
    clock = FakeClock(start_ns=1_000)
    await clock.sleep_until(500)
    assert clock.now_ns() == 1_000
    with pytest.raises(ValueError, match="cannot go back"):
        await clock.advance_to(10)


@pytest.mark.asyncio
async def test_cancelled_sleeper_is_forgotten() -> None:
    clock = FakeClock()
    task = asyncio.create_task(clock.sleep_until(100))
    await asyncio.sleep(0)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert clock.next_deadline is None


@pytest.mark.asyncio
async def test_monotonic_clock_does_not_sleep_for_past_deadlines() -> None:
    clock = MonotonicClock()
    before = clock.now_ns()
    await clock.sleep_until(before - 1)
    assert clock.now_ns() >= before


@pytest.mark.asyncio
async def test_monotonic_clock_never_wakes_before_the_deadline() -> None:
    clock = MonotonicClock()
    for _ in range(20):
        deadline = clock.now_ns() + 300_000  # 0.3 ms: below the loop's timer resolution
        await clock.sleep_until(deadline)
        assert clock.now_ns() >= deadline
