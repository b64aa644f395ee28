"""When to send: arrival schedules, and the dispatcher that turns one into send tickets.

A schedule is pure and seeded: it says *when* requests should go out, as nanosecond offsets
from the start of the run (open loop, trace) or as slots that open over time (closed loop).
The :class:`Dispatcher` walks a schedule on an injected :class:`Clock`, so tests drive it in
simulated time and the same code runs live.

- Closed loop (``--concurrency N``): N slots; a request goes out the moment a slot is free.
  With a ramp, slot ``k`` opens at ``k * ramp / N``.
- Open loop (``--rate R --burstiness B``): gaps are gamma distributed with shape B and mean
  1/R (B = 1 is a Poisson process; lower is burstier, higher more regular). With a ramp, the
  rate grows linearly from 0 to R; arrivals are drawn in the time-changed domain, so the
  ramp shapes the rate without changing the gap distribution's form. An optional cap on
  requests in flight holds arrivals back; the delay shows as scheduling lag.
- Trace: arrival offsets read from a file (docs/bench.md#trace-files).

One schedule can be shared by several workers (``bench --ray --workers N``, docs/scale.md):
worker ``w`` of ``N`` takes the global schedule's requests ``w, w + N, w + 2N, ...``, and in a
closed loop its slots likewise (:class:`Share`, :func:`share_of`). Every worker draws the same
global arrivals and keeps its own, so together they send exactly the one schedule asked for,
with the same request indices (hence prompts, token counts and cancellations) as one process.

Every ticket carries the instant it was *meant* to go out; the runner subtracts it from the
instant it did go out: that is the client's scheduling lag.
"""

from __future__ import annotations

import asyncio
import dataclasses
import itertools
import math
from collections import deque
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import orjson

from steadystream._clock import NS_PER_S, Clock
from steadystream._exceptions import InputError, SpecError
from steadystream._tasks import cancel_and_wait
from steadystream._units import parse_duration

__all__ = [
    "ClosedLoop",
    "Dispatcher",
    "OpenLoop",
    "Schedule",
    "Share",
    "Ticket",
    "TraceSchedule",
    "read_trace",
    "share_of",
]


@dataclass(frozen=True, slots=True)
class Ticket:
    """Permission to send request ``index``, meant to go out at ``intended_ns`` (clock time)."""

    index: int
    intended_ns: int


