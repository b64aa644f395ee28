"""Drive a run: tickets from the schedule, one task per request, every stream recorded.

:class:`BenchRunner` takes a :class:`Dispatcher`'s tickets, sends each request through the
:class:`StreamClient`, adds what the client measured about itself to the stream's ``meta``
(scheduling lag, worst loop lag while it was open), asks the lab for cancellation ground
truth, and hands every finished timeline to ``sink`` at once, so an interrupted run keeps
everything that finished. Progress goes to a :class:`RunProgress` the caller may watch;
nothing here prints.

How a run ends:

- ``--requests N``: once N requests were sent and all of them are over;
- ``--duration D``: no request is sent after D; the ones in flight get ``grace_ns`` to finish
  and are then closed and recorded as cancelled ("the run's duration ended");
- interrupted (the task is cancelled, e.g. Ctrl-C): streams in flight are recorded as
  cancelled ("run interrupted") before the cancellation goes on.
"""

from __future__ import annotations

import asyncio
import secrets
from array import array
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np
import numpy.typing as npt

from steadystream._clock import NS_PER_MS, NS_PER_S, Clock, MonotonicClock
from steadystream._exceptions import SpecError
from steadystream._tasks import cancel_and_wait
from steadystream._types import Outcome
from steadystream.bench.cancel import CancelPolicy, LabTruthClient, fetch_cancel_truth
from steadystream.bench.client import Sent, StreamClient
from steadystream.bench.disconnect import DisconnectPolicy
from steadystream.bench.health import ClientHealth, client_health
from steadystream.bench.lag import LAG_FLAG_NS, LagStats, LoopLagSampler, lag_stats
from steadystream.bench.progress import RunProgress
from steadystream.bench.schedule import ClosedLoop, Dispatcher, Schedule, Ticket, TraceSchedule
from steadystream.bench.workload import Workload
from steadystream.timeline import Timeline

__all__ = ["BenchRunner", "RunOptions", "RunResult", "new_run_id"]


def new_run_id() -> str:
    """A short random id: request ids are ``{run_id}-{index}``, unique across reruns."""
    return f"ss{secrets.token_hex(4)}"


@dataclass(frozen=True, slots=True)
class RunOptions:
    """When a run stops, and what else it does."""

    max_requests: int | None = None
    duration_ns: int | None = None
    grace_ns: int = 30 * NS_PER_S
    cancel: CancelPolicy | None = None
    disconnect: DisconnectPolicy | None = None  # readers who drop and come back
    run_id: str = field(default_factory=new_run_id)

    def __post_init__(self) -> None:
        # Checked here, not when the run starts: a NaN or infinite duration never ends.
        if self.max_requests is not None and not _whole(self.max_requests, 1):
            raise SpecError(
                f"max_requests (--requests) must be a whole number of at least 1,"
                f" got {self.max_requests!r}"
            )
        if self.duration_ns is not None and not _whole(self.duration_ns, 1):
            raise SpecError(
                f"duration_ns (--duration) must be a whole number of nanoseconds above 0,"
                f" got {self.duration_ns!r}"
            )
        if not _whole(self.grace_ns, 0):
            raise SpecError(
                f"grace_ns (--grace) must be a whole number of nanoseconds, 0 or more,"
                f" got {self.grace_ns!r}"
            )
        if not isinstance(self.run_id, str) or not self.run_id:
            raise SpecError(f"run_id must be a non-empty text, got {self.run_id!r}")


def _whole(value: object, minimum: int) -> bool:
    """An integer (not a bool, not a float, however whole) of at least ``minimum``."""
    return isinstance(value, int) and not isinstance(value, bool) and value >= minimum


@dataclass
class RunResult:
    """What a run recorded, and how well the client kept up."""

    timelines: list[Timeline]
    progress: RunProgress
    schedule: str
    loop_lag: LagStats
    schedule_lag: LagStats
    waited_for_slot: int
    elapsed_s: float
    timed_arrivals: bool = True  # open loop or trace: sending on time is part of the load
    interrupted: bool = False
    notes: list[str] = field(default_factory=list)

    def health(self) -> ClientHealth:
        """Whether the client kept up, and its lag, in numbers and words."""
        return client_health(
            self.timelines,
            self.loop_lag,
            self.schedule_lag,
            self.waited_for_slot,
            timed_arrivals=self.timed_arrivals,
        )


