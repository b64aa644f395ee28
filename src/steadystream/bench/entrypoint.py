"""The whole of ``steadystream bench`` as one call: :func:`run_bench`.

Plan, warm up, run once (or sweep the load), record every stream to the output file,
summarise, and judge against the gate's baseline; the result is a :class:`BenchOutcome`.
Nothing here prints: progress goes to :class:`BenchHooks` (the command line draws its live
view from them), and the command line renders the outcome::

    config = BenchConfig(url="http://127.0.0.1:8000/v1", model="lab", concurrency=8)
    outcome = asyncio.run(run_bench(config))
    print(outcome.summary.fleet.p99_of_worst_gap_s, outcome.verdict)

A server that cannot be reached (nothing listens on the port, the host does not resolve) is
an :class:`~steadystream.UpstreamConnectError` before anything is sent or written.

Ctrl-C (the task cancelled) ends the run early: streams in flight are recorded as
cancelled, the file keeps what finished, and the outcome says ``interrupted``.
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import Callable
from dataclasses import dataclass

from steadystream._clock import NS_PER_S
from steadystream.bench.config import BenchConfig
from steadystream.bench.distributed import RayBench, RayRunner
from steadystream.bench.plan import BenchPlan, plan_bench
from steadystream.bench.progress import FAILED_OUTCOMES
from steadystream.bench.runner import BenchRunner, RunOptions, RunResult
from steadystream.bench.schedule import Schedule, TraceSchedule
from steadystream.bench.session import Bench, BenchSettings
from steadystream.bench.summary import Summary, run_notes, summarise
from steadystream.bench.sweep import SweepResult, run_sweep
from steadystream.bench.telemetry import bench_telemetry, exporting
from steadystream.bench.verdict import GateVerdict, judge_runs, load_run
from steadystream.engine_metrics import scraping
from steadystream.files import JsonlWriter
from steadystream.metrics import FleetMetrics, fleet_metrics
from steadystream.timeline import Timeline

__all__ = ["BenchHooks", "BenchOutcome", "run_bench"]


class BenchHooks:
    """What a caller hears while a bench runs; each does nothing unless overridden."""

    def run_started(
        self,
        runner: BenchRunner | RayRunner,
        title: str,
        total: int | None,
        duration_s: float | None,
    ) -> None:
        """A run (one load of a sweep) starts: ``runner.progress`` follows it."""

    async def run_ended(self) -> None:
        """The run that started last has ended (or was interrupted)."""


@dataclass
class BenchOutcome:
    """What a bench recorded and concluded."""

    plan: BenchPlan
    written: int = 0  # streams in the output file
    result: RunResult | None = None  # the run (None for a sweep)
    summary: Summary | None = None  # the run's summary (None for a sweep)
    sweep: SweepResult | None = None
    verdict: GateVerdict | None = None  # with a gate, once the run succeeded
    interrupted: bool = False

    @property
    def nothing_succeeded(self) -> bool:
        """Streams were recorded and every one of them failed."""
        timelines = [] if self.result is None else self.result.timelines
        return bool(timelines) and all(t.outcome in FAILED_OUTCOMES for t in timelines)

    @property
    def first_error(self) -> str:
        first = None if self.result is None else self.result.progress.first_error
        return first or "?"


class _Interrupted(Exception):
    """Ctrl-C during a run: what it recorded is in ``result``."""

    def __init__(self, result: RunResult) -> None:
        self.result = result


async def run_bench(
    config: BenchConfig | BenchPlan, *, hooks: BenchHooks | None = None
) -> BenchOutcome:
    """Run the bench ``config`` describes; see the module's docstring."""
    plan = config if isinstance(config, BenchPlan) else plan_bench(config)
    hooks = hooks if hooks is not None else BenchHooks()
    settings = plan.config
    outcome = BenchOutcome(plan)
    bench_settings = BenchSettings(
        plan.endpoint,
        plan.workload,
        keep_text=settings.keep_text,
        labels=settings.labels,
        lab_truth=settings.lab_truth,
        read_timeout_s=plan.read_timeout_s,
        finish_timeout_s=plan.finish_timeout_s,
        stall_threshold_ns=plan.metrics.stall_threshold_ns,
        ttft_target_ns=plan.metrics.ttft_target_ns,
        stamps=plan.stamps.value,
    )
    bench: Bench | RayBench = (
        RayBench(bench_settings, workers=settings.workers, address=settings.ray_address)
        if settings.on_ray
        else bench_settings.bench()
    )
    scraped: list[str] = []  # what the engine-metrics scraper says, for the summary's notes
    scraper = scraping(settings.engine_metrics, plan.endpoint.origin, plan.output, scraped.append)
    # OpenTelemetry (--otel-endpoint or OTEL_*): each stream also goes out as a span.
    telemetry = bench_telemetry(plan.endpoint, os.environ, settings.otel_endpoint)
    # The bench is entered first: a run it refuses (a Ray cluster not there, or too small for
    # --workers) leaves an existing output file as it was. Once open, the file keeps every
    # stream recorded, whatever ends the run.
    async with bench, exporting(telemetry):
        if isinstance(bench, Bench):
            # A server that is not there fails the run here: one error, before the output
            # file is opened. (Ray's workers connect from their own hosts: each finds out.)
            await bench.client.reach()
        with JsonlWriter(plan.output, keep_text=settings.keep_text) as writer:
            sink = writer.write if telemetry is None else telemetry.beside(writer.write)
            async with scraper:
                try:
                    if settings.warmup:
                        await bench.warm_up(settings.warmup)
                    if plan.sweep is not None:
                        outcome.sweep = await _sweep(bench, plan, hooks, sink)
                    else:
                        assert plan.schedule is not None
                        outcome.result = await _one_run(
                            bench, plan.schedule, plan.options, hooks, sink
                        )
                except _Interrupted as stop:
                    outcome.interrupted = True
                    if plan.sweep is None:
                        outcome.result = stop.result
            outcome.written = writer.written
    if outcome.result is not None:
        outcome.summary = _summary(outcome.result, plan)
        outcome.summary.notes.extend(scraped)
    judged = outcome.result is not None and not outcome.interrupted
    if plan.baseline is not None and judged and not outcome.nothing_succeeded:
        outcome.verdict = judge_runs(
            plan.baseline, load_run(plan.output), plan.gate_rules, plan.metrics
        )
    return outcome


