"""``steadystream explain``: the cause of every stall, and how right it is against the lab."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from steadystream.cli import app
from steadystream.cli._options import DURATION, RayAddress, duration_ns, exit_on_error


@app.command()
def explain(
    files: Annotated[
        list[Path],
        typer.Argument(
            help="Timeline files (.jsonl, .jsonl.gz, .parquet), or folders of them (searched"
            " recursively)."
        ),
    ],
    engine_metrics: Annotated[
        Path | None,
        typer.Option(
            "--engine-metrics",
            help="Engine metrics scraped during the run (default: RUN.engine-metrics.jsonl"
            " next to the first file, when there is one).",
        ),
    ] = None,
    stall_threshold: Annotated[
        str, typer.Option(metavar=DURATION, help="A gap above this is a stall.")
    ] = "400ms",
    truth: Annotated[
        list[Path] | None,
        typer.Option(help="Lab ground truth (lab --record FILE): score the attribution."),
    ] = None,
    stalls: Annotated[int, typer.Option(help="How many stalls to list, longest first.")] = 20,
    worst: Annotated[int, typer.Option(help="How many of the most hurt streams to list.")] = 10,
    json_output: Annotated[bool, typer.Option("--json", help="Print JSON for scripts.")] = False,
    ray: Annotated[
        bool,
        typer.Option(
            "--ray",
            help="Read the files and explain their stalls in parallel, Ray tasks per file"
            " (needs the ray extra; a local Ray unless RAY_ADDRESS or --ray-address says"
            " where). The same explanation as without it.",
        ),
    ] = False,
    ray_address: RayAddress = None,
) -> None:
    """Every stall's cause (or unknown), how sure, and why; stall time by cause; mitigations."""
    from steadystream.analysis import timeline_files
    from steadystream.attribution import explain as attribute
    from steadystream.attribution import score
    from steadystream.bench.verdict import load_files, load_runs
    from steadystream.cli import _explain_view
    from steadystream.cli._inputs import read_engine_beside

    threshold = duration_ns(stall_threshold, "--stall-threshold", positive=True)
    if stalls < 0 or worst < 0:
        raise typer.BadParameter("must be 0 or more", param_hint="--stalls/--worst")
    with exit_on_error():
        path_notes: list[str] = []
        paths = timeline_files(files, path_notes)
        if ray or ray_address is not None:
            from steadystream.explanations import explain_files

            engine_notes: list[str] = []
            engine = read_engine_beside(paths, engine_metrics, engine_notes)
            on_ray = explain_files(
                paths, stall_threshold_ns=threshold, engine=engine, worst=worst, address=ray_address
            )
            assert on_ray.explanation is not None  # asked without a table: always explained
            explanation, notes = on_ray.explanation, path_notes + on_ray.notes + engine_notes
        else:
            timelines, numbers, notes = load_files(paths)
            notes[:0] = path_notes
            engine = read_engine_beside(paths, engine_metrics, notes)
            explanation = attribute(
                timelines, stall_threshold_ns=threshold, engine=engine, worst=worst, files=numbers
            )
        scored = None
        if truth:
            truths, truth_notes = load_runs(truth)
            notes += truth_notes
            scored = score(explanation, truths)
    if json_output:
        typer.echo(_explain_view.to_json(explanation, scored, notes))
    else:
        _explain_view.print_explanation(explanation, scored, notes, stalls=stalls)
