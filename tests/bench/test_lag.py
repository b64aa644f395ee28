"""The client's self-check: loop-lag sampling on a fake clock, flags, health, progress."""

from __future__ import annotations

import asyncio

import pytest

from steadystream import FakeClock, Outcome
from steadystream.bench.health import client_health, token_notes
from steadystream.bench.lag import LoopLagSampler, lag_stats
from steadystream.bench.progress import RunProgress
from tests.support.timelines import make_timeline, reasoning_timeline

MS = 1_000_000


class LaggyClock:
    """A clock on which each wake-up is late by a scripted amount (a blocked event loop).

    Sleeps end at once, ``lags[deadline]`` late; past ``end`` the sleeper parks until
    cancelled, and :attr:`parked` is set.
    """

    def __init__(self, lags: dict[int, int], end: int) -> None:
        self.now = 0
        self.lags = lags
        self.end = end
        self.parked = asyncio.Event()

    def now_ns(self) -> int:
        return self.now

    async def sleep_until(self, deadline_ns: int) -> None:
        if deadline_ns > self.end:
            self.parked.set()
            await asyncio.Event().wait()
        self.now = max(self.now, deadline_ns + self.lags.get(deadline_ns, 0))
        await asyncio.sleep(0)


async def sampled(lags: dict[int, int], end: int) -> LoopLagSampler:
    clock = LaggyClock(lags, end)
    sampler = LoopLagSampler(clock, interval_ns=5 * MS)
    sampler.start()
    await asyncio.wait_for(clock.parked.wait(), timeout=5)
    await sampler.stop()
    return sampler


# The loop is blocked from 52 to 64 ms: the wake-up due at 55 ms comes 9 ms late.
BLOCK = {55 * MS: 9 * MS}


@pytest.mark.asyncio
async def test_sampler_measures_how_late_the_loop_woke() -> None:
    sampler = await sampled(BLOCK, end=100 * MS)
    stats = sampler.stats()
    assert stats.max_ms == pytest.approx(9.0)
    assert stats.p50_ms == 0
    assert stats.over_flag == 1
    # wake-ups at 5..55, then planned from the late one: 69..99, no catch-up burst
    assert sampler.samples == 11 + 7


@pytest.mark.asyncio
async def test_streams_open_during_the_block_see_it() -> None:
    sampler = await sampled(BLOCK, end=100 * MS)
    assert sampler.max_between(0, 54 * MS) == 0  # ended before the late wake-up was due
    assert sampler.max_between(0, 56 * MS) == 9 * MS
    assert sampler.max_between(60 * MS, 90 * MS) == 9 * MS  # open while the loop was blocked
    assert sampler.max_between(65 * MS, 100 * MS) == 0


def test_lag_stats_of_nothing() -> None:
    empty = lag_stats([])
    assert (empty.samples, empty.p99_ms, empty.max_ms) == (0, None, None)


def test_health_says_when_the_client_could_not_keep_up() -> None:
    ok = [make_timeline([10, 20], stream_id=str(i)) for i in range(200)]
    for t in ok:
        t.meta["client_lagged"] = False
    calm = lag_stats([1 * MS] * 100)
    good = client_health(ok, calm, calm)
    assert good.kept_up
    assert good.problems() == []
    assert "streams flagged (loop lag > 5 ms): 0 of 200" in good.lines()[0]

    for t in ok[:3]:  # 1.5 % of the streams
        t.meta["client_lagged"] = True
    late = lag_stats([1 * MS] * 90 + [30 * MS] * 10)
    bad = client_health(ok, late, late, waited_for_slot=4)
    problems = " ".join(bad.problems())
    assert not bad.kept_up
    assert "3 of 200 streams" in problems
    assert "scheduling lag p99 30.00 ms" in problems
    assert "4 arrivals waited for a free slot" in problems


def test_a_closed_loops_scheduling_lag_is_reported_not_judged() -> None:
    streams = [make_timeline([10, 20], stream_id=str(i)) for i in range(10)]
    calm, late = lag_stats([1 * MS] * 100), lag_stats([30 * MS] * 100)
    closed = client_health(streams, calm, late, timed_arrivals=False)
    assert closed.kept_up
    assert "scheduling lag p50 30.00 ms" in closed.lines()[0]
    assert not client_health(streams, calm, late, timed_arrivals=True).kept_up


def test_token_notes_say_where_counts_came_from() -> None:
    notes = token_notes({"usage-one-per-event": 8, "estimated": 2})
    assert notes[0].startswith("token counts of 8 of 10 streams: from the final usage total")
    assert "estimated from the text" in notes[1]


def test_progress_keeps_the_running_headline_numbers() -> None:
    clock = FakeClock()
    progress = RunProgress(clock)
    progress.started()
    smooth = make_timeline([100 + 20 * i for i in range(20)], stream_id="a")
    frozen = make_timeline([100, 120, 900, 920], stream_id="b")
    failed = make_timeline([], stream_id="c", outcome=Outcome.ERROR)
    failed.error = "HTTP 500"
    for timeline in (smooth, frozen, failed):
        progress.request_sent()
        progress.request_done(timeline)
    snap = progress.snapshot()
    assert (snap.sent, snap.in_flight, snap.finished, snap.errors) == (3, 0, 3, 1)
    assert snap.goodput == pytest.approx(1 / 3)  # the frozen and the failed ones are not good
    assert snap.p99_of_worst_gap_s == pytest.approx(0.780, abs=0.02)
    assert snap.first_error == "c: HTTP 500"


def test_progress_takes_ttft_on_the_answer_as_the_fleet_does() -> None:
    progress = RunProgress(FakeClock())
    progress.started()
    thinker = reasoning_timeline([100, 120], [1000, 1020])  # TTFT 1 s, above the 800 ms target
    progress.request_sent()
    progress.request_done(thinker)
    snap = progress.snapshot()
    assert snap.ttft_p95_s == pytest.approx(1.0)
    assert snap.goodput == 0.0
