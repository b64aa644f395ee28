"""The policy shared by ``leaky``, ``reading`` and ``adaptive``: one token per interval.

A spaced pacer releases one token per interval while more than ``reserve`` tokens are held.
Two rules force tokens out at once, from the front: more than ``capacity`` held (``leaky``), or
a token held for ``hold`` (``reading``'s buffer, ``adaptive``'s latency cap). A forced release
takes the place of the regular one at that instant. Every release sets the earliest time of
the next regular one to now plus the interval, as the policy measures it at that moment.

The family has a second, faster form of the same policy for the simulation:
:meth:`SpacedPacer._run_stream` replays a whole recorded stream in one loop over plain
integers, as the generic driver would have, and gives up (returns None) where backpressure
would have paused the read, leaving that stream to the generic driver. The test suite checks
that both forms agree.
"""

from __future__ import annotations

from abc import abstractmethod
from collections import deque

from steadystream._types import Nanos
from steadystream.shaping.base import Pacer, StreamRun, drain_wake

__all__ = ["SpacedPacer"]


class SpacedPacer(Pacer):
    """One token per interval, with forced releases above a capacity or after a hold."""

    _capacity: int | None = None
    _hold: int | None = None
    _reserve: int = 0

    def __init__(self, *, tail_ns: int) -> None:
        super().__init__(tail_ns=tail_ns)
        self._next_regular: int | None = None

    @abstractmethod
    def _interval(self) -> int:
        """Time from a release to the next regular one."""

    def _step(self) -> int:
        return self._interval()

    def _release_count(self, now: Nanos) -> int:
        held = self._held_tokens
        forced = 0
        capacity = self._capacity
        if capacity is not None and held > capacity:
            forced = held - capacity
        hold = self._hold
        if hold is not None and self._held[0][0] + hold <= now:
            forced = max(forced, self._expired(now, hold))
        if forced:
            count = forced
        elif held > self._reserve and (self._next_regular is None or now >= self._next_regular):
            count = 1
        else:
            return 0
        self._next_regular = now + self._interval()
        return count

    def _wake_at(self, now: Nanos) -> Nanos | None:
        due = None if self._hold is None else self._held[0][0] + self._hold
        if self._held_tokens > self._reserve:
            regular = now if self._next_regular is None else self._next_regular
            if due is None or regular < due:
                due = regular
        return due

    def _run_stream(
        self,
        arrivals: list[int],
        sizes: list[int],
        texts: list[str] | None,
        high: int | None,
        low: int,
    ) -> StreamRun | None:
        """The generic driver's loop for this family, on a fresh pacer, in one function."""
        never = 1 << 64  # a capacity or hold that is never reached (times are below 2**62)
        capacity = never if self._capacity is None else self._capacity
        hold = never if self._hold is None else self._hold
        reserve = self._reserve
        arrived = self._arrived if type(self)._arrived is not Pacer._arrived else None
        fixed = self._fixed_interval
        interval = self._interval
        queue: deque[list[int]] = deque()  # [arrival, tokens left]
        held = released = max_buffered = 0
        next_regular: int | None = None
        last_release: int | None = None
        ends: list[int] = []
        times: list[int] = []
        instant = -1
        start_held = pushed = 0
        for index, arrival in enumerate(arrivals):
            # Wake-ups due up to this arrival (one at the arrival's instant comes first).
            while held:
                now = queue[0][0] + hold
                if held > reserve and next_regular is not None and next_regular < now:
                    now = next_regular
                if now > arrival:
                    break
                if now == arrival and instant != arrival:
                    instant, start_held, pushed = arrival, held, 0
                count = held - capacity if held > capacity else 0
                if queue[0][0] + hold <= now:
                    count = max(count, _expired(queue, now - hold))
                count = count or 1
                held -= count
                released += count
                ends.append(released)
                times.append(now)
                last_release = now
                next_regular = now + (fixed if fixed else interval())
                head = queue[0]
                if head[1] == count:
                    queue.popleft()
                else:
                    _take(queue, count)
            size = sizes[index]
            if not size:
                continue
            if instant != arrival:
                instant, start_held, pushed = arrival, held, 0
            queue.append([arrival, size])
            held += size
            if held > max_buffered:
                max_buffered = held
            if arrived is not None:
                arrived(arrival, size, texts[index] if texts is not None else "")
            count = held - capacity if held > capacity else 0
            if queue[0][0] + hold <= arrival:
                count = max(count, _expired(queue, arrival - hold))
            if not count and held > reserve and (next_regular is None or arrival >= next_regular):
                count = 1
            if count:
                held -= count
                released += count
                ends.append(released)
                times.append(arrival)
                last_release = arrival
                next_regular = arrival + (fixed if fixed else interval())
                head = queue[0]
                if head[1] == count:
                    queue.popleft()
                else:
                    _take(queue, count)
            pushed += size
            if high is not None and start_held + pushed >= high and held > low:
                return None  # backpressure would pause the read: the generic driver runs it
        if held:
            close = arrivals[-1]
            step = min(self._step(), self.tail_ns // held)
            first = close if last_release is None else max(close, last_release + step)
            if step == 0:
                ends.append(released + held)
                times.append(first)
            else:
                last_due = first + (held - 1) * step
                wake = first
                done = 0
                while done < held:
                    done = min(held, (wake - first) // step + 1)
                    ends.append(released + done)
                    times.append(wake)
                    wake = drain_wake(wake, first + done * step, last_due, step)
        return StreamRun(ends, times, max_buffered)

    _fixed_interval = 0
    """The interval when it never changes (0: ask :meth:`_interval` at each release)."""


def _expired(queue: deque[list[int]], arrived_by: int) -> int:
    """Tokens in the queue that arrived at or before ``arrived_by``."""
    count = 0
    for arrival, tokens in queue:
        if arrival > arrived_by:
            break
        count += tokens
    return count


def _take(queue: deque[list[int]], count: int) -> None:
    """Remove ``count`` tokens from the front of the queue."""
    while count:
        head = queue[0]
        if head[1] <= count:
            count -= head[1]
            queue.popleft()
        else:
            head[1] -= count
            count = 0
