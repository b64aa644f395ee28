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


@pytest.mark.asyncio
async def test_fake_clock_wakes_a_future_at_its_deadline_or_forgets_it_once_done() -> None:
    clock = FakeClock()
    loop = asyncio.get_running_loop()
    late, poked, due = loop.create_future(), loop.create_future(), loop.create_future()
    clock.wake_at(300, late)
    clock.wake_at(100, poked)
    clock.wake_at(0, due)  # already due: resolved on the next turn of the loop
    poked.set_result(None)  # done by other means before its deadline
    await asyncio.sleep(0)
    assert due.done()
    await clock.advance_to(200)
    assert not late.done()
    assert clock.next_deadline == 300  # the poked future is gone from the heap
    await clock.advance_to(300)
    assert late.done()


@pytest.mark.asyncio
async def test_monotonic_clock_wakes_a_future_and_can_be_told_not_to() -> None:
    clock = MonotonicClock()
    loop = asyncio.get_running_loop()
    woken, cancelled = loop.create_future(), loop.create_future()
    start = clock.now_ns()
    clock.wake_at(start + 5_000_000, woken)
    clock.wake_at(start + 1_000_000, cancelled)()  # cancelled at once
    await woken
    assert clock.now_ns() - start >= 4_000_000  # (within the loop's clock resolution)
    await asyncio.sleep(0.01)
    assert not cancelled.done()