class BenchRunner:
    """One run of a schedule against one endpoint. ``await runner.run()``."""

    def __init__(
        self,
        client: StreamClient,
        schedule: Schedule,
        workload: Workload,
        *,
        options: RunOptions | None = None,
        clock: Clock | None = None,
        sink: Callable[[Timeline], None] | None = None,
        progress: RunProgress | None = None,
        sampler: LoopLagSampler | None = None,
        truth: LabTruthClient | None = None,
    ) -> None:
        self.client = client
        self.schedule = schedule
        self.workload = workload
        self.options = options or RunOptions()
        self.clock = clock if clock is not None else MonotonicClock()
        self.sink = sink
        self.progress = progress if progress is not None else RunProgress(self.clock)
        self.sampler = sampler
        self.truth = truth
        self.timelines: list[Timeline] = []
        self._schedule_lags = array("q")
        self._stop_reason = "run interrupted mid-stream"
        self._start_ns = self.clock.now_ns()
        self.interrupted = False
        self.dispatcher = Dispatcher(
            schedule,
            self.clock,
            max_requests=self.options.max_requests,
            duration_ns=self.options.duration_ns,
        )

    def stop(self) -> None:
        """Send no more requests; the ones in flight finish (as with ``--duration``)."""
        self.dispatcher.stop()

    async def run(self) -> RunResult:
        """Run to the end and return the result.

        If the task is cancelled, streams in flight are recorded and the cancellation goes
        on; :meth:`result` then gives what was recorded.
        """
        options, progress = self.options, self.progress
        unbounded = options.max_requests is None and options.duration_ns is None
        if unbounded and not isinstance(self.schedule, TraceSchedule):
            raise SpecError("a run needs --requests or --duration (a trace file ends by itself)")
        loop = asyncio.get_running_loop()
        tasks: set[asyncio.Task[None]] = set()
        progress.started()
        self._start_ns = self.clock.now_ns()
        if self.sampler is not None:
            self.sampler.start()
        try:
            async for ticket in self.dispatcher.tickets():
                progress.request_sent()
                task = loop.create_task(self._one(ticket))
                tasks.add(task)
                task.add_done_callback(tasks.discard)
            await self._drain(tasks)
        except asyncio.CancelledError:
            self.interrupted = True
            raise
        finally:
            leftover = [t for t in tasks if not t.done()]
            for task in leftover:
                task.cancel()
            if leftover:
                await asyncio.gather(*leftover, return_exceptions=True)
            if self.sampler is not None:
                await self.sampler.stop()
        return self.result()

    async def _drain(self, tasks: set[asyncio.Task[None]]) -> None:
        """Wait for requests in flight; after ``--duration``, for ``grace_ns`` at most."""
        pending = set(tasks)
        timer: asyncio.Task[None] | None = None
        if self.options.duration_ns is not None and pending:
            deadline = self.clock.now_ns() + self.options.grace_ns
            timer = asyncio.get_running_loop().create_task(self.clock.sleep_until(deadline))
        try:
            while pending and (timer is None or not timer.done()):
                waiters: set[asyncio.Future[None]] = set(pending)
                if timer is not None:
                    waiters.add(timer)
                done, _ = await asyncio.wait(waiters, return_when=asyncio.FIRST_COMPLETED)
                pending -= done
                for task in done:
                    if task is not timer and not task.cancelled() and task.exception():
                        raise task.exception()  # type: ignore[misc]  # a bug: let it show
        finally:
            await cancel_and_wait(timer)
        if pending:
            self._stop_reason = "the run's --duration and grace ended before the stream did"
            for task in pending:
                task.cancel()
            await asyncio.gather(*pending, return_exceptions=True)

    async def _one(self, ticket: Ticket) -> None:
        spec = self.workload.request(ticket.index)
        request_id = f"{self.options.run_id}-{ticket.index:06d}"
        policy = self.options.cancel
        cancel = policy.for_request(ticket.index) if policy is not None else None
        drops = self.options.disconnect
        # A reader chosen to leave for good (--cancel) is not also dropped to come back.
        disconnect = drops.for_request(ticket.index) if drops is not None and not cancel else None

        def interrupted(sent: Sent) -> None:
            sent.timeline.error = self._stop_reason
            self._finish(sent, ticket)

        try:
            sent = await self.client.stream(
                spec,
                request_id,
                cancel=cancel,
                disconnect=disconnect,
                on_interrupt=interrupted,
            )
        finally:
            self.dispatcher.release()
        timeline = sent.timeline
        truth = self.truth
        if timeline.outcome is Outcome.CANCELLED and truth is not None and truth.enabled:
            await fetch_cancel_truth(truth, timeline)
        self._finish(sent, ticket)

    def _finish(self, sent: Sent, ticket: Ticket) -> None:
        timeline, meta = sent.timeline, sent.timeline.meta
        lag = sent.sent_ns - ticket.intended_ns
        self._schedule_lags.append(lag)
        meta["request_index"] = ticket.index
        meta["schedule_lag_ms"] = round(lag / NS_PER_MS, 3)
        if self.sampler is not None:
            end = sent.sent_ns + (timeline.end_ns or 0)
            worst = self.sampler.max_between(sent.sent_ns, end)
            meta["loop_lag_max_ms"] = round(worst / NS_PER_MS, 3)
            # Kernel stamps are taken as packets arrive, whatever the loop is doing; lag
            # touched them only where events waited together and share one stamp.
            affected = meta.get("stamps") != "kernel" or meta.get("stamps_shared", 0) > 0
            meta["client_lagged"] = worst > LAG_FLAG_NS and affected
        self.timelines.append(timeline)
        if self.sink is not None:
            self.sink(timeline)
        self.progress.request_done(timeline)

    def schedule_lag_samples_ns(self) -> npt.NDArray[np.int64]:
        """Every request's scheduling lag so far (a copy), for merging several runners'."""
        return np.frombuffer(self._schedule_lags, dtype=np.int64).copy()

    def result(self) -> RunResult:
        """What the run recorded so far (all of it once :meth:`run` returned)."""
        notes = list(self.client.usage_downgrades)
        truth = self.truth
        cancelled = self.progress.outcomes.get(Outcome.CANCELLED.value, 0)
        if truth is not None and cancelled and truth.unavailable and truth.mode != "off":
            notes.append(f"no cancellation ground truth: {truth.unavailable}")
        return RunResult(
            timelines=self.timelines,
            progress=self.progress,
            schedule=self.schedule.describe(),
            loop_lag=self.sampler.stats() if self.sampler is not None else lag_stats([]),
            schedule_lag=lag_stats(np.frombuffer(self._schedule_lags, dtype=np.int64)),
            waited_for_slot=self.dispatcher.waited_for_slot,
            elapsed_s=(self.clock.now_ns() - self._start_ns) / NS_PER_S,
            timed_arrivals=not isinstance(self.schedule, ClosedLoop),
            interrupted=self.interrupted,
            notes=notes,
        )
