"""A bench spread over Ray actors: one global schedule, many event loops, one recording.

:class:`RayBench` has the calls of :class:`~steadystream.bench.session.Bench` (``warm_up``,
``prepare``, ``run``, ``client.labels``), so a run, a gate and a sweep drive it the same way;
behind them ``workers`` Ray actors (:class:`~steadystream.bench.worker.BenchWorker`, one
event loop and one HTTP session each, on any node) run their shares of one global schedule
(:func:`~steadystream.bench.schedule.share_of`):

- worker ``w`` of ``N`` sends the global requests ``w, w + N, ...`` at the global schedule's
  instants (open loop, trace) or holds the global slots ``w, w + N, ...`` (closed loop), all
  counted from one start instant; so the aggregate rate, burstiness, ramp and trace are the
  ones asked for, and request ``i`` has the same prompt, token count and cancellation as in
  one process;
- :class:`RayRunner` polls the workers a few times a second: their finished streams go to
  the one ``sink`` (the output file) and the one :class:`RunProgress` (the live view);
- the run's self-check merges the workers' raw lag samples exactly, and each worker's own
  check is one note, so a worker that could not keep up is named.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from types import TracebackType
from typing import Any

import numpy as np

import steadystream._ray as _ray
from steadystream._clock import NS_PER_MS, NS_PER_S, Clock, MonotonicClock
from steadystream._exceptions import SpecError, SteadystreamError
from steadystream._gc import quiet_gc
from steadystream.bench.health import client_health
from steadystream.bench.lag import lag_stats
from steadystream.bench.progress import RunProgress
from steadystream.bench.runner import RunOptions, RunResult
from steadystream.bench.schedule import ClosedLoop, Schedule, Share, TraceSchedule, share_of
from steadystream.bench.session import BenchSettings
from steadystream.bench.worker import BenchWorker, WorkerPoll, WorkerReport
from steadystream.timeline import Timeline

__all__ = ["RayBench", "RayRunner"]


class _ActorWorker(BenchWorker):
    """A worker alone in its process (a Ray actor): it tunes that process's collector."""

    def __init__(self, settings: BenchSettings, worker: int) -> None:
        quiet_gc()
        super().__init__(settings, worker)


_POLL_NS = 250 * NS_PER_MS
_START_LEAD_NS = 500 * NS_PER_MS  # time for every worker to hear "start" before it is due
_CALL_TIMEOUT_S = 60.0  # open, start, poll, stop: quick calls; longer means a lost worker


@dataclass
class _Labels:
    """What the sweep writes to (``bench.client.labels["load"] = ...``), as on a Bench."""

    labels: dict[str, str] = field(default_factory=dict)


