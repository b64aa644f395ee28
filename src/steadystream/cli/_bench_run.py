"""The work behind ``steadystream bench``: check the options, run, summarise, gate, sweep."""

from __future__ import annotations

import asyncio
import os
import time
from dataclasses import dataclass, field
from pathlib import Path

import typer
from rich.console import Console

from steadystream._clock import NS_PER_S
from steadystream._exceptions import SpecError
from steadystream.bench import _loop
from steadystream.bench.cancel import CancelPoint, CancelPolicy
from steadystream.bench.endpoint import Endpoint, headers_from
from steadystream.bench.gate import parse_rules
from steadystream.bench.progress import FAILED_OUTCOMES
from steadystream.bench.runner import RunOptions, RunResult
from steadystream.bench.schedule import (
    ClosedLoop,
    OpenLoop,
    Schedule,
    TraceSchedule,
    read_trace,
)
from steadystream.bench.session import Bench
from steadystream.bench.sweep import DEFAULT_SLO, Objective, SweepPlan, run_sweep
from steadystream.bench.workload import (
    Prompt,
    TokenCount,
    Workload,
    builtin_prompts,
    read_prompts,
)
from steadystream.cli import _bench_view, _render
from steadystream.cli._options import exit_on_error
from steadystream.cli.bench import BenchArgs
from steadystream.files import JsonlWriter
from steadystream.metrics import FleetMetrics, MetricConfig, fleet_metrics

__all__ = ["execute"]

EXIT_REGRESSION = 1
EXIT_NOTHING_SUCCEEDED = 3
EXIT_INTERRUPTED = 130
_DEFAULT_REQUESTS = 100


@dataclass
class Plan:
    endpoint: Endpoint
    workload: Workload
    schedule: Schedule | None  # None when sweeping
    options: RunOptions
    config: MetricConfig
    output: Path
    labels: dict[str, str]
    read_timeout_s: float
    sweep: SweepPlan | None = None
    objectives: list[Objective] = field(default_factory=list)
    cooldown_ns: int = 0
    ramp_ns: int = 0
    burstiness: float = 1.0
    cap: int | None = None  # --concurrency as a cap on a rate sweep
    gate_rules: list[str] = field(default_factory=list)


class _Interrupted(Exception):
    """Ctrl-C during a run: what it recorded is in ``result``."""

    def __init__(self, result: RunResult) -> None:
        self.result = result


def execute(args: BenchArgs) -> int:
    """Run the command; the exit code (0 done, 1 gate/SLO failed, 2, 3, 130)."""
    with exit_on_error():
        plan = _plan(args)
        if args.gate is not None:
            parse_rules(args.max_regression)
            _bench_view.load_run(args.gate)  # fail before the run, not after it
    console = Console(stderr=args.json_output)
    return _loop.run(_main(plan, args, console))


def _duration(text: str | None, name: str) -> int | None:
    from steadystream._units import parse_duration

    return None if text is None else parse_duration(text, name=name)


def _positive(text: str, name: str) -> int:
    value = _duration(text, name)
    if value is None or value <= 0:
        raise SpecError(f"{name} must be a positive duration, got {text!r}")
    return value


