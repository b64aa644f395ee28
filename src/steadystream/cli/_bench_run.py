"""What ``steadystream bench`` shows: the plan, the live view, the summary, the verdicts.

The work is :func:`steadystream.bench.entrypoint.run_bench`; this module plans the run the
:class:`BenchConfig` says, draws the live view from the run's hooks, renders the outcome and
maps it to an exit code.
"""

from __future__ import annotations

import typer
from rich.console import Console

from steadystream._exceptions import UpstreamConnectError
from steadystream.bench import loop as _loop
from steadystream.bench.cancel import cancellation_stats
from steadystream.bench.config import BenchConfig
from steadystream.bench.distributed import RayRunner
from steadystream.bench.entrypoint import BenchHooks, BenchOutcome, run_bench
from steadystream.bench.plan import BenchPlan, plan_bench
from steadystream.bench.runner import BenchRunner
from steadystream.cli import _bench_view, _console, _render
from steadystream.cli._errors import exit_on_error, print_error
from steadystream.cli.gate import show_verdict, verdict_code

__all__ = ["execute"]

EXIT_REGRESSION = 1
EXIT_NOTHING_SUCCEEDED = 3
EXIT_INTERRUPTED = 130


class _LiveHooks(BenchHooks):
    """Each run's progress, drawn in place while it runs."""

    def __init__(self, view: _bench_view.LiveView) -> None:
        self.view = view

    def run_started(
        self,
        runner: BenchRunner | RayRunner,
        title: str,
        total: int | None,
        duration_s: float | None,
    ) -> None:
        self.view.follow(runner.progress, title, total, duration_s)

    async def run_ended(self) -> None:
        await self.view.stop()


def execute(config: BenchConfig, *, live: bool, json_output: bool) -> int:
    """Run the command; the exit code (0 done, 1 gate/SLO failed, 2, 3, 4, 130)."""
    with exit_on_error():
        plan = plan_bench(config)
    console = _console.console(stderr=json_output)
    if not json_output:
        _print_plan(plan, console)
    view = _bench_view.LiveView(Console(stderr=True), enabled=live and not json_output)
    with exit_on_error():
        try:
            outcome = _loop.run(run_bench(plan, hooks=_LiveHooks(view)))
        except UpstreamConnectError as exc:  # nothing was sent: no stream could succeed
            print_error(str(exc))
            return EXIT_NOTHING_SUCCEEDED
    if plan.sweep is not None:
        return _show_sweep(outcome, console)
    return _show_run(outcome, console, json_output)


def _print_plan(plan: BenchPlan, console: Console) -> None:
    endpoint = plan.endpoint
    shown = ", ".join(endpoint.shown_headers())
    console.print(
        f"bench: {endpoint.describe()}, {plan.workload.describe()}, loop {_loop.loop_name()}"
        + f", stamps {plan.stamps}"
        + (f", headers: {shown}" if shown else "")
        + f"; recording to {plan.output}",
        highlight=False,
    )


def _show_run(outcome: BenchOutcome, console: Console, json_output: bool) -> int:
    summary, result = outcome.summary, outcome.result
    assert summary is not None
    assert result is not None
    # Every stream failed: a table of dashes, and notes on streams that never began, would
    # only bury the one line that matters.
    failed = outcome.nothing_succeeded and not outcome.interrupted
    if json_output:
        typer.echo(_render.to_json(summary))
    elif not failed:
        _render.print_summary(summary, console)
        stats = cancellation_stats(result.timelines)
        if stats is not None:
            console.print(_bench_view.cancellation_table(stats))
    if failed:
        streams = len(result.timelines)
        # The server's own words: its control characters (terminal escapes) shown, not run.
        first_error = _console.plain(outcome.first_error).plain
        print_error(
            f"no stream succeeded ({streams} of {streams} failed); first error: {first_error}"
        )
        console.print(
            f"recorded {outcome.written} failed streams to {outcome.plan.output}",
            highlight=False,
        )
        return EXIT_NOTHING_SUCCEEDED
    if outcome.interrupted:
        console.print(f"interrupted: kept {outcome.written} streams in {outcome.plan.output}")
        return EXIT_INTERRUPTED
    if outcome.verdict is not None:
        show_verdict(outcome.verdict, console, json_output=False)
        return verdict_code(outcome.verdict)
    return 0


def _show_sweep(outcome: BenchOutcome, console: Console) -> int:
    if outcome.interrupted or outcome.sweep is None:
        console.print(f"interrupted: the sweep stopped; kept {outcome.written} streams")
        return EXIT_INTERRUPTED
    sweep = outcome.sweep
    console.print(_bench_view.sweep_table(sweep))
    slo = ", ".join(o.text for o in sweep.objectives)
    unit = "req/s" if sweep.plan.dimension == "rate" else "concurrent streams"
    answer = sweep.answer
    if sweep.noisy:
        console.print("[yellow]note:[/] a load met the SLO above one that missed it: noisy")
    if answer is None:
        console.print(f"[bold red]no load met the SLO[/] ({slo})")
        return EXIT_REGRESSION
    console.print(f"[bold]fluid capacity: {answer:g} {unit}[/] (highest load meeting {slo})")
    console.print(f"recorded {outcome.written} streams to {outcome.plan.output}")
    return 0
