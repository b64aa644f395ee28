"""``steadystream analyze``: fleet metrics and the worst streams of recorded runs."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from steadystream.cli import app
from steadystream.cli._options import (
    FluidityDeadline,
    FluidityFirstDeadline,
    FluidityForm,
    QoeExpectedTtft,
    QoeForm,
    QoePace,
    RayAddress,
    StallThreshold,
    TtftTarget,
    exit_on_error,
    metric_config,
)


@app.command()
def analyze(
    files: Annotated[
        list[Path],
        typer.Argument(
            help="Timeline files (.jsonl, .jsonl.gz, .parquet), or folders of them (searched"
            " recursively)."
        ),
    ],
    by: Annotated[
        str | None,
        typer.Option(
            "--by",
            metavar="model|route|tenant",
            help="Break the fleet down by a label: model, route or tenant.",
        ),
    ] = None,
    stall_threshold: StallThreshold = "400ms",
    ttft_target: TtftTarget = "800ms",
    qoe_expected_ttft: QoeExpectedTtft = "1s",
    qoe_pace: QoePace = "100ms",
    qoe_form: QoeForm = "exact",
    fluidity_first_deadline: FluidityFirstDeadline = "100ms",
    fluidity_deadline: FluidityDeadline = "50ms",
    fluidity_form: FluidityForm = "documented",
    worst: Annotated[int, typer.Option(help="How many of the worst streams to list.")] = 10,
    json_output: Annotated[bool, typer.Option("--json", help="Print JSON for scripts.")] = False,
    ray: Annotated[
        bool,
        typer.Option(
            "--ray",
            help="Read and reduce the files in parallel, a Ray task per file (needs"
            " the ray extra; a local Ray unless RAY_ADDRESS or --ray-address says where).",
        ),
    ] = False,
    ray_address: RayAddress = None,
) -> None:
    """Per-stream jitter and fleet metrics: p99-of-p99, worst gaps, ITL goodput, TTFT."""
    from steadystream.analysis import timeline_files
    from steadystream.bench.summary import summarise, summarise_table
    from steadystream.bench.verdict import load_files
    from steadystream.cli import _render
    from steadystream.cli._inputs import read_engine_beside
    from steadystream.metrics import LABEL_DIMENSIONS

    if by is not None and by not in LABEL_DIMENSIONS:
        raise typer.BadParameter(f"must be one of {', '.join(LABEL_DIMENSIONS)}", param_hint="--by")
    config = metric_config(
        stall_threshold=stall_threshold,
        ttft_target=ttft_target,
        qoe_expected_ttft=qoe_expected_ttft,
        qoe_pace=qoe_pace,
        qoe_form=qoe_form,
        fluidity_first_deadline=fluidity_first_deadline,
        fluidity_deadline=fluidity_deadline,
        fluidity_form=fluidity_form,
    )
    with exit_on_error():
        path_notes: list[str] = []
        paths = timeline_files(files, path_notes)
        if ray or ray_address is not None:
            from steadystream.explanations import explain_files

            # A Ray task per file returns its per-stream rows, and its streams' clocks for
            # the stalls' causes, which a second round of tasks attributes (explain_files).
            engine_notes: list[str] = []
            engine = read_engine_beside(paths, None, engine_notes)
            on_ray = explain_files(
                paths,
                stall_threshold_ns=config.stall_threshold_ns,
                engine=engine,
                config=config,
                address=ray_address,
            )
            assert on_ray.tables is not None  # asked for with config
            summary = summarise_table(
                on_ray.tables.table,
                config,
                by=by,
                worst=worst,
                explanation=on_ray.explanation,
                files=on_ray.tables.file_numbers(),
            )
            notes = on_ray.notes + engine_notes
        else:
            timelines, numbers, notes = load_files(paths)
            engine = read_engine_beside(paths, None, notes)
            summary = summarise(timelines, config, by=by, worst=worst, engine=engine, files=numbers)
    summary.notes[:0] = path_notes + notes
    if len(paths) > 1:
        summary.notes.append(f"{len(paths)} files, {summary.fleet.streams} streams merged")
    if json_output:
        typer.echo(_render.to_json(summary))
    else:
        _render.print_summary(summary)