def _plan(args: BenchArgs) -> Plan:
    api_key = None
    if args.api_key_env is not None:
        api_key = os.environ.get(args.api_key_env)
        if not api_key:
            raise SpecError(f"--api-key-env: the environment variable {args.api_key_env} is empty")
    endpoint = Endpoint(
        args.url,
        args.model,
        kind=args.endpoint,
        api_key=api_key,
        headers=headers_from(args.headers),
        usage=args.usage,
        ignore_eos=args.ignore_eos,
        request_id_header=None
        if args.request_id_header.lower() == "none"
        else args.request_id_header,
    )
    prompts: tuple[Prompt, ...] = ()
    if args.input_tokens is not None:
        if args.prompts is not None:
            raise SpecError("--prompts and --input-tokens cannot be combined: pick one source")
    else:
        prompts = read_prompts(args.prompts) if args.prompts is not None else builtin_prompts()
    workload = Workload(
        prompts=prompts,
        input_tokens=None
        if args.input_tokens is None
        else TokenCount.parse(args.input_tokens, name="--input-tokens"),
        output_tokens=None
        if args.output_tokens is None
        else TokenCount.parse(args.output_tokens, name="--output-tokens"),
        max_tokens=args.max_tokens,
        seed=args.seed,
    )
    cancel = None
    if args.cancel or args.cancel_after is not None:
        if not args.cancel or args.cancel_after is None:
            raise SpecError("--cancel FRACTION and --cancel-after 20tok|500ms go together")
        cancel = CancelPolicy(args.cancel, CancelPoint.parse(args.cancel_after), args.seed)
    duration = _duration(args.duration, "--duration")
    requests = args.requests
    if requests is None and duration is None and args.trace is None:
        requests = _DEFAULT_REQUESTS
    options = RunOptions(
        max_requests=requests,
        duration_ns=duration,
        grace_ns=_duration(args.grace, "--grace") or 0,
        cancel=cancel,
    )
    ramp_ns = _duration(args.ramp, "--ramp") or 0
    sweep = SweepPlan.parse(args.sweep) if args.sweep is not None else None
    schedule = None if sweep is not None else _schedule(args, ramp_ns)
    if sweep is not None:
        _check_sweep(args, sweep)
    labels = {}
    for text in args.labels:
        key, sep, value = text.partition("=")
        if not sep or not key.strip():
            raise SpecError(f"--label: expected key=value, got {text!r}")
        labels[key.strip()] = value.strip()
    output = args.output or Path(time.strftime("bench-%Y%m%d-%H%M%S.jsonl"))
    if not str(output).endswith((".jsonl", ".jsonl.gz")):
        raise SpecError(f"--output: bench writes JSONL as it goes; use .jsonl, not {output}")
    if not output.parent.is_dir():
        raise SpecError(f"--output: the folder {output.parent} does not exist")
    read_timeout = _positive(args.timeout, "--timeout")
    config = MetricConfig(
        stall_threshold_ns=_positive(args.stall_threshold, "--stall-threshold"),
        ttft_target_ns=_positive(args.ttft_target, "--ttft-target"),
    )
    return Plan(
        endpoint=endpoint,
        workload=workload,
        schedule=schedule,
        options=options,
        config=config,
        output=output,
        labels=labels,
        read_timeout_s=read_timeout / NS_PER_S,
        sweep=sweep,
        objectives=[Objective.parse(t) for t in (args.slo or DEFAULT_SLO)],
        cooldown_ns=_duration(args.cooldown, "--cooldown") or 0,
        ramp_ns=ramp_ns,
        burstiness=args.burstiness,
        cap=args.concurrency,
        gate_rules=args.max_regression,
    )


def _schedule(args: BenchArgs, ramp_ns: int) -> Schedule:
    if args.trace is not None:
        if args.rate is not None:
            raise SpecError("--trace and --rate cannot be combined: the trace says when")
        if ramp_ns:
            raise SpecError("--ramp does not apply to a trace")
        return read_trace(args.trace, max_concurrency=args.concurrency)
    if args.rate is not None:
        return OpenLoop(args.rate, args.burstiness, args.seed, ramp_ns, args.concurrency)
    return ClosedLoop(args.concurrency or 1, ramp_ns)


def _check_sweep(args: BenchArgs, sweep: SweepPlan) -> None:
    if args.trace is not None:
        raise SpecError("--sweep and --trace cannot be combined")
    if sweep.dimension == "rate" and args.rate is not None:
        raise SpecError("--sweep rates=... sets the rate: leave out --rate")
    if sweep.dimension == "concurrency" and (args.concurrency or args.rate) is not None:
        raise SpecError("--sweep concurrency=... sets the concurrency: leave out --concurrency")
    if args.gate is not None:
        raise SpecError("--gate compares one run; it does not apply to a sweep")


# -- running --------------------------------------------------------------------------------------


async def _main(plan: Plan, args: BenchArgs, console: Console) -> int:
    view = _bench_view.LiveView(Console(stderr=True), enabled=args.live and not args.json_output)
    endpoint = plan.endpoint
    if not args.json_output:
        shown = ", ".join(endpoint.shown_headers())
        console.print(
            f"bench: {endpoint.describe()}, {plan.workload.describe()}, loop {_loop.loop_name()}"
            + (f", headers: {shown}" if shown else "")
            + f"; recording to {plan.output}",
            highlight=False,
        )
    bench = Bench(
        endpoint,
        plan.workload,
        keep_text=args.keep_text,
        labels=plan.labels,
        lab_truth=args.lab_truth,
        read_timeout_s=plan.read_timeout_s,
        stall_threshold_ns=plan.config.stall_threshold_ns,
        ttft_target_ns=plan.config.ttft_target_ns,
    )
    with exit_on_error(), JsonlWriter(plan.output, keep_text=args.keep_text) as writer:
        async with bench:
            try:
                if args.warmup:
                    await bench.warm_up(args.warmup)
                if plan.sweep is not None:
                    return await _sweep(bench, plan, view, writer, console)
                assert plan.schedule is not None
                result = await _one_run(bench, plan.schedule, plan.options, view, writer)
            except _Interrupted as stop:
                _summarise(stop.result, plan, args, console)
                console.print(f"interrupted: kept {writer.written} streams in {plan.output}")
                return EXIT_INTERRUPTED
    code = _summarise(result, plan, args, console)
    if code == 0 and args.gate is not None:
        from steadystream.cli.gate import judge

        with exit_on_error():
            passed = judge(
                args.gate,
                plan.output,
                plan.gate_rules,
                defaults=True,
                config=plan.config,
                console=console,
                json_output=False,
            )
        code = 0 if passed else EXIT_REGRESSION
    return code


