"""Backpressure: the bounded buffer and the stuck-client rule."""

from __future__ import annotations

import asyncio

import pytest

from steadystream import FakeClock
from steadystream.gateway.buffer import StreamBuffer, StuckClient

MS = 1_000_000


@pytest.mark.asyncio
async def test_put_waits_while_full_and_the_peak_is_bounded() -> None:
    buffer: StreamBuffer[str] = StreamBuffer(max_bytes=100, max_events=10)
    await buffer.put("a", 60)
    blocked = asyncio.ensure_future(buffer.put("b", 60))
    await asyncio.sleep(0)
    assert not blocked.done()  # 120 bytes would not fit
    assert buffer.waits == 1
    assert await buffer.get() == "a"
    await blocked
    assert buffer.peak_bytes == 60
    assert buffer.bytes == 60


@pytest.mark.asyncio
async def test_event_count_is_bounded_too() -> None:
    buffer: StreamBuffer[int] = StreamBuffer(max_bytes=10_000, max_events=2)
    await buffer.put(1, 1)
    await buffer.put(2, 1)
    assert not buffer.has_room(1)
    third = asyncio.ensure_future(buffer.put(3, 1))
    await asyncio.sleep(0)
    assert not third.done()
    assert await buffer.get() == 1
    await third
    assert len(buffer) == 2


@pytest.mark.asyncio
async def test_one_large_item_is_let_in_alone() -> None:
    buffer: StreamBuffer[str] = StreamBuffer(max_bytes=10, max_events=5)
    await asyncio.wait_for(buffer.put("big", 1000), timeout=1)
    assert buffer.peak_bytes == 1000
    assert not buffer.has_room(1)


@pytest.mark.asyncio
async def test_get_waits_and_close_ends_after_the_rest() -> None:
    buffer: StreamBuffer[str] = StreamBuffer(max_bytes=100, max_events=10)
    getter = asyncio.ensure_future(buffer.get())
    await asyncio.sleep(0)
    assert not getter.done()
    await buffer.put("x", 1)
    assert await getter == "x"
    await buffer.put("y", 1)
    buffer.close()
    assert await buffer.get() == "y"
    assert await buffer.get() is None
    with pytest.raises(RuntimeError, match="closed"):
        await buffer.put("z", 1)


def test_offer_only_into_an_empty_buffer() -> None:
    buffer: StreamBuffer[str] = StreamBuffer(max_bytes=100, max_events=10)
    assert buffer.offer("keepalive", 13)
    assert not buffer.offer("keepalive", 13)  # data is waiting: no keepalive needed
    buffer.close()
    assert not buffer.offer("late", 1)


def test_bounds_are_checked() -> None:
    with pytest.raises(ValueError, match="at least one"):
        StreamBuffer(max_bytes=0, max_events=1)
    with pytest.raises(ValueError, match="positive"):
        StuckClient(0)


@pytest.mark.asyncio
async def test_a_write_pending_for_the_stuck_timeout_is_a_stuck_client() -> None:
    clock = FakeClock()
    stuck = StuckClient(1000 * MS)
    assert stuck.next_check(0) == 250 * MS  # nothing pending: look again in a quarter
    await clock.advance(100 * MS)
    stuck.sending(clock.now_ns())
    assert stuck.next_check(clock.now_ns()) == 350 * MS  # a quarter: to see it drain
    stuck.observe(clock.now_ns(), None)  # the server cannot tell: the pending write counts
    await clock.advance_to(1099 * MS)
    assert stuck.next_check(clock.now_ns()) == 1100 * MS
    assert not stuck.stuck(clock.now_ns())
    await clock.advance_to(1100 * MS)
    assert stuck.stuck(clock.now_ns())
    stuck.sent()
    assert not stuck.stuck(clock.now_ns())


@pytest.mark.asyncio
async def test_events_not_reads_fill_the_buffer() -> None:
    buffer: StreamBuffer[str] = StreamBuffer(max_bytes=10_000, max_events=5)
    await buffer.put("read of three events", 30, 3)
    assert buffer.events == 3
    assert buffer.has_room(10, 2)
    assert not buffer.has_room(10, 3)
    await buffer.get()
    assert buffer.events == 0


def test_a_half_event_held_outside_counts_in_the_peak() -> None:
    buffer: StreamBuffer[str] = StreamBuffer(max_bytes=100, max_events=10)
    buffer.offer("x", 40)
    buffer.hold(5_000_000)
    assert buffer.peak_bytes == 5_000_040


@pytest.mark.asyncio
async def test_a_slow_reader_that_drains_is_not_stuck() -> None:
    # 2 KB/s against a pending 64 KiB write: the write takes longer than the timeout, but the
    # connection's unsent bytes fall at every look, so the client is reading.
    clock = FakeClock()
    stuck = StuckClient(1000 * MS)
    stuck.sending(0)
    unsent = 65_536
    for _ in range(40):  # 10 s in quarter-timeout looks
        await clock.advance_to(stuck.next_check(clock.now_ns()))
        unsent -= 500
        stuck.observe(clock.now_ns(), unsent)
        assert not stuck.stuck(clock.now_ns())
    # Then it stops reading: cut between one and 1.25 timeouts after its last drain.
    drained_at = clock.now_ns()
    while not stuck.stuck(clock.now_ns()):
        await clock.advance_to(stuck.next_check(clock.now_ns()))
        stuck.observe(clock.now_ns(), unsent)
    assert 1000 * MS <= clock.now_ns() - drained_at <= 1250 * MS
