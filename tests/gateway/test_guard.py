"""The real :class:`Guard` loop on a FakeClock: deadlines fire exactly when due, nowhere else.

The guard gets its hooks, never a relay, so each test builds a small fake stream: a
watchdog, a flag for "a token was committed", and lists of what the guard did.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field

import pytest

from steadystream import FakeClock
from steadystream.gateway.buffer import StuckClient
from steadystream.gateway.events import Failure
from steadystream.gateway.failover import Cause
from steadystream.gateway.guard import Guard, GuardHooks
from steadystream.gateway.watchdog import StallKind, Watchdog

MS = 1_000_000


@dataclass
class FakeStream:
    clock: FakeClock
    watchdog: Watchdog | None = None
    first_token: bool = False
    waits_out: bool = False
    unsent: int | None = None
    keepalives: list[int] = field(default_factory=list)
    stops: list[tuple[int, Failure]] = field(default_factory=list)
    stalls: list[tuple[int, StallKind]] = field(default_factory=list)
    cuts: list[tuple[int, str]] = field(default_factory=list)

    def hooks(self) -> GuardHooks:
        now = self.clock.now_ns
        return GuardHooks(
            watchdog=lambda: self.watchdog,
            first_token=lambda: self.first_token,
            keepalive=lambda: self.keepalives.append(now()),
            waits_out_stall=lambda: self.waits_out,
            stop_read=self._stop,
            count_stall=lambda kind: self.stalls.append((now(), kind)),
            cut_client=lambda reason: self.cuts.append((now(), reason)),
            unsent=lambda: self.unsent,
        )

    def _stop(self, failure: Failure) -> None:
        self.stops.append((self.clock.now_ns(), failure))
        self.watchdog = None  # the reader is stopped: nothing more to watch

    def token(self) -> None:
        assert self.watchdog is not None
        self.watchdog.token(self.clock.now_ns())
        self.first_token = True


def make_guard(
    stream: FakeStream, *, stuck_ms: int = 60_000, keepalive_ms: int = 15_000, give_up_ms: int = 0
) -> tuple[Guard, StuckClient]:
    stuck = StuckClient(stuck_ms * MS)
    guard = Guard(
        stream.clock,
        stuck,
        stream.hooks(),
        keepalive_ns=keepalive_ms * MS,
        give_up_ns=(give_up_ms or 30_000) * MS,
    )
    return guard, stuck


def watchdog(clock: FakeClock, *, first_ms: int = 500, stall_ms: int = 300) -> Watchdog:
    dog = Watchdog(first_token_ns=first_ms * MS, stall_ns=stall_ms * MS, finish_ns=2_000 * MS)
    dog.start(clock.now_ns())
    return dog


async def started(guard: Guard) -> asyncio.Task[None]:
    task = asyncio.ensure_future(guard.run())
    await asyncio.sleep(0)
    return task


async def token_at(clock: FakeClock, stream: FakeStream, guard: Guard, ms: int) -> None:
    """A token arrives at ``ms``; the reader pokes the guard as the relay's does."""
    await clock.advance_to(ms * MS)
    stream.token()
    guard.poke()
    await asyncio.sleep(0)


async def stop(task: asyncio.Task[None]) -> None:
    task.cancel()
    await asyncio.gather(task, return_exceptions=True)


@pytest.mark.asyncio
async def test_a_stall_fires_exactly_at_its_deadline_and_is_counted_once() -> None:
    clock = FakeClock()
    stream = FakeStream(clock, watchdog(clock))
    guard, _ = make_guard(stream)
    task = await started(guard)
    for t in (120, 150, 400):  # tokens; then silence
        await token_at(clock, stream, guard, t)
    await clock.advance_to(5_000 * MS)
    await stop(task)
    assert [(t, f.cause) for t, f in stream.stops] == [(700 * MS, Cause.STALL)]
    assert stream.stops[0][1].message == "no token for 300.0ms"
    assert stream.stalls == [(700 * MS, StallKind.INTER_TOKEN)]


@pytest.mark.asyncio
async def test_the_first_token_deadline_and_keepalives_before_it() -> None:
    clock = FakeClock()
    stream = FakeStream(clock, watchdog(clock, first_ms=1_000))
    guard, _ = make_guard(stream, keepalive_ms=300)
    task = await started(guard)
    await clock.advance_to(2_000 * MS)
    await stop(task)
    assert stream.keepalives == [300 * MS, 600 * MS, 900 * MS, 1_200 * MS, 1_500 * MS, 1_800 * MS]
    assert [(t, f.cause) for t, f in stream.stops] == [(1_000 * MS, Cause.FIRST_TOKEN_TIMEOUT)]
    assert stream.stalls == [(1_000 * MS, StallKind.FIRST_TOKEN)]


@pytest.mark.asyncio
async def test_a_finish_then_silence_ends_the_read_at_the_finish_timeout_uncounted() -> None:
    clock = FakeClock()
    stream = FakeStream(clock, watchdog(clock))
    guard, _ = make_guard(stream)
    task = await started(guard)
    await token_at(clock, stream, guard, 100)
    assert stream.watchdog is not None
    stream.watchdog.finish(clock.now_ns())
    guard.poke()
    await asyncio.sleep(0)
    await clock.advance_to(10_000 * MS)
    await stop(task)
    ((t, failure),) = stream.stops
    assert (t, failure.cause) == (2_100 * MS, Cause.SILENT_AFTER_FINISH)
    assert "2.00s" in failure.message
    assert stream.stalls == []  # nothing is missing from the answer: no stall


@pytest.mark.asyncio
async def test_with_no_fallback_a_stall_is_counted_then_waited_out_to_the_give_up() -> None:
    clock = FakeClock()
    stream = FakeStream(clock, watchdog(clock), waits_out=True)
    guard, _ = make_guard(stream, give_up_ms=5_000)
    task = await started(guard)
    await token_at(clock, stream, guard, 100)
    await clock.advance_to(20_000 * MS)
    await stop(task)
    assert stream.stalls == [(400 * MS, StallKind.INTER_TOKEN)]  # counted when it began
    ((t, failure),) = stream.stops
    assert t == 5_100 * MS  # give-up from the last token
    assert failure.message == "no token for 5.00s, waited out with no fallback"


@pytest.mark.asyncio
async def test_a_client_that_drains_nothing_is_cut_one_that_drains_slowly_is_not() -> None:
    clock = FakeClock()
    stream = FakeStream(clock, unsent=65_536)
    guard, stuck = make_guard(stream, stuck_ms=1_000)
    task = await started(guard)
    stuck.sending(clock.now_ns())
    guard.poke()
    await asyncio.sleep(0)
    for t in range(250, 5_001, 250):  # draining a little at every look
        stream.unsent = 65_536 - t
        await clock.advance_to(t * MS)
    assert stream.cuts == []
    await clock.advance_to(8_000 * MS)  # then nothing more
    await asyncio.gather(task)
    ((t, reason),) = stream.cuts
    assert 6_000 * MS <= t <= 6_250 * MS
    assert reason == "the client read nothing for 1.00s"