@dataclass(frozen=True, slots=True)
class Share:
    """Worker ``worker`` of ``workers``: global requests and slots ``worker`` mod ``workers``."""

    worker: int = 0
    workers: int = 1

    def __post_init__(self) -> None:
        if self.workers < 1:
            raise SpecError(f"--workers must be at least 1, got {self.workers}")
        if not 0 <= self.worker < self.workers:
            raise SpecError(f"worker {self.worker} is not one of {self.workers} workers")

    def global_index(self, local: int) -> int:
        """The global index of this worker's ``local``-th request."""
        return local * self.workers + self.worker

    def count_of(self, total: int) -> int:
        """How many of the global ``0 .. total - 1`` are this worker's."""
        return max(0, (total - self.worker + self.workers - 1) // self.workers)

    def describe(self) -> str:
        return "" if self.workers == 1 else f"; worker {self.worker + 1} of {self.workers}"


_WHOLE = Share()


def _whole(value: object, minimum: int) -> bool:
    """An integer (not a bool, not a float, however whole) of at least ``minimum``."""
    return isinstance(value, int) and not isinstance(value, bool) and value >= minimum


def _finite_positive(value: object) -> bool:
    return (
        isinstance(value, int | float)
        and not isinstance(value, bool)
        and math.isfinite(value)
        and value > 0
    )


@dataclass(frozen=True, slots=True)
class ClosedLoop:
    """``concurrency`` requests in flight at all times; slots open over ``ramp_ns``."""

    concurrency: int
    ramp_ns: int = 0
    share: Share = _WHOLE

    def __post_init__(self) -> None:
        if not _whole(self.concurrency, 1):
            raise SpecError(
                f"--concurrency must be a whole number of at least 1, got {self.concurrency!r}"
            )
        if not _whole(self.ramp_ns, 0):
            raise SpecError(
                f"--ramp must be a whole number of nanoseconds, 0 or more, got {self.ramp_ns!r}"
            )

    def slot_openings(self) -> list[int]:
        """When each slot opens, as offsets from the start."""
        return list(self.iter_slot_openings())

    def iter_slot_openings(self) -> Iterator[int]:
        """:meth:`slot_openings`, one at a time: a run of ``--requests 10`` at
        ``--concurrency 1000000000`` opens ten slots, and holds no list of a billion."""
        n, share = self.concurrency, self.share
        return (self.ramp_ns * k // n for k in range(share.worker, n, share.workers))

    def describe(self) -> str:
        ramp = f", ramp {self.ramp_ns / NS_PER_S:g}s" if self.ramp_ns else ""
        return f"closed loop, concurrency {self.concurrency}{ramp}{self.share.describe()}"


@dataclass(frozen=True, slots=True)
class OpenLoop:
    """Arrivals at ``rate`` per second with gamma gaps of shape ``burstiness``."""

    rate: float
    burstiness: float = 1.0
    seed: int = 0
    ramp_ns: int = 0
    max_concurrency: int | None = None
    share: Share = _WHOLE

    def __post_init__(self) -> None:
        if not _finite_positive(self.rate):
            raise SpecError(f"--rate must be a positive number of requests/s, got {self.rate!r}")
        if not _finite_positive(self.burstiness):
            raise SpecError(
                f"--burstiness must be positive (1.0 = Poisson), got {self.burstiness!r}"
            )
        if not _whole(self.ramp_ns, 0):
            raise SpecError(
                f"--ramp must be a whole number of nanoseconds, 0 or more, got {self.ramp_ns!r}"
            )
        if self.max_concurrency is not None and not _whole(self.max_concurrency, 1):
            raise SpecError(
                f"--concurrency must be a whole number of at least 1, got {self.max_concurrency!r}"
            )

    def offsets(self) -> Iterator[int]:
        """This share's arrival offsets in ns from the start, without end."""
        return _shared(self._all_offsets(), self.share)

    def _all_offsets(self) -> Iterator[int]:
        """The global arrival offsets, without end (the dispatcher stops it)."""
        rng = np.random.default_rng(self.seed)
        shape = self.burstiness
        # Unit-mean gaps in "operational time" (expected arrivals so far); the rate profile
        # maps them to clock time. Drawn in blocks: one numpy call per 1,024 arrivals.
        expected = 0.0
        while True:
            for gap in rng.gamma(shape, 1.0 / shape, size=1024):
                expected += float(gap)
                yield round(self._time_of(expected) * NS_PER_S)

    def _time_of(self, expected: float) -> float:
        """Seconds at which ``expected`` arrivals are due under the ramped rate profile."""
        rate, ramp_s = self.rate, self.ramp_ns / NS_PER_S
        in_ramp = rate * ramp_s / 2  # arrivals expected while the rate climbs from 0 to rate
        if ramp_s > 0 and expected <= in_ramp:
            return math.sqrt(2.0 * ramp_s * expected / rate)
        return ramp_s + (expected - in_ramp) / rate

    def describe(self) -> str:
        shape = "Poisson" if self.burstiness == 1.0 else f"gamma, burstiness {self.burstiness:g}"
        ramp = f", ramp {self.ramp_ns / NS_PER_S:g}s" if self.ramp_ns else ""
        cap = f", at most {self.max_concurrency} in flight" if self.max_concurrency else ""
        return f"open loop, {self.rate:g} req/s ({shape}){ramp}{cap}{self.share.describe()}"


@dataclass(frozen=True, slots=True)
class TraceSchedule:
    """Arrivals at the offsets of a trace file, in order."""

    arrivals_ns: tuple[int, ...]
    source: str = "trace"
    max_concurrency: int | None = None
    share: Share = _WHOLE

    def offsets(self) -> Iterator[int]:
        return _shared(iter(self.arrivals_ns), self.share)

    def describe(self) -> str:
        cap = f", at most {self.max_concurrency} in flight" if self.max_concurrency else ""
        return f"trace {self.source}: {len(self.arrivals_ns)} arrivals{cap}{self.share.describe()}"


Schedule = ClosedLoop | OpenLoop | TraceSchedule


def _shared(offsets: Iterator[int], share: Share) -> Iterator[int]:
    if share.workers == 1:
        return offsets
    return itertools.islice(offsets, share.worker, None, share.workers)


def share_of(schedule: Schedule, share: Share) -> Schedule:
    """Worker ``share.worker``'s part of ``schedule``; an in-flight cap is split likewise.

    Raises :class:`SpecError` when a worker would get no slot (more workers than streams in
    flight): it could send nothing.
    """
    if isinstance(schedule, ClosedLoop):
        if schedule.concurrency < share.workers:
            raise SpecError(
                f"--workers {share.workers} is more than --concurrency {schedule.concurrency}:"
                " each worker needs at least one stream in flight"
            )
        return dataclasses.replace(schedule, share=share)
    cap = schedule.max_concurrency
    if cap is not None and cap < share.workers:
        raise SpecError(
            f"--workers {share.workers} is more than the --concurrency cap {cap}:"
            " each worker needs at least one stream in flight"
        )
    shared_cap = None if cap is None else share.count_of(cap)
    return dataclasses.replace(schedule, share=share, max_concurrency=shared_cap)


def read_trace(path: str | Path, *, max_concurrency: int | None = None) -> TraceSchedule:
    """Read a trace of arrival times: one per line, offsets from the start of the run.

    A line is a duration (``1.5s``, ``250ms``; a bare number is seconds) or a JSON object
    with ``timestamp`` in milliseconds (the convention of the Mooncake and aiperf traces).
    Blank lines and lines starting with ``#`` are skipped. Offsets must not go back.
    """
    name = str(path)
    try:
        lines = Path(path).read_text(encoding="utf-8").splitlines()
    except OSError as exc:
        raise InputError(f"cannot read trace {name}: {exc.strerror}") from exc
    arrivals: list[int] = []
    for number, raw in enumerate(lines, 1):
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        where = f"{name}:{number}"
        offset = _trace_offset(line, where)
        if arrivals and offset < arrivals[-1]:
            raise InputError(f"{where}: arrival {line!r} is earlier than the line before it")
        arrivals.append(offset)
    if not arrivals:
        raise InputError(f"trace {name} holds no arrival times")
    base = arrivals[0] if arrivals[0] > 0 else 0
    # A trace cut from a longer recording starts late; the run starts at its first arrival.
    return TraceSchedule(tuple(a - base for a in arrivals), name, max_concurrency)


def _trace_offset(line: str, where: str) -> int:
    if line.startswith("{"):
        try:
            record = orjson.loads(line)
        except orjson.JSONDecodeError as exc:
            raise InputError(f"{where}: not valid JSON ({exc})") from exc
        stamp = record.get("timestamp") if isinstance(record, dict) else None
        if isinstance(stamp, bool) or not isinstance(stamp, int | float) or stamp < 0:
            raise InputError(f"{where}: needs a non-negative 'timestamp' in milliseconds")
        return round(stamp * 1_000_000)
    try:
        return parse_duration(line, name=where)
    except SpecError as exc:
        raise InputError(str(exc)) from exc


class Dispatcher:
    """Hands out send tickets on a clock, following a schedule and the slots in flight.

    ``async for ticket in dispatcher.tickets()`` yields when a request may go out; the caller
    must call :meth:`release` when that request is over (closed loop and caps reuse the slot).
    Tickets stop after ``max_requests``, at ``start + duration_ns``, or on :meth:`stop`.
    """

    def __init__(
        self,
        schedule: Schedule,
        clock: Clock,
        *,
        max_requests: int | None = None,
        duration_ns: int | None = None,
    ) -> None:
        if max_requests is not None and max_requests < 1:
            raise SpecError(f"--requests must be at least 1, got {max_requests}")
        if duration_ns is not None and duration_ns <= 0:
            raise SpecError("--duration must be positive")
        self.schedule = schedule
        self.clock = clock
        self.max_requests = max_requests
        self.duration_ns = duration_ns
        self.start_ns: int | None = None
        self.issued = 0
        self.in_flight = 0
        self.waited_for_slot = 0  # open-loop arrivals held back by the in-flight cap
        self._freed: deque[int] = deque()  # closed loop: when each free slot became free
        self._changed: asyncio.Future[None] | None = None
        self._stopped = False

    @property
    def deadline_ns(self) -> int | None:
        if self.start_ns is None or self.duration_ns is None:
            return None
        return self.start_ns + self.duration_ns

    def stop(self) -> None:
        """Issue no more tickets (a waiting ``tickets()`` ends at once)."""
        self._stopped = True
        self._notify()

    def release(self) -> None:
        """A request is over: its slot is free from now."""
        self.in_flight -= 1
        if isinstance(self.schedule, ClosedLoop):
            self._freed.append(self.clock.now_ns())
        self._notify()

    async def tickets(self) -> AsyncIterator[Ticket]:
        self.start_ns = start = self.clock.now_ns()
        if isinstance(self.schedule, ClosedLoop):
            intended = self._closed_loop(start, self.schedule.iter_slot_openings())
        else:
            intended = self._timed(start, self.schedule.offsets(), self.schedule.max_concurrency)
        share = self.schedule.share
        async for at in intended:
            ticket = Ticket(share.global_index(self.issued), at)
            self.issued += 1
            self.in_flight += 1
            yield ticket
            # Requests due at once (a huge --concurrency or --rate) would otherwise be handed
            # out without the loop ever running: none would start, and Ctrl-C, the deadline
            # and the lag sampler would wait for the last of them.
            await asyncio.sleep(0)

    def _more(self) -> bool:
        return not self._stopped and (self.max_requests is None or self.issued < self.max_requests)

    def _past_deadline(self, at: int) -> bool:
        deadline = self.deadline_ns
        return deadline is not None and at >= deadline

    async def _closed_loop(self, start: int, openings: Iterator[int]) -> AsyncIterator[int]:
        # Slots not open yet, taken one at a time (in order of opening): only as many as
        # requests are sent are ever looked at.
        pending = (start + o for o in openings)
        upcoming = next(pending, None)
        while self._more():
            now = self.clock.now_ns()
            if self._past_deadline(now):
                return
            freed = self._freed[0] if self._freed else None
            if upcoming is not None and upcoming <= now and (freed is None or upcoming <= freed):
                at, upcoming = upcoming, next(pending, None)
                yield at
                continue
            if freed is not None:
                yield self._freed.popleft()
                continue
            await self._wait(upcoming)

    async def _timed(
        self, start: int, offsets: Iterator[int], cap: int | None
    ) -> AsyncIterator[int]:
        for offset in offsets:
            if not self._more():
                return
            at = start + offset
            if self._past_deadline(at):
                return
            while self.clock.now_ns() < at and not self._stopped:
                await self._wait(at)
            if cap is not None and self.in_flight >= cap:
                self.waited_for_slot += 1
                while self.in_flight >= cap and not self._stopped:
                    await self._wait(None)
            if not self._more() or self._past_deadline(self.clock.now_ns()):
                return
            yield at

    async def _wait(self, until_ns: int | None) -> None:
        """Wait for a release or stop, the deadline, or ``until_ns``, whichever is first."""
        limits = [t for t in (until_ns, self.deadline_ns) if t is not None]
        loop = asyncio.get_running_loop()
        self._changed = changed = loop.create_future()
        timer = loop.create_task(self.clock.sleep_until(min(limits))) if limits else None
        try:
            waiters: set[asyncio.Future[None]] = {changed}
            if timer is not None:
                waiters.add(timer)
            await asyncio.wait(waiters, return_when=asyncio.FIRST_COMPLETED)
        finally:
            self._changed = None
            await cancel_and_wait(timer)

    def _notify(self) -> None:
        if self._changed is not None and not self._changed.done():
            self._changed.set_result(None)