class RayBench:
    """Runs against one endpoint from ``workers`` Ray actors; an async context manager."""

    def __init__(
        self,
        settings: BenchSettings,
        *,
        workers: int | None = None,
        address: str | None = None,
        clock: Clock | None = None,
        poll_interval_ns: int = _POLL_NS,
    ) -> None:
        if workers is not None and workers < 1:
            raise SpecError(f"--workers must be at least 1, got {workers}")
        self.settings = settings
        self.workers_given = workers is not None
        self.workers = workers or 1  # without --workers: the cluster's CPUs, once joined
        self.address = address
        self.clock = clock if clock is not None else MonotonicClock()
        self.poll_interval_ns = poll_interval_ns
        self.client = _Labels(dict(settings.labels))
        self.where: list[str] = []  # each worker's host and pid
        self.runner: RayRunner | None = None
        self._actors: list[Any] = []
        self._stack = contextlib.ExitStack()

    async def __aenter__(self) -> RayBench:
        ray = self._stack.enter_context(_ray.connected(self.address))
        try:
            cpus = int(ray.cluster_resources().get("CPU", 0))
            if not self.workers_given:
                self.workers = max(1, cpus)
            elif self.workers > cpus:
                # Each worker holds a CPU: the rest would wait for one until the call timed
                # out (and tens of thousands of them would swamp Ray first).
                raise SpecError(
                    f"--workers {self.workers} is more than the Ray cluster's {cpus} CPUs "
                    "(each worker takes one); leave it out for one per CPU"
                )
            actor = ray.remote(num_cpus=1)(_ActorWorker)
            self._actors = [actor.remote(self.settings, w) for w in range(self.workers)]
            self.where = await self.call_all("open")
        except BaseException:
            await self.__aexit__(None, None, None)
            raise
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        actors, self._actors = self._actors, []
        try:
            if actors:
                with contextlib.suppress(Exception):
                    await _gather([a.close.remote() for a in actors], _CALL_TIMEOUT_S)
                ray = _ray.import_ray()
                for actor in actors:
                    ray.kill(actor)
        finally:
            self._stack.close()

    async def call_all(
        self, method: str, *args: Any, actors: Sequence[int] | None = None
    ) -> list[Any]:
        """``method(*args)`` on every worker (or those listed), their results in order."""
        chosen = range(len(self._actors)) if actors is None else actors
        refs = [getattr(self._actors[w], method).remote(*args) for w in chosen]
        return await _gather(refs, _CALL_TIMEOUT_S)

    async def call_each(self, method: str, args: dict[int, tuple[Any, ...]]) -> list[Any]:
        """``method(*args[w])`` on each worker ``w`` named in ``args``, results in order."""
        refs = [getattr(self._actors[w], method).remote(*a) for w, a in args.items()]
        return await _gather(refs, _CALL_TIMEOUT_S)

    def tell_all(self, method: str) -> None:
        """``method()`` on every worker, not waiting for them (stop, interrupt)."""
        for actor in self._actors:
            getattr(actor, method).remote()

    async def warm_up(self, count: int) -> int:
        """``count`` unrecorded requests on every worker, each on its own connections."""
        timeout = (self.settings.read_timeout_s or _CALL_TIMEOUT_S) * count + _CALL_TIMEOUT_S
        refs = [a.warm_up.remote(count) for a in self._actors]
        return sum(await _gather(refs, timeout))

    def prepare(
        self,
        schedule: Schedule,
        options: RunOptions | None = None,
        *,
        sink: Callable[[Timeline], None] | None = None,
        progress: RunProgress | None = None,
    ) -> RayRunner:
        """A runner for one run (``await runner.run()``); it becomes :attr:`runner`."""
        if progress is None:
            progress = RunProgress(
                self.clock,
                stall_threshold_ns=self.settings.stall_threshold_ns,
                ttft_target_ns=self.settings.ttft_target_ns,
            )
        self.runner = RayRunner(self, schedule, options or RunOptions(), sink, progress)
        return self.runner

    async def run(
        self,
        schedule: Schedule,
        options: RunOptions | None = None,
        *,
        sink: Callable[[Timeline], None] | None = None,
        progress: RunProgress | None = None,
    ) -> RunResult:
        """One run to its end (see :class:`RayRunner`)."""
        return await self.prepare(schedule, options, sink=sink, progress=progress).run()