async def _one_run(
    bench: Bench | RayBench,
    schedule: Schedule,
    options: RunOptions,
    hooks: BenchHooks,
    sink: Callable[[Timeline], None],
) -> RunResult:
    runner = bench.prepare(schedule, options, sink=sink)
    duration_s = None if options.duration_ns is None else options.duration_ns / NS_PER_S
    total = options.max_requests
    if total is None and isinstance(schedule, TraceSchedule) and options.duration_ns is None:
        total = len(schedule.arrivals_ns)
    hooks.run_started(runner, schedule.describe(), total, duration_s)
    try:
        return await runner.run()
    except asyncio.CancelledError:
        task = asyncio.current_task()
        if task is not None:
            task.uncancel()
        raise _Interrupted(runner.result()) from None
    finally:
        await hooks.run_ended()


def _summary(result: RunResult, plan: BenchPlan) -> Summary:
    summary = summarise(result.timelines, plan.metrics)
    summary.notes.extend(run_notes(result))
    summary.notes.append(f"recorded {len(result.timelines)} streams to {plan.output}")
    return summary


async def _sweep(
    bench: Bench | RayBench,
    plan: BenchPlan,
    hooks: BenchHooks,
    sink: Callable[[Timeline], None],
) -> SweepResult:
    """Each load of the sweep is one run, labelled ``load=...``, into the same file."""
    sweep = plan.sweep
    assert sweep is not None
    client = bench.client

    async def measure(load: float) -> tuple[FleetMetrics, bool]:
        client.labels["load"] = f"{sweep.dimension}={load:g}"
        result = await _one_run(bench, plan.schedule_for(load), _fresh(plan.options), hooks, sink)
        return fleet_metrics(result.timelines, plan.metrics), result.health().kept_up

    return await run_sweep(
        sweep,
        plan.objectives,
        measure,
        clock=bench.clock,
        cooldown_ns=plan.config.cooldown,
    )


def _fresh(options: RunOptions) -> RunOptions:
    """The same stop rules with a new run id, so a sweep's loads never share request ids."""
    return RunOptions(
        max_requests=options.max_requests,
        duration_ns=options.duration_ns,
        grace_ns=options.grace_ns,
        cancel=options.cancel,
        disconnect=options.disconnect,
    )
