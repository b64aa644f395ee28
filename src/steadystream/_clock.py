"""Injectable clocks.

Everything that waits (pacers' live driver, watchdogs, schedulers, the lab engine) takes a
:class:`Clock`, so tests drive it in simulated time with :class:`FakeClock` and the same code
runs live on :class:`MonotonicClock`. Times are integer nanoseconds.
"""

from __future__ import annotations

import asyncio
import heapq
import itertools
import time
from collections.abc import Callable
from numbers import Integral
from typing import Protocol

__all__ = ["NS_PER_MS", "NS_PER_S", "Clock", "FakeClock", "MonotonicClock"]

NS_PER_MS = 1_000_000
NS_PER_S = 1_000_000_000


class Clock(Protocol):
    """A source of monotonic time in nanoseconds and a way to wait for it."""

    def now_ns(self) -> int: ...

    async def sleep_until(self, deadline_ns: int) -> None: ...

    def wake_at(self, deadline_ns: int, future: asyncio.Future[None]) -> Callable[[], None]:
        """Resolve ``future`` at ``deadline_ns`` unless it is done by then; returns what
        cancels that. For a waiter that also waits for something else on the same future
        (the gateway's guard): no task per wait."""
        ...


class MonotonicClock:
    """The real clock: ``time.perf_counter_ns`` and ``asyncio.sleep``."""

    # The C function itself, not a method around it: read per event on the hot paths, and
    # a Python frame per reading costs more than the reading.
    now_ns = staticmethod(time.perf_counter_ns)

    async def sleep_until(self, deadline_ns: int) -> None:
        # The event loop runs a timer once it is within its clock resolution of due, so one
        # sleep can return early; a caller stamping "sent at" must never see that.
        delay = deadline_ns - time.perf_counter_ns()
        if delay <= 0:
            await asyncio.sleep(0)
            return
        while delay > 0:
            await asyncio.sleep(delay / NS_PER_S)
            delay = deadline_ns - time.perf_counter_ns()

    def wake_at(self, deadline_ns: int, future: asyncio.Future[None]) -> Callable[[], None]:
        # (Like a sleep, it may fire within the loop's clock resolution before the deadline:
        # a waiter reads the clock when woken.)
        delay = max(0, deadline_ns - time.perf_counter_ns()) / NS_PER_S
        return asyncio.get_running_loop().call_later(delay, _resolve, future).cancel


class FakeClock:
    """A clock that only moves when told to.

    ``await clock.sleep_until(t)`` parks the caller until :meth:`advance` (or
    :meth:`advance_to`) moves time to ``t`` or beyond. Sleepers wake in deadline order, and
    each wake-up runs the woken task before time moves further, so a test sees exactly the
    interleaving that real time would give.
    """

    def __init__(self, start_ns: int = 0) -> None:
        self._now = _instant(start_ns, "start_ns")
        self._sleepers: list[tuple[int, int, asyncio.Future[None]]] = []
        self._order = itertools.count()

    def now_ns(self) -> int:
        return self._now

    async def sleep_until(self, deadline_ns: int) -> None:
        if deadline_ns <= self._now:
            await asyncio.sleep(0)
            return
        future: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        heapq.heappush(self._sleepers, (deadline_ns, next(self._order), future))
        await future

    def wake_at(self, deadline_ns: int, future: asyncio.Future[None]) -> Callable[[], None]:
        if deadline_ns <= self._now:
            asyncio.get_running_loop().call_soon(_resolve, future)
        else:
            heapq.heappush(self._sleepers, (deadline_ns, next(self._order), future))
        return _nothing  # (a future done by other means is dropped from the heap)

    @property
    def next_deadline(self) -> int | None:
        """The earliest deadline anyone waits for, or None when nobody sleeps."""
        self._drop_cancelled()
        return self._sleepers[0][0] if self._sleepers else None

    async def advance(self, delta_ns: int) -> None:
        """Move time on by ``delta_ns``, a whole number of nanoseconds (0 or more)."""
        await self.advance_to(self._now + _instant(delta_ns, "delta_ns"))

    async def advance_to(self, target_ns: int) -> None:
        """Move time to ``target_ns``, waking every sleeper due on the way, in order."""
        target_ns = _instant(target_ns, "target_ns")
        if target_ns < self._now:
            raise ValueError(f"time cannot go back: {target_ns} < {self._now}")
        await _settle()
        while True:
            self._drop_cancelled()
            if not self._sleepers or self._sleepers[0][0] > target_ns:
                break
            deadline, _, future = heapq.heappop(self._sleepers)
            self._now = max(self._now, deadline)
            future.set_result(None)
            await _settle()
        self._now = target_ns
        await _settle()

    async def run_until_idle(self, limit_ns: int | None = None) -> None:
        """Advance from deadline to deadline until nobody sleeps (or ``limit_ns`` is reached)."""
        await _settle()
        while (deadline := self.next_deadline) is not None:
            if limit_ns is not None and deadline > limit_ns:
                await self.advance_to(limit_ns)
                return
            await self.advance_to(deadline)

    def _drop_cancelled(self) -> None:
        while self._sleepers and self._sleepers[0][2].done():
            heapq.heappop(self._sleepers)


def _instant(value: int, name: str) -> int:
    """Times are integer nanoseconds: a float (1.5, NaN) would make ``now_ns`` a float and
    a NaN would compare false with every deadline, waking no one."""
    if isinstance(value, bool) or not isinstance(value, Integral) or value < 0:
        raise ValueError(f"{name} must be a whole number of nanoseconds, 0 or more, got {value!r}")
    return int(value)


def _resolve(future: asyncio.Future[None]) -> None:
    if not future.done():
        future.set_result(None)


def _nothing() -> None:
    return None


async def _settle(rounds: int = 20) -> None:
    # Let woken tasks run until they block again; a few loop turns cover chains of awaits.
    for _ in range(rounds):
        await asyncio.sleep(0)
