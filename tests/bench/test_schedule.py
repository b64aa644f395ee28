"""Arrival schedules and the dispatcher, in simulated time (FakeClock): no sleeps, exact."""

from __future__ import annotations

import asyncio
from pathlib import Path

import numpy as np
import pytest

from steadystream import FakeClock, InputError, SpecError
from steadystream.bench.schedule import (
    ClosedLoop,
    Dispatcher,
    OpenLoop,
    Schedule,
    Share,
    Ticket,
    TraceSchedule,
    read_trace,
    share_of,
)

MS = 1_000_000
S = 1_000_000_000


def offsets(schedule: OpenLoop, n: int) -> np.ndarray:
    it = schedule.offsets()
    return np.array([next(it) for _ in range(n)], dtype=np.int64)


# -- open loop: the arrival process ------------------------------------------------------------


def test_poisson_gaps_average_one_over_the_rate() -> None:
    times = offsets(OpenLoop(rate=50.0, seed=3), 20_000)
    gaps = np.diff(times) / S
    assert gaps.mean() == pytest.approx(1 / 50, rel=0.03)
    # exponential gaps: the coefficient of variation is 1
    assert gaps.std() / gaps.mean() == pytest.approx(1.0, rel=0.05)


@pytest.mark.parametrize("burstiness", [0.25, 4.0])
def test_burstiness_is_the_gamma_shape(burstiness: float) -> None:
    gaps = np.diff(offsets(OpenLoop(rate=10.0, burstiness=burstiness, seed=1), 20_000)) / S
    assert gaps.mean() == pytest.approx(0.1, rel=0.05)
    assert gaps.std() / gaps.mean() == pytest.approx(1 / np.sqrt(burstiness), rel=0.06)


def test_same_seed_same_arrivals_other_seed_other_arrivals() -> None:
    a = offsets(OpenLoop(rate=5.0, seed=7), 50)
    assert np.array_equal(a, offsets(OpenLoop(rate=5.0, seed=7), 50))
    assert not np.array_equal(a, offsets(OpenLoop(rate=5.0, seed=8), 50))


def test_ramp_grows_the_rate_linearly() -> None:
    # Rate climbs 0 -> 100/s over 10 s: 500 arrivals expected in the ramp, a quarter of them
    # in its first half (the area under a line), then 100/s. Averaged over seeds: a single
    # seed's count has a standard deviation of about 22.
    in_ramp, first_half, after = [], [], []
    for seed in range(20):
        times = offsets(OpenLoop(rate=100.0, seed=seed, ramp_ns=10 * S), 2600) / S
        in_ramp.append(int((times < 10).sum()))
        first_half.append(int((times < 5).sum()))
        after.append(int(((times >= 10) & (times < 20)).sum()))
    assert np.mean(in_ramp) == pytest.approx(500, rel=0.03)
    assert np.mean(first_half) == pytest.approx(125, rel=0.05)
    assert np.mean(after) == pytest.approx(1000, rel=0.03)


def test_open_loop_rejects_nonsense() -> None:
    with pytest.raises(SpecError, match="--rate"):
        OpenLoop(rate=0)
    with pytest.raises(SpecError, match="--burstiness"):
        OpenLoop(rate=1, burstiness=-1)
    with pytest.raises(SpecError, match="--concurrency"):
        ClosedLoop(0)


# -- the dispatcher on a fake clock ------------------------------------------------------------


class Recorder:
    """Consumes tickets, noting the clock time each was handed out."""

    def __init__(self, dispatcher: Dispatcher, clock: FakeClock) -> None:
        self.dispatcher = dispatcher
        self.clock = clock
        self.got: list[tuple[Ticket, int]] = []

    async def run(self) -> None:
        async for ticket in self.dispatcher.tickets():
            self.got.append((ticket, self.clock.now_ns()))


@pytest.mark.asyncio
async def test_closed_loop_sends_when_a_slot_frees() -> None:
    clock = FakeClock()
    dispatcher = Dispatcher(ClosedLoop(2), clock, max_requests=4)
    consumer = Recorder(dispatcher, clock)
    task = asyncio.create_task(consumer.run())
    await clock.advance(0)
    assert [t.index for t, _ in consumer.got] == [0, 1]  # both slots at once
    await clock.advance(30 * MS)
    dispatcher.release()  # request 0 (say) finished at 30 ms
    await clock.advance(0)
    assert consumer.got[2] == (Ticket(2, 30 * MS), 30 * MS)
    await clock.advance(20 * MS)
    dispatcher.release()
    await clock.advance(0)
    await task
    assert consumer.got[3] == (Ticket(3, 50 * MS), 50 * MS)
    assert dispatcher.issued == 4


