"""The live driver: backpressure, the upstream read, errors, cancellation (fake clock)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import pytest

from steadystream import Event, FakeClock, SpecError, Timeline, UpstreamStreamError
from steadystream.shaping import Leaky, Passthrough, Phrase, Reading, pace, simulate_run
from tests.support.shaping import MS, run_live, timed_source


class CountingSource:
    """An upstream that counts what was pulled and whether it was closed."""

    def __init__(self, events: list[Event], clock: FakeClock, *, fail_after: int | None = None):
        self.events = events
        self.clock = clock
        self.fail_after = fail_after
        self.pulled = 0
        self.closed = False
        self._iterator = self._run()

    async def _run(self) -> AsyncIterator[Event]:
        try:
            for index, event in enumerate(self.events):
                if index == self.fail_after:
                    raise UpstreamStreamError("connection reset mid-stream")
                await self.clock.sleep_until(event.time_ns)
                self.pulled += 1
                yield event
        finally:
            self.closed = True

    def __aiter__(self) -> CountingSource:
        return self

    async def __anext__(self) -> Event:
        return await anext(self._iterator)

    async def aclose(self) -> None:
        await self._iterator.aclose()


def burst(count: int, at_ns: int = 0) -> list[Event]:
    return [Event(at_ns, f" t{i}", 1) for i in range(count)]


@pytest.mark.asyncio
async def test_backpressure_pauses_the_read_and_matches_the_simulation() -> None:
    events = burst(100)
    pacer = Leaky(interval_ns=10 * MS, capacity=1000)
    released = await run_live(events, pacer, high_watermark=10, low_watermark=5)
    run = simulate_run(
        Timeline.from_events(events, stream_id="burst"),
        Leaky(interval_ns=10 * MS, capacity=1000),
        high_watermark=10,
        low_watermark=5,
    )
    assert run.paused > 0
    assert run.max_buffered <= 10
    assert [e.time_ns for e in released] == run.timeline.times.tolist()
    assert [e.text for e in released] == [f" t{i}" for i in range(100)]


@pytest.mark.asyncio
async def test_a_consumer_that_stops_reading_stops_the_upstream_read() -> None:
    clock = FakeClock()
    source = CountingSource(burst(1000), clock)
    pacer = Passthrough()
    paced = pace(source, pacer, clock, high_watermark=50, low_watermark=20)
    first = await anext(paced)
    assert first.text == " t0"
    for _ in range(5):
        await clock.run_until_idle()
        await asyncio.sleep(0)
    # The read stopped at the high watermark (one event of look-ahead in hand) although
    # 950 more events were ready.
    assert source.pulled <= 52
    assert pacer.buffered <= 50
    await paced.aclose()
    assert source.closed


@pytest.mark.asyncio
async def test_the_pacers_wait_does_not_hold_up_the_upstream_read() -> None:
    clock = FakeClock()
    events = [Event(i * MS, f" t{i}", 1) for i in range(10)]
    pacer = Leaky(interval_ns=1000 * MS, capacity=100)
    got: list[Event] = []

    async def consume() -> None:
        async for event in pace(timed_source(events, clock), pacer, clock):
            got.append(event)

    task = asyncio.create_task(consume())
    await clock.advance_to(9 * MS)
    # One token left at once; the other nine were read on arrival while the pacer waits.
    assert [e.text for e in got] == [" t0"]
    assert pacer.buffered == 9
    await clock.run_until_idle()
    await task
    assert len(got) == 10


@pytest.mark.asyncio
async def test_a_source_error_comes_after_what_was_buffered() -> None:
    clock = FakeClock()
    source = CountingSource([Event(i * MS, f" t{i}", 1) for i in range(5)], clock, fail_after=3)
    got: list[Event] = []

    async def consume() -> None:
        async for event in pace(source, Leaky(interval_ns=100 * MS), clock):
            got.append(event)

    task = asyncio.create_task(consume())
    await clock.run_until_idle()
    with pytest.raises(UpstreamStreamError, match="reset"):
        await task
    # Three tokens arrived; two were still held when the upstream failed and were drained
    # (tail 300 ms over 2 tokens, steps of 100 ms) before the error was raised.
    assert [e.text for e in got] == [" t0", " t1", " t2"]
    assert [e.time_ns for e in got] == [0, 100 * MS, 200 * MS]
    assert source.closed


@pytest.mark.asyncio
async def test_cancelling_the_consumer_closes_the_source() -> None:
    clock = FakeClock()
    source = CountingSource([Event(i * 100 * MS, f" t{i}", 1) for i in range(50)], clock)
    got: list[Event] = []

    async def consume() -> None:
        async for event in pace(source, Passthrough(), clock):
            got.append(event)

    task = asyncio.create_task(consume())
    await clock.advance_to(250 * MS)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert len(got) == 3
    assert source.closed
    assert clock.next_deadline is None  # no timer or reader left sleeping


@pytest.mark.asyncio
async def test_breaking_out_of_the_loop_closes_the_source() -> None:
    clock = FakeClock()
    source = CountingSource(burst(20), clock)
    paced = pace(source, Reading(), clock)
    async for event in paced:
        assert event.text == " t0"
        break
    await paced.aclose()
    assert source.closed


@pytest.mark.asyncio
async def test_watermarks_are_checked() -> None:
    clock = FakeClock()
    with pytest.raises(SpecError, match="low_watermark"):
        await anext(
            pace(timed_source([], clock), Passthrough(), clock, high_watermark=10, low_watermark=10)
        )
    with pytest.raises(SpecError, match="high_watermark"):
        await anext(pace(timed_source([], clock), Passthrough(), clock, high_watermark=0))
    # A phrase may wait for 29 tokens: a paused read would never bring its end.
    with pytest.raises(SpecError, match="low_watermark"):
        await anext(pace(timed_source([], clock), Phrase(cap=30), clock))


def test_a_pacer_refuses_input_after_close() -> None:
    pacer = Passthrough()
    pacer.close(0)
    with pytest.raises(RuntimeError, match="after close"):
        pacer.push(1, Event(1, "x", 1))
    assert pacer.done


@pytest.mark.asyncio
async def test_backpressure_counts_the_tokens_held_as_the_instant_began() -> None:
    # At 10 ms a wake-up releases B just as D arrives. Two tokens were held as the instant
    # began, so D makes three: the high watermark. The read pauses (whichever of the release
    # and the arrival is handled first) and E, held by the reader, goes in at 30 ms, when
    # the buffer is empty again.
    events = [
        Event(0, "A", 1),
        Event(1 * MS, "B", 1),
        Event(2 * MS, "C", 1),
        Event(10 * MS, "D", 1),
        Event(10 * MS, "E", 1),
    ]
    pacer = Leaky(interval_ns=10 * MS, capacity=100)
    run = simulate_run(
        Timeline.from_events(events, stream_id="edge"), pacer, high_watermark=3, low_watermark=0
    )
    assert run.paused == 1
    assert run.close_ns == 30 * MS
    assert run.timeline.times.tolist() == [0, 10 * MS, 20 * MS, 30 * MS, 40 * MS]
    released = await run_live(events, pacer.fresh(), high_watermark=3, low_watermark=0)
    assert [e.time_ns for e in released] == run.timeline.times.tolist()