class RayRunner:
    """One run of a schedule over the workers of a :class:`RayBench`. ``await run()``."""

    def __init__(
        self,
        bench: RayBench,
        schedule: Schedule,
        options: RunOptions,
        sink: Callable[[Timeline], None] | None,
        progress: RunProgress,
    ) -> None:
        self.bench = bench
        self.schedule = schedule
        self.options = options
        self.sink = sink
        self.progress = progress
        self.timelines: list[Timeline] = []
        self.interrupted = False
        self._per_worker: list[list[Timeline]] = [[] for _ in range(bench.workers)]
        self._sent = [0] * bench.workers
        self._reports: dict[int, WorkerReport] = {}
        self._active: list[int] = []
        self._start_ns = bench.clock.now_ns()

    def stop(self) -> None:
        """Send no more requests; the ones in flight finish (as with ``--duration``)."""
        self.bench.tell_all("stop")

    async def run(self) -> RunResult:
        """Run to the end and return the merged result.

        If the task is cancelled (Ctrl-C), every worker cuts its streams in flight and
        records them as cancelled; those are collected, then the cancellation goes on.
        """
        options, n = self.options, self._workers_for(self.schedule)
        unbounded = options.max_requests is None and options.duration_ns is None
        if unbounded and not isinstance(self.schedule, TraceSchedule):
            raise SpecError("a run needs --requests or --duration (a trace file ends by itself)")
        plans = []
        for w in range(n):
            share = Share(w, n)
            requests = (
                None if options.max_requests is None else share.count_of(options.max_requests)
            )
            if requests == 0 or (
                isinstance(self.schedule, TraceSchedule)
                and share.count_of(len(self.schedule.arrivals_ns)) == 0
            ):
                continue  # fewer requests than workers: this one has nothing to send
            worker_options = RunOptions(
                max_requests=requests,
                duration_ns=options.duration_ns,
                grace_ns=options.grace_ns,
                cancel=options.cancel,
                disconnect=options.disconnect,
                run_id=options.run_id,
            )
            plans.append((w, share_of(self.schedule, share), worker_options))
        self._active = [w for w, _, _ in plans]
        start_unix_ns = time.time_ns() + _START_LEAD_NS
        labels = dict(self.bench.client.labels)
        self.progress.started()
        self._start_ns = self.bench.clock.now_ns()
        await self.bench.call_each(
            "start", {w: (schedule, opts, labels, start_unix_ns) for w, schedule, opts in plans}
        )
        try:
            while len(self._reports) < len(self._active):
                await self.bench.clock.sleep_until(
                    self.bench.clock.now_ns() + self.bench.poll_interval_ns
                )
                await self._poll()
        except asyncio.CancelledError:
            self.interrupted = True
            await self.bench.call_all("interrupt", actors=self._active)
            await self._poll()
            raise
        return self.result()

    def _workers_for(self, schedule: Schedule) -> int:
        """All the workers; without --workers, no more than the streams in flight allow."""
        n = self.bench.workers
        if not self.bench.workers_given:
            limit = (
                schedule.concurrency
                if isinstance(schedule, ClosedLoop)
                else schedule.max_concurrency
            )
            n = min(n, limit or n)
        return n

    async def _poll(self) -> None:
        polls: list[WorkerPoll] = await self.bench.call_all("poll", actors=self._active)
        for w, poll in zip(self._active, polls, strict=True):
            for _ in range(poll.sent - self._sent[w]):
                self.progress.request_sent()
            self._sent[w] = poll.sent
            for timeline in poll.timelines:
                self.timelines.append(timeline)
                self._per_worker[w].append(timeline)
                if self.sink is not None:
                    self.sink(timeline)
                self.progress.request_done(timeline)
            if poll.report is not None:
                self._reports[w] = poll.report
                if poll.report.error is not None:
                    raise SteadystreamError(
                        f"bench worker {w + 1} ({self.bench.where[w]}) failed: {poll.report.error}"
                    )

    def result(self) -> RunResult:
        """What the run recorded so far, all workers merged (all of it once run() returned)."""
        reports = [self._reports[w] for w in self._active if w in self._reports]
        timed = not isinstance(self.schedule, ClosedLoop)
        notes: list[str] = []
        for report in reports:
            notes += [note for note in report.notes if note not in notes]
        notes += [self._worker_line(r, timed, len(self._active)) for r in reports]
        return RunResult(
            timelines=self.timelines,
            progress=self.progress,
            schedule=f"{self.schedule.describe()}, over {len(self._active)} Ray workers",
            loop_lag=lag_stats(_concat([r.loop_lag_ns for r in reports])),
            schedule_lag=lag_stats(_concat([r.schedule_lag_ns for r in reports])),
            waited_for_slot=sum(r.waited_for_slot for r in reports),
            elapsed_s=(self.bench.clock.now_ns() - self._start_ns) / NS_PER_S,
            timed_arrivals=timed,
            interrupted=self.interrupted or any(r.interrupted for r in reports),
            notes=notes,
        )

    def _worker_line(self, report: WorkerReport, timed: bool, workers: int) -> str:
        """One worker's own self-check, in words."""
        mine = self._per_worker[report.worker]
        health = client_health(
            mine,
            lag_stats(report.loop_lag_ns),
            lag_stats(report.schedule_lag_ns),
            report.waited_for_slot,
            timed_arrivals=timed,
        )
        verdict = (
            "kept up" if health.kept_up else "did not keep up: " + "; ".join(health.problems())
        )
        return (
            f"worker {report.worker + 1} of {workers} ({report.host} pid {report.pid}):"
            f" {len(mine)} streams; {health.lines()[0]}; {verdict}"
        )


def _concat(arrays: list[np.ndarray]) -> np.ndarray:
    return np.concatenate([np.zeros(0, dtype=np.int64), *arrays])


async def _gather(refs: list[Any], timeout_s: float) -> list[Any]:
    """The results of Ray object refs, awaited on this event loop, within ``timeout_s``."""
    ray_error = _ray.import_ray().exceptions.RayError
    futures = [asyncio.wrap_future(ref.future()) for ref in refs]
    try:
        return list(await asyncio.wait_for(asyncio.gather(*futures), timeout_s))
    except TimeoutError:
        raise SteadystreamError(f"Ray workers did not answer within {timeout_s:g} s") from None
    except ray_error as exc:
        # A worker or its node died (or a call failed in it): one line, not Ray's traceback;
        # the streams that finished before are in the output file already.
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise SteadystreamError(f"a Ray worker failed: {first}") from exc
