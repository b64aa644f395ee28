"""The stall watchdog: first-token and inter-token deadlines, on plain numbers and a FakeClock."""

from __future__ import annotations

import asyncio

import pytest

from steadystream import FakeClock
from steadystream.gateway.watchdog import StallKind, Watchdog

MS = 1_000_000


def make(first_token_ms: int = 1000, stall_ms: int = 300) -> Watchdog:
    return Watchdog(first_token_ns=first_token_ms * MS, stall_ns=stall_ms * MS)


def test_first_token_deadline_runs_from_the_request() -> None:
    watchdog = make()
    watchdog.start(100 * MS)
    assert watchdog.deadline() == 1100 * MS
    assert watchdog.expired(1099 * MS) is None
    assert watchdog.expired(1100 * MS) is StallKind.FIRST_TOKEN


def test_each_token_moves_the_stall_deadline() -> None:
    watchdog = make()
    watchdog.start(0)
    watchdog.token(50 * MS)
    assert watchdog.kind is StallKind.INTER_TOKEN
    assert watchdog.deadline() == 350 * MS
    watchdog.token(200 * MS)
    assert watchdog.expired(499 * MS) is None
    assert watchdog.expired(500 * MS) is StallKind.INTER_TOKEN


def test_no_deadline_after_the_upstream_finished() -> None:
    watchdog = make()
    watchdog.start(0)
    watchdog.token(10 * MS)
    watchdog.finish()
    assert watchdog.deadline() is None
    assert watchdog.expired(10_000 * MS) is None


def test_time_spent_not_reading_does_not_count() -> None:
    # A slow client filled the buffer: the relay stopped reading for 2 s. Not a stall.
    watchdog = make()
    watchdog.start(0)
    watchdog.token(100 * MS)
    watchdog.pause(200 * MS)
    assert watchdog.deadline() is None
    assert watchdog.expired(5_000 * MS) is None
    watchdog.resume(2_200 * MS)
    assert watchdog.deadline() == 2_400 * MS
    watchdog.resume(2_300 * MS)  # a second resume changes nothing
    assert watchdog.deadline() == 2_400 * MS


def test_timeouts_must_be_positive() -> None:
    with pytest.raises(ValueError, match="positive"):
        Watchdog(first_token_ns=0, stall_ns=1)


@pytest.mark.asyncio
async def test_a_guard_on_the_fake_clock_fires_exactly_at_the_stall() -> None:
    # The shape of the relay's guard loop: sleep to the deadline, re-read it, fire once due.
    clock = FakeClock()
    watchdog = make(first_token_ms=500, stall_ms=300)
    watchdog.start(clock.now_ns())
    fired: list[tuple[int, StallKind]] = []

    async def guard() -> None:
        while True:
            now = clock.now_ns()
            if (kind := watchdog.expired(now)) is not None:
                fired.append((now, kind))
                return
            deadline = watchdog.deadline()
            assert deadline is not None
            await clock.sleep_until(deadline)

    async def upstream() -> None:
        for t in (120, 150, 400):  # tokens; then silence
            await clock.sleep_until(t * MS)
            watchdog.token(clock.now_ns())

    tasks = [asyncio.ensure_future(guard()), asyncio.ensure_future(upstream())]
    await clock.run_until_idle()
    await asyncio.gather(*tasks)
    assert fired == [(700 * MS, StallKind.INTER_TOKEN)]


def test_a_waived_silence_runs_to_the_give_up_bound_then_rearms_on_a_token() -> None:
    watchdog = make()
    watchdog.start(0)
    watchdog.token(50 * MS)
    assert watchdog.expired(350 * MS) is StallKind.INTER_TOKEN
    watchdog.waive(give_up_ns=5_000 * MS)
    assert watchdog.waived
    assert watchdog.deadline() == 5_050 * MS
    assert watchdog.expired(5_049 * MS) is None
    assert watchdog.expired(5_050 * MS) is StallKind.INTER_TOKEN  # final: not waived twice
    watchdog.token(5_040 * MS)
    assert not watchdog.waived
    assert watchdog.deadline() == 5_340 * MS


def test_a_finished_watchdog_is_not_rearmed_by_a_waiver() -> None:
    watchdog = make()
    watchdog.start(0)
    watchdog.finish()
    watchdog.waive(give_up_ns=5_000 * MS)
    assert watchdog.deadline() is None
    watchdog.token(10 * MS)
    assert watchdog.deadline() is None
