"""``steadystream gate``: fail a release whose streams got jerkier than the baseline's.

Each gated figure comes with its bootstrap interval, and a rule whose interval straddles its
limit is undecided: too few streams to judge, which is not a pass (exit 4, docs/bench.md).
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from steadystream._flags import Flag
from steadystream._options import FileFormat, JsonOutput, MaxRegression
from steadystream.cli import app
from steadystream.cli._groups import Thresholds
from steadystream.cli._models import model_options

if TYPE_CHECKING:
    from rich.console import Console

    from steadystream.bench.verdict import GateVerdict

EXIT_REGRESSION = 1
EXIT_UNDECIDED = 4  # too few streams to judge: not a pass, and not a regression either


@app.command()
@model_options
def gate(
    *,
    baseline: Annotated[Path, Flag("The reference run (timeline file).", argument=True)],
    current: Annotated[Path, Flag("The run to judge (timeline file).", argument=True)],
    file_format: FileFormat,
    max_regression: MaxRegression,
    no_defaults: Annotated[
        bool,
        Flag("Check only the rules given, not the default five as well.", names=("--no-defaults",)),
    ] = False,
    thresholds: Thresholds,
    json_output: JsonOutput,
) -> None:
    """Compare two runs; exit 1 if any limit is broken, 0 if none, 2 on unusable input.

    Default limits: p99_of_p99=10%, p99_of_worst_gap=10%, goodput=-2pt, ttft_p95=15%,
    unstable_share=+1pt. Each figure comes with its 95% bootstrap interval; a limit its
    interval straddles is undecided, too few streams to judge: exit 4 (bench more streams).
    """
    from steadystream.bench.gate import parse_rules
    from steadystream.bench.verdict import judge_runs, load_run
    from steadystream.cli._console import console
    from steadystream.cli._errors import exit_on_error

    with exit_on_error():
        rules = parse_rules(max_regression, defaults=not no_defaults)
        fmt = None if file_format == "auto" else file_format
        verdict = judge_runs(
            load_run(baseline, format=fmt),
            load_run(current, format=fmt),
            rules,
            thresholds.metric_config(),
        )
    show_verdict(verdict, console(), json_output=json_output)
    code = verdict_code(verdict)
    if code:
        raise typer.Exit(code)


def verdict_code(verdict: GateVerdict) -> int:
    """0 passed, 1 a limit broken, 4 undecided (too few streams to judge a limit, or no
    rule could be judged at all)."""
    if verdict.report.failures:
        return EXIT_REGRESSION
    return 0 if verdict.report.passed else EXIT_UNDECIDED


def show_verdict(verdict: GateVerdict, console: Console, *, json_output: bool = False) -> None:
    """The verdict as a table and a line for people, or as JSON for scripts (shared with bench)."""
    report = verdict.report
    if json_output:
        import orjson

        # orjson writes each GateRow dataclass as an object of its fields, in order
        payload = {
            "passed": report.passed,
            "undecided": [row.metric for row in report.undecided],
            "streams": {"baseline": verdict.baseline_streams, "current": verdict.current_streams},
            "confidence": verdict.level,
            "rows": report.rows,
            "notes": verdict.notes,
        }
        typer.echo(orjson.dumps(payload, option=orjson.OPT_INDENT_2).decode())
        return
    from steadystream.cli._bench_view import gate_heading, gate_table
    from steadystream.cli._console import quoted

    console.print(gate_heading(verdict), style="bold", highlight=False)
    console.print(gate_table(verdict))
    for note in verdict.notes:
        console.print(f"[bold]note:[/] {quoted(note)}", highlight=False)
    if report.failures:
        broken = ", ".join(r.metric.removesuffix("_s") for r in report.failures)
        console.print(f"[bold red]gate failed[/]: {broken}", highlight=False)
    elif report.undecided:
        unsure = ", ".join(r.metric.removesuffix("_s") for r in report.undecided)
        console.print(
            f"[bold yellow]gate undecided[/]: too few streams to judge {unsure}"
            f" ({verdict.baseline_streams:,} and {verdict.current_streams:,} streams);"
            " bench more streams",
            highlight=False,
        )
    elif not report.judged:
        console.print(
            "[bold yellow]gate undecided[/]: no rule could be judged: every gated metric is"
            " undefined in a run (did its streams fail?)",
            highlight=False,
        )
    else:
        console.print("[bold green]gate passed[/]: no limit broken")