async def _one_run(
    bench: Bench,
    schedule: Schedule,
    options: RunOptions,
    view: _bench_view.LiveView,
    writer: JsonlWriter,
) -> RunResult:
    runner = bench.prepare(schedule, options, sink=writer.write)
    duration_s = None if options.duration_ns is None else options.duration_ns / NS_PER_S
    total = options.max_requests
    if total is None and isinstance(schedule, TraceSchedule) and options.duration_ns is None:
        total = len(schedule.arrivals_ns)
    view.follow(runner.progress, schedule.describe(), total, duration_s)
    try:
        return await runner.run()
    except asyncio.CancelledError:
        task = asyncio.current_task()
        if task is not None:
            task.uncancel()
        raise _Interrupted(runner.result()) from None
    finally:
        await view.stop()


def _summarise(result: RunResult, plan: Plan, args: BenchArgs, console: Console) -> int:
    timelines = result.timelines
    summary = _render.summarise(timelines, plan.config)
    summary.notes.extend(_bench_view.fidelity_notes(result))
    summary.notes.append(f"recorded {len(timelines)} streams to {plan.output}")
    if args.json_output:
        typer.echo(_render.to_json(summary))
    else:
        _render.print_summary(summary, console)
        table = _bench_view.cancellation_table(timelines)
        if table is not None:
            console.print(table)
    if timelines and all(t.outcome in FAILED_OUTCOMES for t in timelines):
        first = result.progress.first_error or "?"
        console.print(f"[bold red]no stream succeeded[/]; first error: {first}", highlight=False)
        return EXIT_NOTHING_SUCCEEDED
    return 0


async def _sweep(
    bench: Bench, plan: Plan, view: _bench_view.LiveView, writer: JsonlWriter, console: Console
) -> int:
    sweep = plan.sweep
    assert sweep is not None
    client = bench.client

    async def measure(load: float) -> tuple[FleetMetrics, bool]:
        if sweep.dimension == "rate":
            seed = plan.workload.seed
            schedule: Schedule = OpenLoop(load, plan.burstiness, seed, plan.ramp_ns, plan.cap)
        else:
            schedule = ClosedLoop(int(load), plan.ramp_ns)
        client.labels["load"] = f"{sweep.dimension}={load:g}"
        result = await _one_run(bench, schedule, _fresh(plan.options), view, writer)
        return fleet_metrics(result.timelines, plan.config), result.health().kept_up

    try:
        outcome = await run_sweep(
            sweep, plan.objectives, measure, clock=bench.clock, cooldown_ns=plan.cooldown_ns
        )
    except _Interrupted:
        console.print(f"interrupted: the sweep stopped; kept {writer.written} streams")
        return EXIT_INTERRUPTED
    console.print(_bench_view.sweep_table(outcome))
    slo = ", ".join(o.text for o in plan.objectives)
    unit = "req/s" if sweep.dimension == "rate" else "concurrent streams"
    answer = outcome.answer
    if outcome.noisy:
        console.print("[yellow]note:[/] a load met the SLO above one that missed it: noisy")
    if answer is None:
        console.print(f"[bold red]no load met the SLO[/] ({slo})")
        return EXIT_REGRESSION
    console.print(f"[bold]fluid capacity: {answer:g} {unit}[/] (highest load meeting {slo})")
    console.print(f"recorded {writer.written} streams to {plan.output}")
    return 0


def _fresh(options: RunOptions) -> RunOptions:
    """The same stop rules with a new run id, so a sweep's loads never share request ids."""
    return RunOptions(
        max_requests=options.max_requests,
        duration_ns=options.duration_ns,
        grace_ns=options.grace_ns,
        cancel=options.cancel,
    )