@pytest.mark.asyncio
async def test_closed_loop_ramp_opens_slots_over_time() -> None:
    clock = FakeClock()
    dispatcher = Dispatcher(ClosedLoop(4, ramp_ns=2 * S), clock, max_requests=4)
    consumer = Recorder(dispatcher, clock)
    task = asyncio.create_task(consumer.run())
    await clock.run_until_idle()
    await task
    assert [at for _, at in consumer.got] == [0, S // 2, S, 3 * S // 2]
    assert [t.intended_ns for t, _ in consumer.got] == [0, S // 2, S, 3 * S // 2]


@pytest.mark.asyncio
async def test_open_loop_tickets_come_at_the_planned_offsets() -> None:
    schedule = OpenLoop(rate=20.0, seed=5)
    planned = offsets(schedule, 6)
    clock = FakeClock(start_ns=1_000)
    dispatcher = Dispatcher(schedule, clock, max_requests=6)
    consumer = Recorder(dispatcher, clock)
    task = asyncio.create_task(consumer.run())
    await clock.run_until_idle()
    await task
    assert [at - 1_000 for _, at in consumer.got] == planned.tolist()
    assert [t.intended_ns - 1_000 for t, _ in consumer.got] == planned.tolist()


@pytest.mark.asyncio
async def test_duration_stops_the_tickets() -> None:
    clock = FakeClock()
    schedule = OpenLoop(rate=10.0, seed=9)
    dispatcher = Dispatcher(schedule, clock, duration_ns=3 * S)
    consumer = Recorder(dispatcher, clock)
    task = asyncio.create_task(consumer.run())
    await clock.run_until_idle()
    await task
    expected = int((offsets(schedule, 200) < 3 * S).sum())
    assert len(consumer.got) == expected
    assert all(at < 3 * S for _, at in consumer.got)


@pytest.mark.asyncio
async def test_closed_loop_duration_ends_a_wait_for_a_slot() -> None:
    clock = FakeClock()
    dispatcher = Dispatcher(ClosedLoop(1), clock, duration_ns=S)
    consumer = Recorder(dispatcher, clock)
    task = asyncio.create_task(consumer.run())
    await clock.advance(0)
    assert len(consumer.got) == 1  # the one slot is busy and is never released
    await clock.advance(S)
    await task  # ended by the deadline, not by a release
    assert len(consumer.got) == 1


@pytest.mark.asyncio
async def test_a_cap_holds_open_loop_arrivals_and_counts_them() -> None:
    clock = FakeClock()
    schedule = OpenLoop(rate=100.0, seed=1, max_concurrency=1)
    planned = offsets(schedule, 2)
    dispatcher = Dispatcher(schedule, clock, max_requests=2)
    consumer = Recorder(dispatcher, clock)
    task = asyncio.create_task(consumer.run())
    await clock.advance_to(int(planned[1]) + 50 * MS)  # the second arrival is due, held back
    assert len(consumer.got) == 1
    assert dispatcher.waited_for_slot == 1
    dispatcher.release()
    await clock.advance(0)
    await task
    ticket, at = consumer.got[1]
    assert ticket.intended_ns == planned[1]  # the lag (at - intended) shows the hold-up
    assert at - ticket.intended_ns == 50 * MS


@pytest.mark.asyncio
async def test_stop_ends_a_waiting_dispatcher() -> None:
    clock = FakeClock()
    dispatcher = Dispatcher(OpenLoop(rate=0.001), clock, max_requests=10)
    consumer = Recorder(dispatcher, clock)
    task = asyncio.create_task(consumer.run())
    await clock.advance(0)
    dispatcher.stop()
    await asyncio.wait_for(task, timeout=5)
    assert consumer.got == []


def test_dispatcher_validates_its_limits() -> None:
    with pytest.raises(SpecError, match="--requests"):
        Dispatcher(ClosedLoop(1), FakeClock(), max_requests=0)
    with pytest.raises(SpecError, match="--duration"):
        Dispatcher(ClosedLoop(1), FakeClock(), duration_ns=0)


# -- trace files --------------------------------------------------------------------------------


def test_trace_reads_durations_and_timestamps(tmp_path: Path) -> None:
    path = tmp_path / "trace.txt"
    path.write_text('# arrivals\n1.5s\n\n1750ms\n{"timestamp": 2000}\n2.5\n')
    trace = read_trace(path)
    # starts at its first arrival
    assert list(trace.arrivals_ns) == [0, 250 * MS, 500 * MS, S]


@pytest.mark.asyncio
async def test_trace_drives_the_dispatcher_to_its_end(tmp_path: Path) -> None:
    path = tmp_path / "trace.txt"
    path.write_text("0\n100ms\n300ms\n")
    clock = FakeClock()
    dispatcher = Dispatcher(read_trace(path), clock)
    consumer = Recorder(dispatcher, clock)
    task = asyncio.create_task(consumer.run())
    await clock.run_until_idle()
    await task
    assert [at for _, at in consumer.got] == [0, 100 * MS, 300 * MS]


@pytest.mark.parametrize(
    ("content", "message"),
    [
        ("1s\n0.5s\n", "earlier than the line before"),
        ('{"timestamp": -3}\n', "non-negative 'timestamp'"),
        ("soon\n", "cannot read"),
        ("# nothing\n", "no arrival times"),
    ],
)
def test_bad_traces_name_the_line(tmp_path: Path, content: str, message: str) -> None:
    path = tmp_path / "t.txt"
    path.write_text(content)
    with pytest.raises(InputError, match=message):
        read_trace(path)


# -- one schedule shared by workers (bench --ray) ---------------------------------------------


async def tickets_of(schedule: Schedule, requests: int | None = None) -> list[tuple[int, int]]:
    """(index, offset from start) of every ticket; each request ends within 10 ms."""
    clock = FakeClock()
    dispatcher = Dispatcher(schedule, clock, max_requests=requests)
    recorder = Recorder(dispatcher, clock)
    task = asyncio.create_task(recorder.run())
    seen = 0
    while not task.done():
        await clock.advance(10 * MS)
        for _ in recorder.got[seen:]:
            asyncio.get_running_loop().call_soon(dispatcher.release)
        seen = len(recorder.got)
        if clock.now_ns() > 600 * S:
            dispatcher.stop()
    return [(t.index, at - (dispatcher.start_ns or 0)) for t, at in recorder.got]


def merged(parts: list[list[tuple[int, int]]]) -> list[tuple[int, int]]:
    return sorted(ticket for part in parts for ticket in part)


@pytest.mark.asyncio
@pytest.mark.parametrize(
    "schedule",
    [
        OpenLoop(rate=20.0, burstiness=0.5, seed=4, ramp_ns=2 * S),
        TraceSchedule(tuple(i * 37 * MS for i in range(25))),
    ],
    ids=["open-loop", "trace"],
)
async def test_shares_of_timed_arrivals_are_the_one_schedule(schedule: Schedule) -> None:
    requests = 25
    whole = await tickets_of(schedule, requests)
    for workers in (2, 3):
        parts = []
        for w in range(workers):
            share = Share(w, workers)
            part = await tickets_of(share_of(schedule, share), share.count_of(requests))
            assert all(index % workers == w for index, _ in part)
            parts.append(part)
        assert merged(parts) == whole  # the same requests, at the same offsets


@pytest.mark.asyncio
async def test_closed_loop_slots_and_their_ramp_are_split() -> None:
    schedule = ClosedLoop(5, ramp_ns=5 * S)
    shares = [share_of(schedule, Share(w, 2)) for w in range(2)]
    openings = [s.slot_openings() for s in shares if isinstance(s, ClosedLoop)]
    assert openings == [[0, 2 * S, 4 * S], [1 * S, 3 * S]]
    assert sorted(openings[0] + openings[1]) == schedule.slot_openings()
    first = await tickets_of(shares[0], 4)
    assert [index for index, _ in first] == [0, 2, 4, 6]


def test_a_cap_is_split_and_too_many_workers_are_refused() -> None:
    capped = OpenLoop(rate=5.0, max_concurrency=5)
    caps = [share_of(capped, Share(w, 3)).max_concurrency for w in range(3)]
    assert caps == [2, 2, 1]
    with pytest.raises(SpecError, match="--workers 3 is more than --concurrency 2"):
        share_of(ClosedLoop(2), Share(0, 3))
    with pytest.raises(SpecError, match="--concurrency cap 2"):
        share_of(OpenLoop(rate=1.0, max_concurrency=2), Share(2, 3))
    with pytest.raises(SpecError, match="worker 2 is not one of 2"):
        Share(2, 2)
