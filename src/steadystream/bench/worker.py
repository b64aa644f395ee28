"""One worker of a distributed bench: its own event loop, its share of one global schedule.

:class:`BenchWorker` owns a :class:`~steadystream.bench.session.Bench` (one HTTP session, one
event loop) and runs its share of each run (:func:`~steadystream.bench.schedule.share_of`)
from a start instant agreed with the other workers. The coordinator
(:mod:`steadystream.bench.distributed`) drives it through a few calls that carry only plain
values, so the same class runs as a Ray actor on any node or, in tests, in this process:

- :meth:`start` schedules the run to begin at a wall-clock instant (all workers share it);
- :meth:`poll` hands over the streams finished since the last poll, and, once the run is
  over, the worker's self-check (:class:`WorkerReport`);
- :meth:`stop` sends no more requests; :meth:`interrupt` also cuts the streams in flight
  (recorded as cancelled, as a Ctrl-C does in one process).
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import socket
import time
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from steadystream._clock import MonotonicClock
from steadystream.bench.runner import BenchRunner, RunOptions, RunResult
from steadystream.bench.schedule import Schedule
from steadystream.bench.session import Bench, BenchSettings
from steadystream.timeline import Timeline

__all__ = ["BenchWorker", "WorkerPoll", "WorkerReport"]


@dataclass(frozen=True, slots=True)
class WorkerReport:
    """A worker's run once it is over: its lags as raw samples, so that they merge exactly."""

    worker: int
    host: str
    pid: int
    loop_lag_ns: npt.NDArray[np.int64]
    schedule_lag_ns: npt.NDArray[np.int64]
    waited_for_slot: int
    interrupted: bool
    notes: list[str]
    error: str | None = None  # the run itself failed (a bug, or a refused option)


@dataclass(frozen=True, slots=True)
class WorkerPoll:
    """Streams finished since the last poll, requests sent so far, and the report at the end."""

    timelines: list[Timeline]
    sent: int
    report: WorkerReport | None = None


class BenchWorker:
    """A bench's worker ``worker``: one event loop, one HTTP session, its share of each run."""

    def __init__(self, settings: BenchSettings, worker: int) -> None:
        self.settings = settings
        self.worker = worker
        self.clock = MonotonicClock()
        self._bench: Bench | None = None
        self._runner: BenchRunner | None = None
        self._task: asyncio.Task[RunResult] | None = None
        self._finished: list[Timeline] = []
        self._reported = True

    async def open(self) -> str:
        """Open the HTTP session; returns where this worker runs (host and pid)."""
        self._bench = self.settings.bench(self.clock)
        await self._bench.__aenter__()
        return f"{socket.gethostname()} pid {os.getpid()}"

    async def close(self) -> None:
        await self.interrupt()
        if self._bench is not None:
            await self._bench.__aexit__(None, None, None)
            self._bench = None

    async def warm_up(self, count: int) -> int:
        """Unrecorded requests on this worker's own connections (see :meth:`Bench.warm_up`)."""
        return len(await self._open_bench().warm_up(count))

    async def start(
        self, schedule: Schedule, options: RunOptions, labels: dict[str, str], start_unix_ns: int
    ) -> None:
        """Run ``schedule`` (this worker's share) from the wall-clock instant ``start_unix_ns``."""
        if self._task is not None and not self._task.done():
            raise RuntimeError("a run is already in progress on this worker")
        bench = self._open_bench()
        bench.client.labels.clear()
        bench.client.labels.update(labels)
        self._finished = []
        self._reported = False
        runner = bench.prepare(schedule, options, sink=self._collect)
        self._runner = runner
        # The workers' monotonic clocks differ; wall clocks agree (NTP) to about a
        # millisecond, which is how far apart their shares of the schedule can start.
        delay_ns = max(0, start_unix_ns - time.time_ns())
        start_at = self.clock.now_ns() + delay_ns

        async def run() -> RunResult:
            await self.clock.sleep_until(start_at)
            return await runner.run()

        self._task = asyncio.get_running_loop().create_task(run())

    async def poll(self) -> WorkerPoll:
        """What finished since the last poll; with the report once the run is over."""
        finished, self._finished = self._finished, []
        runner, task = self._runner, self._task
        sent = runner.dispatcher.issued if runner is not None else 0
        report = None
        if task is not None and task.done() and not self._reported:
            self._reported = True
            report = self._report(task)
        return WorkerPoll(finished, sent, report)

    async def stop(self) -> None:
        """Send no more requests; the ones in flight finish."""
        if self._runner is not None:
            self._runner.stop()

    async def interrupt(self) -> None:
        """Cut the run: streams in flight are recorded as cancelled, then the run ends."""
        task = self._task
        if task is not None and not task.done():
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task

    def _collect(self, timeline: Timeline) -> None:
        self._finished.append(timeline)

    def _open_bench(self) -> Bench:
        if self._bench is None:
            raise RuntimeError("open() the worker first")
        return self._bench

    def _report(self, task: asyncio.Task[RunResult]) -> WorkerReport:
        runner = self._runner
        assert runner is not None
        error = None
        if not task.cancelled() and task.exception() is not None:
            error = f"{type(task.exception()).__name__}: {task.exception()}"
        result = runner.result()
        sampler = runner.sampler
        return WorkerReport(
            worker=self.worker,
            host=socket.gethostname(),
            pid=os.getpid(),
            loop_lag_ns=sampler.samples_ns() if sampler is not None else np.zeros(0, np.int64),
            schedule_lag_ns=runner.schedule_lag_samples_ns(),
            waited_for_slot=result.waited_for_slot,
            interrupted=result.interrupted or task.cancelled(),
            notes=result.notes,
            error=error,
        )
