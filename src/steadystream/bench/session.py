"""A bench session: one endpoint, one workload, one HTTP session, any number of runs.

The high-level entry point for Python callers (the CLI, benchmarks and tests use it)::

    async with Bench(Endpoint(url, "lab"), Workload(builtin_prompts())) as bench:
        result = await bench.run(ClosedLoop(8), RunOptions(max_requests=100), sink=writer.write)

Each run gets its own loop-lag sampler and progress. Streams are read by one stamped
connection each (``stamps``: ``auto``, ``kernel`` or ``user``; docs/bench.md); the aiohttp
session serves the lab ground-truth client, shared across runs.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping
from types import TracebackType

import aiohttp

from steadystream._clock import NS_PER_MS, NS_PER_S, Clock, MonotonicClock
from steadystream.bench.cancel import CancelPoint, LabTruthClient
from steadystream.bench.client import StreamClient, open_session, resolve_with
from steadystream.bench.endpoint import Endpoint
from steadystream.bench.lag import LoopLagSampler
from steadystream.bench.progress import RunProgress
from steadystream.bench.runner import BenchRunner, RunOptions, RunResult, new_run_id
from steadystream.bench.schedule import Schedule
from steadystream.bench.workload import Workload
from steadystream.stamped import resolve_stamps
from steadystream.timeline import Timeline

__all__ = ["Bench", "BenchSettings"]

_WARMUP_INDEX = 1 << 40  # warm-up requests draw prompts far from the run's own indices
_WARMUP_TOKENS = 16
WARMUP_LIMIT_NS = 30 * NS_PER_S
"""How long a warm-up stream may last: a server that never ends one cannot hold the run."""


@dataclasses.dataclass(frozen=True, slots=True)
class BenchSettings:
    """What a :class:`Bench` is built with, as plain values: one bench in this process, or
    the same in every worker of a distributed one (:mod:`steadystream.bench.distributed`)."""

    endpoint: Endpoint
    workload: Workload
    keep_text: bool = False
    labels: Mapping[str, str] = dataclasses.field(default_factory=dict)
    lab_truth: str = "auto"
    read_timeout_s: float | None = 120.0
    finish_timeout_s: float | None = 5.0
    stall_threshold_ns: int = 400 * NS_PER_MS
    ttft_target_ns: int = 800 * NS_PER_MS
    stamps: str = "auto"  # on a Ray worker, resolved on its own node

    def bench(self, clock: Clock | None = None) -> Bench:
        return Bench(
            self.endpoint,
            self.workload,
            clock=clock,
            keep_text=self.keep_text,
            labels=self.labels,
            lab_truth=self.lab_truth,
            read_timeout_s=self.read_timeout_s,
            finish_timeout_s=self.finish_timeout_s,
            stall_threshold_ns=self.stall_threshold_ns,
            ttft_target_ns=self.ttft_target_ns,
            stamps=self.stamps,
        )


class Bench:
    """Runs against one endpoint; an async context manager that owns its HTTP session."""

    def __init__(
        self,
        endpoint: Endpoint,
        workload: Workload,
        *,
        clock: Clock | None = None,
        keep_text: bool = False,
        labels: Mapping[str, str] | None = None,
        lab_truth: str = "auto",
        connect_timeout_s: float = 10.0,
        read_timeout_s: float | None = 120.0,
        finish_timeout_s: float | None = 5.0,
        lag_interval_ns: int = 5 * NS_PER_MS,
        stall_threshold_ns: int = 400 * NS_PER_MS,
        ttft_target_ns: int = 800 * NS_PER_MS,
        resolver: aiohttp.abc.AbstractResolver | None = None,
        stamps: str = "auto",
    ) -> None:
        self.endpoint = endpoint
        self.workload = workload
        self.clock = clock if clock is not None else MonotonicClock()
        self.keep_text = keep_text
        self.labels = dict(labels or {})
        self.lab_truth = lab_truth
        self.connect_timeout_s = connect_timeout_s
        self.read_timeout_s = read_timeout_s
        self.finish_timeout_s = finish_timeout_s
        self.lag_interval_ns = lag_interval_ns
        self.stall_threshold_ns = stall_threshold_ns
        self.ttft_target_ns = ttft_target_ns
        self.resolver = resolver
        self.stamps = resolve_stamps(stamps)  # what meta.stamps says (docs/bench.md)
        self.runner: BenchRunner | None = None  # the run in progress, or the last one
        self._session: aiohttp.ClientSession | None = None
        self._client: StreamClient | None = None
        self._truth: LabTruthClient | None = None

    async def __aenter__(self) -> Bench:
        session = open_session(connect_timeout_s=self.connect_timeout_s)
        self._session = session
        self._client = StreamClient(
            self.endpoint,
            self.clock,
            stamps=self.stamps,
            keep_text=self.keep_text,
            labels=self.labels,
            connect_timeout_s=self.connect_timeout_s,
            read_timeout_s=self.read_timeout_s,
            finish_timeout_s=self.finish_timeout_s,
            resolve=resolve_with(self.resolver) if self.resolver is not None else None,
        )
        self._truth = LabTruthClient(session, self.endpoint.origin, self.clock, mode=self.lab_truth)
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        if self._session is not None:
            await self._session.close()
        self._session = self._client = self._truth = None

    @property
    def client(self) -> StreamClient:
        if self._client is None:
            raise RuntimeError("use `async with Bench(...)` before running")
        return self._client

    async def warm_up(self, count: int, *, limit_ns: int = WARMUP_LIMIT_NS) -> list[Timeline]:
        """Send ``count`` short requests one after another, recorded nowhere.

        The first requests of a process pay one-time costs (connections, code paths run for
        the first time) that would otherwise land in the first streams' stamps. Each is
        closed after ``limit_ns`` at most: a server that ignores ``max_tokens`` and never
        ends its stream would otherwise hold the run before its first request.
        """
        warm = []
        run_id = new_run_id()
        cut = CancelPoint(after_ns=limit_ns)
        for i in range(count):
            spec = self.workload.request(_WARMUP_INDEX + i)
            limit = min(spec.max_tokens or _WARMUP_TOKENS, _WARMUP_TOKENS)
            spec = dataclasses.replace(spec, max_tokens=limit)
            sent = await self.client.stream(spec, f"{run_id}-warmup-{i}", cancel=cut)
            warm.append(sent.timeline)
        return warm

    def prepare(
        self,
        schedule: Schedule,
        options: RunOptions | None = None,
        *,
        sink: Callable[[Timeline], None] | None = None,
        progress: RunProgress | None = None,
    ) -> BenchRunner:
        """A runner for one run (``await runner.run()``); it becomes :attr:`runner`."""
        clock = self.clock
        if progress is None:
            progress = RunProgress(
                clock,
                stall_threshold_ns=self.stall_threshold_ns,
                ttft_target_ns=self.ttft_target_ns,
            )
        self.runner = BenchRunner(
            self.client,
            schedule,
            self.workload,
            options=options,
            clock=clock,
            sink=sink,
            progress=progress,
            sampler=LoopLagSampler(clock, interval_ns=self.lag_interval_ns),
            truth=self._truth,
        )
        return self.runner

    async def run(
        self,
        schedule: Schedule,
        options: RunOptions | None = None,
        *,
        sink: Callable[[Timeline], None] | None = None,
        progress: RunProgress | None = None,
    ) -> RunResult:
        """One run to its end (see :class:`BenchRunner`)."""
        return await self.prepare(schedule, options, sink=sink, progress=progress).run()
