"""``steadystream gate``: fail a release whose streams got jerkier than the baseline's."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from steadystream.cli import app

if TYPE_CHECKING:
    from rich.console import Console

    from steadystream.metrics import MetricConfig

EXIT_REGRESSION = 1


@app.command()
def gate(
    baseline: Annotated[Path, typer.Argument(help="The reference run (timeline file).")],
    current: Annotated[Path, typer.Argument(help="The run to judge (timeline file).")],
    max_regression: Annotated[
        list[str] | None,
        typer.Option(
            "--max-regression",
            "-r",
            help=(
                "METRIC=LIMIT, e.g. p99_of_p99=10%, goodput=-2pt, ttft_p95=50ms; repeat or "
                "comma-separate. Replaces the default limit of the same metric."
            ),
        ),
    ] = None,
    no_defaults: Annotated[
        bool,
        typer.Option(
            "--no-defaults", help="Check only the rules given, not the default five as well."
        ),
    ] = False,
    stall_threshold: Annotated[
        str, typer.Option(help="A gap above this is a stall (and breaks ITL goodput).")
    ] = "400ms",
    ttft_target: Annotated[str, typer.Option(help="TTFT target for ITL goodput.")] = "800ms",
    json_output: Annotated[bool, typer.Option("--json", help="Print JSON for scripts.")] = False,
) -> None:
    """Compare two runs; exit 1 if any limit is broken, 0 if none, 2 on unusable input.

    Default limits: p99_of_p99=10%, p99_of_worst_gap=10%, goodput=-2pt, ttft_p95=15%,
    unstable_share=+1pt.
    """
    from rich.console import Console

    from steadystream.cli._options import duration_ns, exit_on_error
    from steadystream.metrics import MetricConfig

    config = MetricConfig(
        stall_threshold_ns=duration_ns(stall_threshold, "--stall-threshold"),
        ttft_target_ns=duration_ns(ttft_target, "--ttft-target"),
    )
    with exit_on_error():
        passed = judge(
            baseline,
            current,
            max_regression or [],
            defaults=not no_defaults,
            config=config,
            console=Console(),
            json_output=json_output,
        )
    if not passed:
        raise typer.Exit(EXIT_REGRESSION)


def judge(
    baseline: Path,
    current: Path,
    rules_text: list[str],
    *,
    defaults: bool,
    config: MetricConfig,
    console: Console,
    json_output: bool = False,
) -> bool:
    """Load both runs, print the verdict table; True when every limit holds.

    Shared with ``bench --gate``. Raises :class:`~steadystream.InputError` on unusable input.
    """
    import orjson

    from steadystream.bench.gate import compare, parse_rules
    from steadystream.bench.health import LAGGED_SHARE_LIMIT, lagged_streams
    from steadystream.cli._bench_view import gate_table, load_run
    from steadystream.metrics import fleet_metrics

    rules = parse_rules(rules_text, defaults=defaults)
    before, note_before = load_run(baseline)
    after, note_after = load_run(current)
    report = compare(fleet_metrics(before, config), fleet_metrics(after, config), rules)
    notes = [n for n in (note_before, note_after) if n]
    for name, run in ((baseline, before), (current, after)):
        lagged = lagged_streams(run)
        if lagged > LAGGED_SHARE_LIMIT * len(run):
            notes.append(
                f"{name}: {lagged} of {len(run)} streams were stamped while the bench client "
                "lagged; the verdict may reflect the client, not the server"
            )
    if json_output:
        payload = {
            "passed": report.passed,
            "rows": [
                {
                    "metric": r.metric,
                    "baseline": r.baseline,
                    "current": r.current,
                    "change": r.change,
                    "limit": r.limit,
                    "verdict": r.verdict,
                }
                for r in report.rows
            ],
            "notes": notes,
        }
        typer.echo(orjson.dumps(payload, option=orjson.OPT_INDENT_2).decode())
        return report.passed
    console.print(gate_table(report, str(baseline), str(current)))
    for note in notes:
        console.print(f"[bold]note:[/] {note}", highlight=False)
    if report.passed:
        console.print("[bold green]gate passed[/]: no limit broken")
    else:
        broken = ", ".join(r.metric.removesuffix("_s") for r in report.failures)
        console.print(f"[bold red]gate failed[/]: {broken}")
    return report.passed
