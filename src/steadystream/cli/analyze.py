"""``steadystream analyze``: fleet metrics and the worst streams of recorded runs."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from steadystream.cli import app
from steadystream.cli._options import duration_ns, exit_on_error


@app.command()
def analyze(
    files: Annotated[
        list[Path], typer.Argument(help="Timeline files (.jsonl, .jsonl.gz, .parquet).")
    ],
    by: Annotated[
        str | None,
        typer.Option("--by", help="Break the fleet down by a label: model, route or tenant."),
    ] = None,
    stall_threshold: Annotated[
        str, typer.Option(help="A gap above this is a stall (and breaks ITL goodput).")
    ] = "400ms",
    ttft_target: Annotated[str, typer.Option(help="TTFT target for ITL goodput.")] = "800ms",
    worst: Annotated[int, typer.Option(help="How many of the worst streams to list.")] = 10,
    json_output: Annotated[bool, typer.Option("--json", help="Print JSON for scripts.")] = False,
) -> None:
    """Per-stream jitter and fleet metrics: p99-of-p99, worst gaps, ITL goodput, TTFT."""
    from steadystream.bench.summary import summarise
    from steadystream.bench.verdict import load_run
    from steadystream.cli import _render
    from steadystream.metrics import LABEL_DIMENSIONS, MetricConfig

    if by is not None and by not in LABEL_DIMENSIONS:
        raise typer.BadParameter(f"must be one of {', '.join(LABEL_DIMENSIONS)}", param_hint="--by")
    config = MetricConfig(
        stall_threshold_ns=duration_ns(stall_threshold, "--stall-threshold"),
        ttft_target_ns=duration_ns(ttft_target, "--ttft-target"),
    )
    with exit_on_error():
        runs = [load_run(path, required=False) for path in files]
    timelines = [timeline for run in runs for timeline in run.timelines]
    notes = [run.note for run in runs if run.note]
    summary = summarise(timelines, config, by=by, worst=worst)
    summary.notes[:0] = notes
    if json_output:
        typer.echo(_render.to_json(summary))
    else:
        _render.print_summary(summary)
